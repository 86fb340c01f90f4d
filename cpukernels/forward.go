package cpukernels

import (
	"math"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// forwardScratch is one worker's tiles; nothing in it depends on N.
type forwardScratch[T kernels.Float] struct {
	qs  []T // Br×D: the query tile pre-multiplied by scale
	s   []T // Br×Bc: scores, then probabilities
	acc []T // Br×D: unnormalised output
	m   []T // Br: running row maximum
	l   []T // Br: running row sum of exp(S − m)
}

func newForwardScratch[T kernels.Float](d int) *forwardScratch[T] {
	return &forwardScratch[T]{
		qs:  make([]T, blockRows*d),
		s:   make([]T, blockRows*blockCols),
		acc: make([]T, blockRows*d),
		m:   make([]T, blockRows),
		l:   make([]T, blockRows),
	}
}

func forward[T kernels.Float](workers int, p kernels.Params, q, k, v, o, lse []T) error {
	if err := kernels.CheckForward(p, q, k, v, o, lse); err != nil {
		return err
	}
	heads := p.B * p.H
	kBlocks := ceilDiv(p.Nk, blockCols)
	// Kᵀ of every key block, D×Bc with row stride Bc, so that S = Q·Kᵀ is
	// a plain row-major GEMM whose inner loop runs along contiguous keys.
	// Blocks rather than one D×Nk matrix per head: a row stride of Nk
	// floats, a multiple of 4 KiB for the usual N, would map all D rows of a
	// block onto the same few L1 sets.
	ktBlock := p.D * blockCols
	kt := make([]T, heads*kBlocks*ktBlock)
	parallelFor(workers, heads*kBlocks, func(_, unit int) {
		bh, kb := unit/kBlocks, unit%kBlocks
		cols := min(blockCols, p.Nk-kb*blockCols)
		transpose(cols, p.D, k[(bh*p.Nk+kb*blockCols)*p.D:], p.D, kt[unit*ktBlock:], blockCols)
	})

	qBlocks := ceilDiv(p.Nq, blockRows)
	scratch := make([]*forwardScratch[T], max(1, min(workers, heads*qBlocks)))
	for w := range scratch {
		scratch[w] = newForwardScratch[T](p.D)
	}
	ops := opsFor[T]()
	parallelFor(workers, heads*qBlocks, func(w, unit int) {
		bh, qb := unit/qBlocks, unit%qBlocks
		row0 := qb * blockRows
		rows := min(blockRows, p.Nq-row0)
		qOff, kOff := (bh*p.Nq+row0)*p.D, bh*p.Nk*p.D
		forwardRowBlock(ops, scratch[w], p, row0, rows,
			q[qOff:qOff+rows*p.D], kt[bh*kBlocks*ktBlock:(bh+1)*kBlocks*ktBlock], v[kOff:kOff+p.Nk*p.D],
			o[qOff:qOff+rows*p.D], lse[bh*p.Nq+row0:bh*p.Nq+row0+rows])
	})
	return nil
}

// forwardRowBlock computes rows [row0, row0+rows) of one head: q and o hold
// those rows, kt is the head's Kᵀ by key blocks (D×Bc each) and v its V
// (Nk×D).
func forwardRowBlock[T kernels.Float](ops mathOps[T], sc *forwardScratch[T], p kernels.Params, row0, rows int, q, kt, v, o, lse []T) {
	d := p.D
	scale := T(p.Scale)
	copy(sc.qs, q)
	ops.scale(sc.qs[:rows*d], scale)
	clear(sc.acc[:rows*d])
	negInf := T(math.Inf(-1))
	for r := range rows {
		sc.m[r], sc.l[r] = negInf, 0
	}
	// Rows see keys in increasing order, so the last row bounds the loop.
	keys := p.VisibleKeys(row0 + rows - 1)
	for col0 := 0; col0 < keys; col0 += blockCols {
		cols := min(blockCols, keys-col0)
		s := sc.s[:rows*blockCols]
		for r := range rows {
			clear(s[r*blockCols : r*blockCols+cols])
		}
		// S = (scale·Q)·Kᵀ for this key block.
		ops.gemm(rows, cols, d, sc.qs, d, kt[col0*d:], blockCols, s, blockCols)
		for r := range rows {
			sr := s[r*blockCols : r*blockCols+cols]
			// Keys past the row's causal limit are masked; only the last
			// blocks of a causal row are ever cut.
			seen := min(cols, max(0, p.VisibleKeys(row0+r)-col0))
			for c := seen; c < cols; c++ {
				sr[c] = negInf
			}
			mNew := max(sc.m[r], ops.max(sr[:seen]))
			if math.IsInf(float64(mNew), -1) {
				// Nothing seen yet: exp(−Inf − (−Inf)) would be NaN.
				// Zero probabilities keep the accumulator at 0.
				clear(sr)
				continue
			}
			sum := ops.expShift(sr, mNew)
			if mNew == sc.m[r] {
				// The maximum did not move, the common case after the
				// first blocks: no rescaling, and no scalar exp.
				sc.l[r] += sum
				continue
			}
			alpha := T(math.Exp(float64(sc.m[r] - mNew))) // 0 on the first visible block
			sc.l[r] = sc.l[r]*alpha + sum
			sc.m[r] = mNew
			ops.scale(sc.acc[r*d:(r+1)*d], alpha)
		}
		// acc += P·V for this key block.
		ops.gemm(rows, d, cols, s, blockCols, v[col0*d:], d, sc.acc, d)
	}
	for r := range rows {
		or := o[r*d : (r+1)*d]
		if sc.l[r] == 0 {
			clear(or)
			lse[r] = T(math.Inf(1))
			continue
		}
		inv := 1 / sc.l[r]
		for i, x := range sc.acc[r*d : (r+1)*d] {
			or[i] = x * inv
		}
		lse[r] = sc.m[r] + T(math.Log(float64(sc.l[r])))
	}
}
