package cpukernels

import (
	"github.com/gorgonia-flash/flashattention/kernels"
)

// maxKeyChunks bounds how many key chunks of one head run in parallel in the
// backward, and so how many dQ buffers exist.
const maxKeyChunks = 4

// keyChunks picks, from the shape alone, how many chunks each head's keys are
// split into: enough for about 32 work units in all, and at most one per key
// block. Never from the worker count, so that results do not depend on it.
func keyChunks(p kernels.Params) int {
	return max(1, min(maxKeyChunks, ceilDiv(32, p.B*p.H), ceilDiv(p.Nk, blockCols)))
}

// backwardScratch is one worker's tiles; nothing in it depends on N.
type backwardScratch[T kernels.Float] struct {
	kt, vt  []T // D×Bc: the key block's Kᵀ and Vᵀ
	dk, dv  []T // Bc×D: accumulators for the key block
	qs      []T // Br×D: scale·Q_i
	s, ds   []T // Br×Bc: scores → P, and dP → scale·dS
	st, dst []T // Bc×Br: Pᵀ and scale·dSᵀ
}

func newBackwardScratch[T kernels.Float](d int) *backwardScratch[T] {
	return &backwardScratch[T]{
		kt: make([]T, d*blockCols), vt: make([]T, d*blockCols),
		dk: make([]T, blockCols*d), dv: make([]T, blockCols*d),
		qs: make([]T, blockRows*d),
		s:  make([]T, blockRows*blockCols), ds: make([]T, blockRows*blockCols),
		st: make([]T, blockCols*blockRows), dst: make([]T, blockCols*blockRows),
	}
}

// headTensors are one head's slices of every tensor the backward touches.
type headTensors[T kernels.Float] struct {
	q, k, v, do, dq, dk, dv []T
	lse, rowD               []T
}

func backward[T kernels.Float](workers int, p kernels.Params, q, k, v, o, lse, do, dq, dk, dv []T) error {
	if err := kernels.CheckBackward(p, q, k, v, o, lse, do, dq, dk, dv); err != nil {
		return err
	}
	heads := p.B * p.H
	// D_i = rowsum(dO∘O), the correction term of the softmax gradient.
	rowD := make([]T, p.LSELen())
	parallelFor(workers, heads, func(_, bh int) {
		for i := range p.Nq {
			at := (bh*p.Nq + i) * p.D
			var sum T
			for d, x := range do[at : at+p.D] {
				sum += x * o[at+d]
			}
			rowD[bh*p.Nq+i] = sum
		}
	})

	chunks := keyChunks(p)
	kBlocks := ceilDiv(p.Nk, blockCols)
	perChunk := ceilDiv(kBlocks, chunks)
	// Chunk 0 accumulates straight into dq; the others into their own
	// buffers, summed below in chunk order.
	dqParts := make([][]T, chunks)
	dqParts[0] = dq
	for c := 1; c < chunks; c++ {
		dqParts[c] = make([]T, len(dq))
	}
	clear(dq)
	scratch := make([]*backwardScratch[T], max(1, min(workers, heads*chunks)))
	for w := range scratch {
		scratch[w] = newBackwardScratch[T](p.D)
	}
	ops := opsFor[T]()
	parallelFor(workers, heads*chunks, func(w, unit int) {
		bh, c := unit/chunks, unit%chunks
		qOff, kOff := bh*p.Nq*p.D, bh*p.Nk*p.D
		qEnd, kEnd := qOff+p.Nq*p.D, kOff+p.Nk*p.D
		t := headTensors[T]{
			q: q[qOff:qEnd], k: k[kOff:kEnd], v: v[kOff:kEnd], do: do[qOff:qEnd],
			dq: dqParts[c][qOff:qEnd], dk: dk[kOff:kEnd], dv: dv[kOff:kEnd],
			lse: lse[bh*p.Nq : (bh+1)*p.Nq], rowD: rowD[bh*p.Nq : (bh+1)*p.Nq],
		}
		for kb := c * perChunk; kb < min(kBlocks, (c+1)*perChunk); kb++ {
			backwardKeyBlock(ops, scratch[w], p, kb*blockCols, t)
		}
	})
	if chunks > 1 {
		parallelFor(workers, heads, func(_, bh int) {
			for c := 1; c < chunks; c++ {
				part := dqParts[c][bh*p.Nq*p.D : (bh+1)*p.Nq*p.D]
				dst := dq[bh*p.Nq*p.D : (bh+1)*p.Nq*p.D]
				for i, x := range part {
					dst[i] += x
				}
			}
		})
	}
	return nil
}

