package cpukernels

import (
	"math"

	"github.com/gorgonia-flash/flashattention/internal/hostmem"
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

// forwardScratchLen is the number of elements of one forwardScratch.
func forwardScratchLen(d int) int { return 2*blockRows*d + blockRows*blockCols + 2*blockRows }

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
	qBlocks := ceilDiv(p.Nq, blockRows)
	nScratch := max(1, min(workers, heads*qBlocks))
	if err := hostmem.CheckElems[T](p.KLen() + nScratch*forwardScratchLen(p.D)); err != nil {
		return err
	}
	// Kᵀ of every key block, D×w with row stride w for a block of w keys,
	// so that S = Q·Kᵀ is a plain row-major GEMM whose inner loop runs along
	// contiguous keys. Blocks rather than one D×Nk matrix per head: a row
	// stride of Nk floats, a multiple of 4 KiB for the usual N, would map
	// all D rows of a block onto the same few L1 sets. The stride is the
	// block's own width, not Bc, so that Kᵀ takes exactly the memory of K
	// however short the sequences: padding every head to Bc keys would
	// multiply it by Bc when Nk = 1.
	kt := make([]T, p.KLen())
	parallelFor(workers, heads*kBlocks, func(_, unit int) {
		bh, kb := unit/kBlocks, unit%kBlocks
		at := (bh*p.Nk + kb*blockCols) * p.D
		w := min(blockCols, p.Nk-kb*blockCols)
		transpose(w, p.D, k[at:], p.D, kt[at:], w)
	})

	scratch := make([]*forwardScratch[T], nScratch)
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
			q[qOff:qOff+rows*p.D], kt[kOff:kOff+p.Nk*p.D], v[kOff:kOff+p.Nk*p.D],
			o[qOff:qOff+rows*p.D], lse[bh*p.Nq+row0:bh*p.Nq+row0+rows])
	})
	return nil
}

// forwardRowBlock computes rows [row0, row0+rows) of one head: q and o hold
// those rows, kt is the head's Kᵀ by key blocks (D×w each) and v its V
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
		ops.gemm(rows, cols, d, sc.qs, d, kt[col0*d:], min(blockCols, p.Nk-col0), s, blockCols)
		for r := range rows {
			sr := s[r*blockCols : r*blockCols+cols]
			// Keys past the row's causal limit are masked; only the last
			// blocks of a causal row are ever cut. Their probabilities are
			// exactly 0, whatever their scores (even NaN) were.
			seen := min(cols, max(0, p.VisibleKeys(row0+r)-col0))
			clear(sr[seen:])
			if seen > 0 {
				onlineSoftmax(ops, sc, r, sr[:seen], d)
			}
		}
		// acc += P·V for this key block.
		vb := v[col0*d : (col0+cols)*d]
		if p.Causal && col0+cols-1 > row0+p.Nk-p.Nq && !allFinite(vb) {
			// The first rows do not see the last keys of this block, and a
			// masked P of 0 times an infinite or NaN value would still be
			// NaN: each row takes only the keys it sees.
			for r := range rows {
				if seen := min(cols, max(0, p.VisibleKeys(row0+r)-col0)); seen > 0 {
					ops.gemm(1, d, seen, s[r*blockCols:], blockCols, vb, d, sc.acc[r*d:], d)
				}
			}
			continue
		}
		ops.gemm(rows, d, cols, s, blockCols, vb, d, sc.acc, d)
	}
	for r := range rows {
		or := o[r*d : (r+1)*d]
		if p.VisibleKeys(row0+r) == 0 {
			// Decided by the mask, not by l = 0, which a row whose scores
			// are all −Inf reaches too (and that row's O is NaN).
			clear(or)
			lse[r] = T(math.Inf(1))
			continue
		}
		// For a row whose scores were all −Inf, acc = l = 0 and O = 0·∞ =
		// NaN, LSE = −Inf + log 0 = −Inf, the IEEE values of the formulas.
		inv := 1 / sc.l[r]
		for i, x := range sc.acc[r*d : (r+1)*d] {
			or[i] = x * inv
		}
		lse[r] = sc.m[r] + T(math.Log(float64(sc.l[r])))
	}
}

// onlineSoftmax folds the visible scores sr of row r into its running
// maximum m, sum l and accumulator, and leaves in sr the probabilities
// exp(S − m) to multiply with V.
//
// The maximum skips NaN scores (ops.max), so a NaN reaches l through its
// exponential and makes O and LSE NaN at the end. That needs a finite
// shift; when there is none, the row is handled here so that l, m and acc
// end with the IEEE values of log Σ exp(S) and O.
func onlineSoftmax[T kernels.Float](ops mathOps[T], sc *forwardScratch[T], r int, sr []T, d int) {
	mOld := sc.m[r]
	mNew := max(mOld, ops.max(sr))
	if math.IsInf(float64(mNew), 0) {
		// Every score so far is −Inf or NaN, or one is +Inf: exp(S − m)
		// would be (±Inf) − (±Inf) = NaN. A NaN score makes l NaN for
		// good. While m = −Inf these probabilities are 0 for any finite
		// maximum to come; once m = +Inf, O is ∞/∞ = NaN (acc is poisoned)
		// and LSE = +Inf (l is +Inf, unless NaN).
		if hasNaN(sr) {
			sc.l[r] = T(math.NaN())
		}
		if mNew > mOld {
			ops.scale(sc.acc[r*d:(r+1)*d], T(math.NaN()))
			sc.l[r] += T(math.Inf(1))
			sc.m[r] = mNew
		}
		clear(sr)
		return
	}
	sum := ops.expShift(sr, mNew)
	if mNew == mOld {
		// The maximum did not move, the common case after the first
		// blocks: no rescaling, and no scalar exp.
		sc.l[r] += sum
		return
	}
	alpha := T(math.Exp(float64(mOld - mNew))) // 0 on the first finite block
	sc.l[r] = sc.l[r]*alpha + sum
	sc.m[r] = mNew
	ops.scale(sc.acc[r*d:(r+1)*d], alpha)
}
