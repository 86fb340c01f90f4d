package cpukernels

import (
	"github.com/gorgonia-flash/flashattention/internal/hostmem"
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
//
// The packed query-side arrays (qsT, doT, dqT) hold each query block of r
// rows as a matrix with row stride r, its actual row count, not Br: padding
// every block to Br rows would multiply their size by Br when Nq = 1.

// backwardScratch is one worker's tiles; nothing in it depends on N.
type backwardScratch[T kernels.Float] struct {
	ka, va []T // Bc×(D+1): K_j and V_j with a column of ones
	kt     []T // D×Bc: K_jᵀ
	pt     []T // Bc×Br: Sᵀ − LSE, then Pᵀ
	dst    []T // Bc×Br: dPᵀ − D, then scale·dSᵀ
	dk, dv []T // Bc×D: accumulators for the key block
}

// backwardScratchLen is the number of elements of one backwardScratch.
func backwardScratchLen(d int) int {
	return 2*blockCols*(d+1) + d*blockCols + 2*blockCols*blockRows + 2*blockCols*d
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
// qsT and doT hold, per query block of r rows, (scale·Q)ᵀ over −LSE and dOᵀ
// over −D, each (D+1)×r; dqT holds this chunk's dQᵀ per query block, D×r.
type headTensors[T kernels.Float] struct {
	q, k, v, do, dk, dv []T
	qsT, doT, dqT       []T
}

func backward[T kernels.Float](workers int, p kernels.Params, q, k, v, o, lse, do, dq, dk, dv []T) error {
	if err := kernels.CheckBackward(p, q, k, v, o, lse, do, dq, dk, dv); err != nil {
		return err
	}
	heads, d, da := p.B*p.H, p.D, p.D+1
	qBlocks := ceilDiv(p.Nq, blockRows)
	chunks := keyChunks(p)
	nScratch := max(1, min(workers, heads*chunks))
	aug := heads * p.Nq * da // elements of qsT or doT
	if err := hostmem.CheckElems[T](2*aug + chunks*p.QLen() + nScratch*backwardScratchLen(d)); err != nil {
		return err
	}
	qsT, doT := make([]T, aug), make([]T, aug)
	scale := T(p.Scale)
	parallelFor(workers, heads*qBlocks, func(_, unit int) {
		bh, qb := unit/qBlocks, unit%qBlocks
		row0 := qb * blockRows
		rows := min(blockRows, p.Nq-row0)
		at := (bh*p.Nq + row0) * d
		packed := (bh*p.Nq + row0) * da
		qs, dot := qsT[packed:packed+da*rows], doT[packed:packed+da*rows]
		transpose(rows, d, q[at:], d, qs, rows)
		transpose(rows, d, do[at:], d, dot, rows)
		for i := range d * rows {
			qs[i] *= scale
		}
		for r := range rows {
			// D_i = rowsum(dO∘O), the correction term of the softmax gradient.
			var rowD T
			for c, x := range do[at+r*d : at+(r+1)*d] {
				rowD += x * o[at+r*d+c]
			}
			dot[d*rows+r] = -rowD
			// A row that sees no key has LSE = +Inf and P masked to 0
			// below; a 0 here keeps its column of the GEMM free of
			// infinities. Any other LSE, even ±Inf or NaN, enters as it
			// is, so that exp(S − LSE) takes its IEEE value.
			if p.VisibleKeys(row0+r) > 0 {
				qs[d*rows+r] = -lse[bh*p.Nq+row0+r]
			}
		}
	})

	kBlocks := ceilDiv(p.Nk, blockCols)
	perChunk := ceilDiv(kBlocks, chunks)
	dqT := make([][]T, chunks) // each chunk's dQᵀ, summed in chunk order below
	for c := range dqT {
		dqT[c] = make([]T, p.QLen())
	}
	scratch := make([]*backwardScratch[T], nScratch)
	for w := range scratch {
		scratch[w] = newBackwardScratch[T](d)
	}
	ops := opsFor[T]()
	parallelFor(workers, heads*chunks, func(w, unit int) {
		bh, c := unit/chunks, unit%chunks
		qOff, kOff := bh*p.Nq*d, bh*p.Nk*d
		t := headTensors[T]{
			q: q[qOff : qOff+p.Nq*d], k: k[kOff : kOff+p.Nk*d], v: v[kOff : kOff+p.Nk*d],
			do: do[qOff : qOff+p.Nq*d], dk: dk[kOff : kOff+p.Nk*d], dv: dv[kOff : kOff+p.Nk*d],
			qsT: qsT[bh*p.Nq*da : (bh+1)*p.Nq*da],
			doT: doT[bh*p.Nq*da : (bh+1)*p.Nq*da],
			dqT: dqT[c][qOff : qOff+p.Nq*d],
		}
		for kb := c * perChunk; kb < min(kBlocks, (c+1)*perChunk); kb++ {
			backwardKeyBlock(ops, scratch[w], p, kb*blockCols, t)
		}
	})
	// dQ = Σ_chunks dQᵀ, summed in chunk order, then transposed.
	parallelFor(workers, heads*qBlocks, func(_, unit int) {
		bh, qb := unit/qBlocks, unit%qBlocks
		row0 := qb * blockRows
		rows := min(blockRows, p.Nq-row0)
		at := (bh*p.Nq + row0) * d
		sum := dqT[0][at : at+d*rows]
		for c := 1; c < chunks; c++ {
			for i, x := range dqT[c][at : at+d*rows] {
				sum[i] += x
			}
		}
		transpose(d, rows, sum, rows, dq[at:], d)
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
	keysFinite := -1 // unknown until a masked tile asks

	// Under a causal mask, query rows before firstRow see none of these keys.
	firstRow := 0
	if p.Causal {
		firstRow = max(0, col0-(p.Nk-p.Nq))
	}
	for row0 := firstRow / blockRows * blockRows; row0 < p.Nq; row0 += blockRows {
		rows := min(blockRows, p.Nq-row0)
		qsT := t.qsT[row0*da : (row0+rows)*da]
		doT := t.doT[row0*da : (row0+rows)*da]
		pt, dst := sc.pt[:cols*blockRows], sc.dst[:cols*blockRows]
		clear(pt)
		clear(dst)
		// Sᵀ − LSE and dPᵀ − D, one row per key.
		ops.gemm(cols, rows, da, sc.ka, da, qsT, rows, pt, blockRows)
		ops.gemm(cols, rows, da, sc.va, da, doT, rows, dst, blockRows)
		for c := range cols {
			ptc, dsc := pt[c*blockRows:c*blockRows+rows], dst[c*blockRows:c*blockRows+rows]
			// Query rows before seenFrom do not see key col0+c; that covers
			// every row that sees no key at all. Their P and dS are set to
			// exactly 0, not computed: S − LSE or dP − D may be NaN there.
			seenFrom := seenFrom(p, row0, rows, col0+c)
			clear(ptc[:seenFrom])
			ops.expShift(ptc[seenFrom:], 0) // P = exp(S − LSE)
			// scale·dS = scale·P∘(dP − D), scale folded in once here rather
			// than into both dQ and dK.
			clear(dsc[:seenFrom])
			for r := seenFrom; r < rows; r++ {
				dsc[r] = scale * ptc[r] * dsc[r]
			}
		}
		qi, doi := t.q[row0*d:(row0+rows)*d], t.do[row0*d:(row0+rows)*d]
		dqT := t.dqT[row0*d : (row0+rows)*d]
		if p.Causal && col0+cols-1 > row0+p.Nk-p.Nq {
			// Some of these rows do not see some of these keys. A masked P
			// or dS of 0 times an infinite or NaN operand would still be
			// NaN, so unless every operand is finite each product takes
			// only the visible pairs.
			if keysFinite < 0 {
				keysFinite = 0
				if allFinite(t.k[col0*d : (col0+cols)*d]) {
					keysFinite = 1
				}
			}
			if keysFinite == 0 || !allFinite(qi) || !allFinite(doi) {
				backwardMaskedTile(ops, sc, p, row0, rows, col0, cols, qi, doi, dqT)
				continue
			}
		}
		// dV_j += Pᵀ·dO_i, dK_j += scale·dSᵀ·Q_i, dQᵀ_i += K_jᵀ·(scale·dSᵀ).
		ops.gemm(cols, d, rows, pt, blockRows, doi, d, sc.dv, d)
		ops.gemm(cols, d, rows, dst, blockRows, qi, d, sc.dk, d)
		ops.gemm(d, rows, cols, sc.kt, blockCols, dst, blockRows, dqT, rows)
	}
	copy(t.dk[col0*d:(col0+cols)*d], sc.dk[:cols*d])
	copy(t.dv[col0*d:(col0+cols)*d], sc.dv[:cols*d])
}

// seenFrom is the first of rows [row0, row0+rows) that sees key j, or rows
// if none does.
func seenFrom(p kernels.Params, row0, rows, j int) int {
	if !p.Causal {
		return 0
	}
	return min(rows, max(0, j-(p.Nk-p.Nq)-row0))
}

// backwardMaskedTile is the tail of backwardKeyBlock for a partially masked
// tile with a non-finite operand: the three products of the tile, each over
// the visible (row, key) pairs only.
func backwardMaskedTile[T kernels.Float](ops mathOps[T], sc *backwardScratch[T], p kernels.Params, row0, rows, col0, cols int, qi, doi, dqT []T) {
	d := p.D
	for c := range cols {
		// Key col0+c is seen by rows [from, rows).
		from := seenFrom(p, row0, rows, col0+c)
		if n := rows - from; n > 0 {
			ops.gemm(1, d, n, sc.pt[c*blockRows+from:], blockRows, doi[from*d:], d, sc.dv[c*d:], d)
			ops.gemm(1, d, n, sc.dst[c*blockRows+from:], blockRows, qi[from*d:], d, sc.dk[c*d:], d)
		}
	}
	for r := range rows {
		// Row row0+r sees keys [col0, col0+n).
		if n := min(cols, max(0, p.VisibleKeys(row0+r)-col0)); n > 0 {
			ops.gemm(d, 1, n, sc.kt, blockCols, sc.dst[r:], blockRows, dqT[r:], rows)
		}
	}
}