// backwardKeyBlock computes dK and dV for keys [col0, col0+Bc) of one head
// and adds this block's share of dQ into t.dq.
func backwardKeyBlock[T kernels.Float](ops mathOps[T], sc *backwardScratch[T], p kernels.Params, col0 int, t headTensors[T]) {
	d := p.D
	cols := min(blockCols, p.Nk-col0)
	scale := T(p.Scale)
	transpose(cols, d, t.k[col0*d:], d, sc.kt, blockCols)
	transpose(cols, d, t.v[col0*d:], d, sc.vt, blockCols)
	clear(sc.dk[:cols*d])
	clear(sc.dv[:cols*d])

	// Under a causal mask, rows before firstRow see none of these keys.
	firstRow := 0
	if p.Causal {
		firstRow = max(0, col0-(p.Nk-p.Nq))
	}
	for row0 := firstRow / blockRows * blockRows; row0 < p.Nq; row0 += blockRows {
		rows := min(blockRows, p.Nq-row0)
		qi := t.q[row0*d : (row0+rows)*d]
		copy(sc.qs, qi)
		ops.scale(sc.qs[:rows*d], scale)
		s, ds := sc.s[:rows*blockCols], sc.ds[:rows*blockCols]
		for r := range rows {
			clear(s[r*blockCols : r*blockCols+cols])
			clear(ds[r*blockCols : r*blockCols+cols])
		}
		// S = (scale·Q_i)·K_jᵀ and dP = dO_i·V_jᵀ.
		ops.gemm(rows, cols, d, sc.qs, d, sc.kt, blockCols, s, blockCols)
		doi := t.do[row0*d : (row0+rows)*d]
		ops.gemm(rows, cols, d, doi, d, sc.vt, blockCols, ds, blockCols)
		for r := range rows {
			sr, dsr := s[r*blockCols:r*blockCols+cols], ds[r*blockCols:r*blockCols+cols]
			seen := min(cols, max(0, p.VisibleKeys(row0+r)-col0))
			// P = exp(S − LSE). A row that sees no key has LSE = +Inf, so
			// seen = 0 here and its P stays 0 instead of exp(−Inf+Inf).
			if seen > 0 {
				ops.expShift(sr[:seen], t.lse[row0+r])
			}
			clear(sr[seen:])
			// scale·dS = scale·P∘(dP − D_i), with scale folded in once here
			// rather than into both dQ and dK.
			di := t.rowD[row0+r]
			for c, pc := range sr {
				dsr[c] = scale * pc * (dsr[c] - di)
			}
		}
		transpose(rows, cols, s, blockCols, sc.st, blockRows)
		transpose(rows, cols, ds, blockCols, sc.dst, blockRows)
		// dV_j += Pᵀ·dO_i, dK_j += scale·dSᵀ·Q_i, dQ_i += scale·dS·K_j.
		ops.gemm(cols, d, rows, sc.st, blockRows, doi, d, sc.dv, d)
		ops.gemm(cols, d, rows, sc.dst, blockRows, qi, d, sc.dk, d)
		ops.gemm(rows, d, cols, ds, blockCols, t.k[col0*d:], d, t.dq[row0*d:], d)
	}
	copy(t.dk[col0*d:(col0+cols)*d], sc.dk[:cols*d])
	copy(t.dv[col0*d:(col0+cols)*d], sc.dv[:cols*d])
}
