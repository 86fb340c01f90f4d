package cpukernels

import (
	"math"

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

// The backward works on transposed tiles — Sᵀ, Pᵀ, dSᵀ, one row per key —
// so that every product is a plain row-major GEMM and no tile is transposed
// inside the loops: dV_j += Pᵀ·dO_i and dK_j += dSᵀ·Q_i take them as they
// are, and dQ is accumulated as dQᵀ_i += K_jᵀ·dSᵀ and transposed once at the
// end. The per-query terms LSE and D ride along as an extra inner dimension:
// the query side carries −LSE_i (or −D_i) in row D and the key side a column
// of ones, so one GEMM yields Sᵀ − LSE and another dPᵀ − D.

// backwardScratch is one worker's tiles; nothing in it depends on N.
type backwardScratch[T kernels.Float] struct {
	ka, va []T // Bc×(D+1): K_j and V_j with a column of ones
	kt     []T // D×Bc: K_jᵀ
	pt     []T // Bc×Br: Sᵀ − LSE, then Pᵀ
	dst    []T // Bc×Br: dPᵀ − D, then scale·dSᵀ
	dk, dv []T // Bc×D: accumulators for the key block
}

func newBackwardScratch[T kernels.Float](d int) *backwardScratch[T] {
	return &backwardScratch[T]{
		ka: make([]T, blockCols*(d+1)), va: make([]T, blockCols*(d+1)),
		kt: make([]T, d*blockCols),
		pt: make([]T, blockCols*blockRows), dst: make([]T, blockCols*blockRows),
		dk: make([]T, blockCols*d), dv: make([]T, blockCols*d),
	}
}

// headTensors are one head's slices of every tensor the backward touches.
// qsT and doT hold, per query block, (scale·Q)ᵀ over −LSE and dOᵀ over −D,
// each (D+1)×Br; dqT holds this chunk's dQᵀ per query block, D×Br.
type headTensors[T kernels.Float] struct {
	q, k, v, do, dk, dv []T
	qsT, doT, dqT       []T
}

func backward[T kernels.Float](workers int, p kernels.Params, q, k, v, o, lse, do, dq, dk, dv []T) error {
	if err := kernels.CheckBackward(p, q, k, v, o, lse, do, dq, dk, dv); err != nil {
		return err
	}
	heads, d := p.B*p.H, p.D
	qBlocks := ceilDiv(p.Nq, blockRows)
	augBlock := (d + 1) * blockRows // one query block of qsT or doT
	qsT := make([]T, heads*qBlocks*augBlock)
	doT := make([]T, heads*qBlocks*augBlock)
	scale := T(p.Scale)
	parallelFor(workers, heads*qBlocks, func(_, unit int) {
		bh, qb := unit/qBlocks, unit%qBlocks
		row0 := qb * blockRows
		rows := min(blockRows, p.Nq-row0)
		at := (bh*p.Nq + row0) * d
		qs, dot := qsT[unit*augBlock:(unit+1)*augBlock], doT[unit*augBlock:(unit+1)*augBlock]
		transpose(rows, d, q[at:], d, qs, blockRows)
		transpose(rows, d, do[at:], d, dot, blockRows)
		for i := range d * blockRows {
			qs[i] *= scale
		}
		for r := range rows {
			// D_i = rowsum(dO∘O), the correction term of the softmax gradient.
			var rowD T
			for c, x := range do[at+r*d : at+(r+1)*d] {
				rowD += x * o[at+r*d+c]
			}
			dot[d*blockRows+r] = -rowD
			// A row that sees no key has LSE = +Inf; its P is masked to 0
			// below, and a 0 here keeps the GEMM free of infinities.
			if l := lse[bh*p.Nq+row0+r]; !math.IsInf(float64(l), 1) {
				qs[d*blockRows+r] = -l
			}
		}
	})

	chunks := keyChunks(p)
	kBlocks := ceilDiv(p.Nk, blockCols)
	perChunk := ceilDiv(kBlocks, chunks)
	dqBlock := d * blockRows
	dqT := make([][]T, chunks) // each chunk's dQᵀ, summed in chunk order below
	for c := range dqT {
		dqT[c] = make([]T, heads*qBlocks*dqBlock)
	}
	scratch := make([]*backwardScratch[T], max(1, min(workers, heads*chunks)))
	for w := range scratch {
		scratch[w] = newBackwardScratch[T](d)
	}
	ops := opsFor[T]()
	parallelFor(workers, heads*chunks, func(w, unit int) {
		bh, c := unit/chunks, unit%chunks
		kOff := bh * p.Nk * d
		t := headTensors[T]{
			q: q[bh*p.Nq*d : (bh+1)*p.Nq*d], k: k[kOff : kOff+p.Nk*d], v: v[kOff : kOff+p.Nk*d],
			do: do[bh*p.Nq*d : (bh+1)*p.Nq*d], dk: dk[kOff : kOff+p.Nk*d], dv: dv[kOff : kOff+p.Nk*d],
			qsT: qsT[bh*qBlocks*augBlock : (bh+1)*qBlocks*augBlock],
			doT: doT[bh*qBlocks*augBlock : (bh+1)*qBlocks*augBlock],
			dqT: dqT[c][bh*qBlocks*dqBlock : (bh+1)*qBlocks*dqBlock],
		}
		for kb := c * perChunk; kb < min(kBlocks, (c+1)*perChunk); kb++ {
			backwardKeyBlock(ops, scratch[w], p, kb*blockCols, t)
		}
	})
	// dQ = Σ_chunks dQᵀ, summed in chunk order, then transposed.
	parallelFor(workers, heads*qBlocks, func(_, unit int) {
		sum := dqT[0][unit*dqBlock : (unit+1)*dqBlock]
		for c := 1; c < chunks; c++ {
			for i, x := range dqT[c][unit*dqBlock : (unit+1)*dqBlock] {
				sum[i] += x
			}
		}
		bh, qb := unit/qBlocks, unit%qBlocks
		row0 := qb * blockRows
		rows := min(blockRows, p.Nq-row0)
		transpose(d, rows, sum, blockRows, dq[(bh*p.Nq+row0)*d:], d)
	})
	return nil
}

// backwardKeyBlock computes dK and dV for keys [col0, col0+Bc) of one head
// and adds this block's share of dQᵀ into t.dqT.
func backwardKeyBlock[T kernels.Float](ops mathOps[T], sc *backwardScratch[T], p kernels.Params, col0 int, t headTensors[T]) {
	d, da := p.D, p.D+1
	cols := min(blockCols, p.Nk-col0)
	scale := T(p.Scale)
	for c := range cols {
		copy(sc.ka[c*da:c*da+d], t.k[(col0+c)*d:(col0+c+1)*d])
		copy(sc.va[c*da:c*da+d], t.v[(col0+c)*d:(col0+c+1)*d])
		sc.ka[c*da+d], sc.va[c*da+d] = 1, 1
	}
	transpose(cols, d, t.k[col0*d:], d, sc.kt, blockCols)
	clear(sc.dk[:cols*d])
	clear(sc.dv[:cols*d])

	// Under a causal mask, query rows before firstRow see none of these keys.
	firstRow := 0
	if p.Causal {
		firstRow = max(0, col0-(p.Nk-p.Nq))
	}
	for row0 := firstRow / blockRows * blockRows; row0 < p.Nq; row0 += blockRows {
		qb := row0 / blockRows
		rows := min(blockRows, p.Nq-row0)
		qsT := t.qsT[qb*da*blockRows : (qb+1)*da*blockRows]
		doT := t.doT[qb*da*blockRows : (qb+1)*da*blockRows]
		pt, dst := sc.pt[:cols*blockRows], sc.dst[:cols*blockRows]
		clear(pt)
		clear(dst)
		// Sᵀ − LSE and dPᵀ − D, one row per key.
		ops.gemm(cols, rows, da, sc.ka, da, qsT, blockRows, pt, blockRows)
		ops.gemm(cols, rows, da, sc.va, da, doT, blockRows, dst, blockRows)
		for c := range cols {
			ptc, dsc := pt[c*blockRows:c*blockRows+rows], dst[c*blockRows:c*blockRows+rows]
			// Query rows before seenFrom do not see key col0+c; that covers
			// every row that sees no key at all, whose LSE is +Inf.
			seenFrom := 0
			if p.Causal {
				seenFrom = min(rows, max(0, col0+c-(p.Nk-p.Nq)-row0))
			}
			clear(ptc[:seenFrom])
			ops.expShift(ptc[seenFrom:], 0) // P = exp(S − LSE)
			// scale·dS = scale·P∘(dP − D), scale folded in once here rather
			// than into both dQ and dK.
			for r, pr := range ptc {
				dsc[r] = scale * pr * dsc[r]
			}
		}
		qi, doi := t.q[row0*d:(row0+rows)*d], t.do[row0*d:(row0+rows)*d]
		// dV_j += Pᵀ·dO_i, dK_j += scale·dSᵀ·Q_i, dQᵀ_i += K_jᵀ·(scale·dSᵀ).
		ops.gemm(cols, d, rows, pt, blockRows, doi, d, sc.dv, d)
		ops.gemm(cols, d, rows, dst, blockRows, qi, d, sc.dk, d)
		ops.gemm(d, rows, cols, sc.kt, blockCols, dst, blockRows, t.dqT[qb*d*blockRows:], blockRows)
	}
	copy(t.dk[col0*d:(col0+cols)*d], sc.dk[:cols*d])
	copy(t.dv[col0*d:(col0+cols)*d], sc.dv[:cols*d])
}
