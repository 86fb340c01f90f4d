package cpukernels

import (
	"github.com/gorgonia-flash/flashattention/internal/hostmem"
	"github.com/gorgonia-flash/flashattention/internal/simd"
	"github.com/gorgonia-flash/flashattention/kernels"
)

// maxKeyChunks bounds how many key chunks of one head run in parallel in the
// backward, and so how many dQ buffers exist.
const maxKeyChunks = 4

// keyChunks picks, from the shape alone, how many chunks each group of key
// heads (keyGroups) splits its keys into: enough for about 32 work units
// in all, and at most one per key block. Never from the worker count, so
// that results do not depend on it.
func keyChunks(p kernels.Params) int {
	groups, _ := keyGroups(p)
	return max(1, min(maxKeyChunks, ceilDiv(32, groups), ceilDiv(p.Nk, blockCols)))
}

// keyGroups returns how the backward's work units gather key heads: groups
// of per key heads each, one work unit per group and key chunk, every key
// head of a group visited by that unit in order.
//
// A work unit must own everything it writes, so that no two units add into
// one element and each element's sum runs in one fixed order: that is what
// keeps the backward deterministic without atomics. Without a bias it
// writes dK and dV of its key head (summed over the query heads that read
// it, in head order), so a group is one key head. dBias of a slice that
// query heads of several key heads share, a bias broadcast over the batch
// (Bb = 1) or the heads (Hb = 1), is a sum over all of them, so those key
// heads form one group: the unit of a group and key chunk owns dBias of
// its slices at the chunk's keys, and adds the key heads' shares in key
// head order, then query head, then query block. The alternative, a
// partial dBias per unit summed in order at the end, would take an Nq×Nk
// buffer per unit, which the kernels never allocate. The price is
// parallelism: a bias broadcast over both leaves one group, so at most
// maxKeyChunks units run at once.
//
// With Bb = B and Hb = H (and without a bias) the groups are the B·Hkv key
// heads; with Bb = 1 a group takes every batch entry's key head of its
// index, with Hb = 1 every key head of its batch entry. Key head x of
// group u is groupKeyHead(p, u, x).
func keyGroups(p kernels.Params) (groups, per int) {
	byB, byH := keyGroupSplit(p)
	groups, per = 1, 1
	if byB {
		groups *= p.B
	} else {
		per *= p.B
	}
	if byH {
		groups *= p.KVHeads()
	} else {
		per *= p.KVHeads()
	}
	return groups, per
}

// keyGroupSplit reports whether the groups of keyGroups split the key
// heads by batch entry and by head index: true unless a bias is broadcast
// over that dimension.
func keyGroupSplit(p kernels.Params) (byB, byH bool) {
	return p.Bias == nil || p.Bias.Bb == p.B, p.Bias == nil || p.Bias.Hb == p.H
}

// groupKeyHead returns the index, among the B·Hkv, of key head x of group
// u (keyGroups): x runs over the group's batch entries, and within each
// over its head indices.
func groupKeyHead(p kernels.Params, u, x int) int {
	byB, byH := keyGroupSplit(p)
	switch {
	case byB && byH: // the group is key head u
		return u
	case byB: // the key heads of batch entry u
		return u*p.KVHeads() + x
	case byH: // key head u of every batch entry
		return x*p.KVHeads() + u
	}
	return x // every key head
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
	// Bc×D: the key block's rows of dK and dV, where its tiles add them
	// up: views of the outputs (backwardKeyBlock), not scratch, so that no
	// copy out follows the block.
	dk, dv []T
	tab    []T // Br+Bc: the tile's ALiBi terms (alibiTable); nil without ALiBi
	grad   []T // Br: the softcap's derivative along one key's rows; nil without a softcap
	// Dropout's Philox words of one tile by keys (Bc×Br: key c's rows at
	// keepWords[c·Br:]), drawn eight rows at a time into rowWords (8×Bc)
	// and transposed; nil without dropout.
	keepWords, rowWords []uint32
	// Bc×Br: the tile's bias, transposed like pt, when it cannot be
	// loaded into pt before the scores' GEMM (a softcap needs the bare
	// scores; nil otherwise), and its dS for dBias (nil without a bias).
	bt, dbt []T
	// The query heads of the unit's key head (H/Hkv of them), reused from
	// unit to unit: a slice made per unit cost one allocation per head
	// when B·H is large and N small. Without GQA qhs is one[:], so that
	// plain attention allocates nothing for it.
	qhs []queryHead[T]
	one [1]queryHead[T]
	// Key c of the block is seen by query rows [qlo[c], qhi[c]):
	// kernels.Params.QueryRange, asked once per key block rather than by
	// every cut tile of every query head. Arrays, so that they cost no
	// allocation.
	qlo, qhi [blockCols]int
}

// backwardScratchLen is the number of elements of one backwardScratch.
func backwardScratchLen(d int) int {
	// The dropout words counted as (Br + 8)·Bc elements (4 bytes each, as
	// a float32 call's); four Bc×Br tiles: pt, dst, and a bias's bt and
	// dbt.
	return 2*blockCols*(d+1) + d*blockCols + 4*blockCols*blockRows + 2*blockRows + blockCols + (blockRows+8)*blockCols
}

// backwardTilesLen is the number of elements of a backwardScratch's
// tiles, ka to dst, which newBackwardScratch carves out of one slice.
func backwardTilesLen(d int) int {
	return 2*blockCols*(d+1) + d*blockCols + 2*blockCols*blockRows
}

// newBackwardScratch returns one worker's scratch for p, its tiles carved
// out of tiles (backwardTilesLen(p.D) elements), whose contents do not
// matter: every element is written before it is read. The backward takes
// them from a recycled buffer: made fresh (160 KiB at D = 64), each call's
// tiles cost page faults wherever the heap is large enough that the
// collector seldom runs, as a model's is (GOGC=off on dev, 2026-12-04:
// the N = 512 backward 10 % slower).
func newBackwardScratch[T kernels.Float](p kernels.Params, tiles []T) *backwardScratch[T] {
	d := p.D
	next := carver(tiles)
	sc := &backwardScratch[T]{
		ka: next(blockCols * (d + 1)), va: next(blockCols * (d + 1)),
		kt: next(d * blockCols),
		pt: next(blockCols * blockRows), dst: next(blockCols * blockRows),
	}
	sc.qhs = sc.one[:]
	if group := p.H / p.KVHeads(); group > 1 {
		sc.qhs = make([]queryHead[T], group)
	}
	// Plain attention allocates no variant scratch.
	if p.Softcap != 0 {
		sc.grad = make([]T, blockRows)
	}
	if p.ALiBi != nil {
		sc.tab = make([]T, blockRows+blockCols)
	}
	if p.Dropout.On() {
		sc.keepWords, sc.rowWords = make([]uint32, blockCols*blockRows), make([]uint32, 8*blockCols)
	}
	if p.Bias != nil {
		sc.dbt = make([]T, blockCols*blockRows)
		if p.Softcap != 0 {
			sc.bt = make([]T, blockCols*blockRows)
		}
	}
	return sc
}

// keyHead is one key head's slices of k, v, dk and dv.
type keyHead[T kernels.Float] struct{ k, v, dk, dv []T }

// queryHead is one query head's slices of every tensor the backward
// touches; h is its index among the H heads. qsT and doT hold, per query
// block of r rows, (scale·Q)ᵀ over −LSE (over 0 with a softcap, which
// needs the bare scores) and dOᵀ over −D, each (D+1)×r; dqT holds this
// chunk's dQᵀ per query block, D×r. bias and dbias are the Nq×Nk slice of
// the bias it reads and of its gradient (nil: no bias, no gradient wanted);
// firstGrad says that this head is the first of its work unit to reach
// that dBias slice (see dbiasFirst), which it then writes rather than adds
// into.
type queryHead[T kernels.Float] struct {
	h, bh         int // among the H heads of its batch entry, and among all B·H
	q, do, lse    []T
	qsT, doT, dqT []T
	bias, dbias   []T
	firstGrad     bool
	finite        []bool // per query block: Q and dO hold no NaN or ±Inf; nil: not known (blockFinite)
}

// backwardUnit maps the backward's work unit to its group of key heads
// (keyGroups) and key chunk: chunk by chunk, every group's first chunk
// before any second one. Under a causal mask a key sees the rows from its
// own on, so the first chunk of a head is its longest (at N = 2048 with
// four chunks, 44 % of the head's work against 6 % for the last); handed
// out group by group, the last groups' first chunks started last and the
// other workers waited for them. A model of the dynamic hand-out
// (TestUnitsLongestFirst) puts that idle share at 29 and 32 % of 16
// workers (B = 1, H = 8, N = 512 and 2048), and at 0 in this order, the
// longest units first. Each unit owns what it writes (keyGroups), so the
// order never changes a bit of the results.
func backwardUnit(unit, groups int) (u, c int) {
	return unit % groups, unit / groups
}

// dbiasFirst reports whether query head bh (of the B·H) is the first, in
// its work unit's order, to reach its dBias slice: (b, h) with b < Bb and
// h < Hb. A unit visits its key heads, and each key head's query heads, in
// increasing bh (groupKeyHead), and the heads sharing a slice differ only
// in b (when Bb = 1) or h (when Hb = 1), so the one with the least b and h
// comes first. It writes every element of the slice at the unit's keys
// (backwardKeyBlock: the tiles it visits, and 0 elsewhere), so dBias needs
// no clearing beforehand, and the heads after it add into it.
func dbiasFirst(p *kernels.Params, bh int) bool {
	return bh/p.H < p.Bias.Bb && bh%p.H < p.Bias.Hb
}

func backward[T kernels.Float](workers int, p kernels.Params, q, k, v, o, lse, do, dlse, dq, dk, dv []T) error {
	if err := kernels.CheckBackward(p, q, k, v, o, lse, do, dlse, dq, dk, dv); err != nil {
		return err
	}
	heads, d, da := p.B*p.H, p.D, p.D+1
	qBlocks, kBlocks := ceilDiv(p.Nq, blockRows), ceilDiv(p.Nk, blockCols)
	chunks := keyChunks(p)
	perChunk := ceilDiv(kBlocks, chunks)
	nScratch := max(1, min(workers, heads*chunks))
	aug := heads * p.Nq * da // elements of qsT or doT
	if err := hostmem.CheckElems[T](2*aug + chunks*p.QLen() + nScratch*backwardScratchLen(d)); err != nil {
		return err
	}
	// Recycled buffers (workspace.go): the first loop below writes every
	// element of qsT and doT that a key block reads (not those of query
	// blocks past a sequence's length, which none visits) and clears each
	// dQᵀ part where its chunk's key blocks add (chunkRowBlocks).
	qsT, doT := takeBuffer[T](aug), takeBuffer[T](aug)
	defer giveBuffer(qsT)
	defer giveBuffer(doT)
	dqT := make([][]T, chunks) // each chunk's dQᵀ, summed in chunk order at the end
	for c := range dqT {
		dqT[c] = takeBuffer[T](p.QLen())
		defer giveBuffer(dqT[c])
	}
	// Under a window, whether each query block's Q and dO are finite,
	// asked by most of its tiles (the masks cut them), is found once here.
	// Otherwise nil: without a mask nothing asks, and a causal mask cuts
	// about one tile per block pair, which asks on the spot.
	var rowsFinite []bool
	if p.Window.On {
		rowsFinite = make([]bool, heads*qBlocks)
	}
	scale := T(p.Scale)
	ops := opsFor[T]()
	masks := entryMasks(p)
	biasData, dbias := kernels.BiasData[T](p.Bias), kernels.BiasGrad[T](p.Bias)
	// Without a mask every key block's tiles cover all of its query
	// blocks whole, so the first key block of each chunk sets its dQᵀ
	// part (gemmStore, the bits of adding into zeros) and no part is
	// cleared first.
	unmasked := !p.Causal && !p.Window.On && p.QLens == nil && p.KLens == nil
	parallelFor(workers, heads*qBlocks, func(_, unit int) {
		bh, qb := unit/qBlocks, unit%qBlocks
		mask := &masks[bh/p.H]
		row0 := qb * blockRows
		rows := min(blockRows, p.Nq-row0)
		at := (bh*p.Nq + row0) * d
		if row0 >= mask.Lq {
			// Padding rows, which no key block visits: their dQ is
			// cleared at the end, and their dQᵀ parts are never read.
			return
		}
		for c, part := range dqT {
			if qb0, qb1 := chunkRowBlocks(mask, c, perChunk, p.Nk); qb0 <= qb && qb < qb1 && !unmasked {
				clear(part[at : at+rows*d])
			}
		}
		packed := (bh*p.Nq + row0) * da
		qs, dot := qsT[packed:packed+da*rows], doT[packed:packed+da*rows]
		transpose(rows, d, q[at:], d, qs, rows)
		transpose(rows, d, do[at:], d, dot, rows)
		if rowsFinite != nil {
			rowsFinite[unit] = allFinite(q[at:at+rows*d]) && allFinite(do[at:at+rows*d])
		}
		ops.scale(qs[:d*rows], scale)
		// D_i = rowsum(dO∘O), the correction term of the softmax gradient.
		negD := dot[d*rows : da*rows] // D's row of dOᵀ, negated below
		rowDots(negD, do[at:at+rows*d], o[at:at+rows*d], d)
		for r := range rows {
			rowD := negD[r]
			if dlse != nil {
				// ∂LSE_i/∂S_ij = P_ij: a gradient reaching the LSE lowers
				// D_i by dLSE_i.
				rowD -= dlse[bh*p.Nq+row0+r]
			}
			negD[r] = -rowD
			// A row that sees no key has LSE = +Inf and P masked to 0
			// below; a 0 here keeps its column of the GEMM free of
			// infinities. Any other LSE, even ±Inf or NaN, enters as it
			// is, so that exp(S − LSE) takes its IEEE value.
			qs[d*rows+r] = 0
			if mask.VisibleKeys(row0+r) > 0 && p.Softcap == 0 {
				qs[d*rows+r] = -lse[bh*p.Nq+row0+r]
			}
		}
	})

	// Each worker carves its tiles out of a recycled buffer at its first
	// unit (newBackwardScratch says why recycled): the calling goroutine
	// used to make them all before the loop, clearing 16 workers' 2.5 MiB
	// one after another while the others waited.
	perTiles := backwardTilesLen(d)
	tiles := takeBuffer[T](nScratch * perTiles)
	defer giveBuffer(tiles)
	scratch := make([]*backwardScratch[T], nScratch)
	// One unit is a chunk of the key blocks of a group of key heads (one
	// key head unless a bias is broadcast, see keyGroups); for each key
	// head it loops over the query heads that read it, so dK and dV of a
	// GQA group are summed in one accumulator, in head order, without
	// atomics.
	group := p.H / p.KVHeads()
	groups, perGroup := keyGroups(p)
	parallelFor(workers, groups*chunks, func(w, unit int) {
		if scratch[w] == nil {
			scratch[w] = newBackwardScratch(p, tiles[w*perTiles:(w+1)*perTiles])
		}
		u, c := backwardUnit(unit, groups)
		for x := range perGroup {
			kvh := groupKeyHead(p, u, x)
			kOff := kvh * p.Nk * d
			kh := keyHead[T]{k: k[kOff : kOff+p.Nk*d], v: v[kOff : kOff+p.Nk*d], dk: dk[kOff : kOff+p.Nk*d], dv: dv[kOff : kOff+p.Nk*d]}
			qhs := scratch[w].qhs
			for y := range qhs {
				// Key head b·Hkv + g is read by query heads b·H + g·group + y,
				// which is kvh·group + y as H = Hkv·group: no division.
				bh := kvh*group + y
				qOff := bh * p.Nq * d
				qhs[y] = queryHead[T]{
					h: bh % p.H, bh: bh, q: q[qOff : qOff+p.Nq*d], do: do[qOff : qOff+p.Nq*d], lse: lse[bh*p.Nq : (bh+1)*p.Nq],
					qsT: qsT[bh*p.Nq*da : (bh+1)*p.Nq*da],
					doT: doT[bh*p.Nq*da : (bh+1)*p.Nq*da],
					dqT: dqT[c][qOff : qOff+p.Nq*d],
				}
				if rowsFinite != nil {
					qhs[y].finite = rowsFinite[bh*qBlocks : (bh+1)*qBlocks]
				}
				if biasData != nil {
					at := p.BiasOffset(bh)
					qhs[y].bias = biasData[at : at+p.Nq*p.Nk]
					if dbias != nil {
						qhs[y].dbias = dbias[at : at+p.Nq*p.Nk]
						qhs[y].firstGrad = dbiasFirst(&p, bh)
					}
				}
			}
			mask := &masks[kvh/p.KVHeads()]
			for kb := c * perChunk; kb < min(kBlocks, (c+1)*perChunk); kb++ {
				backwardKeyBlock(ops, scratch[w], &p, mask, kb*blockCols, kh, qhs, unmasked && kb == c*perChunk)
			}
		}
	})
	// dQ = Σ_chunks dQᵀ over the chunks that reach the block, summed in
	// chunk order, then transposed; 0 on padding rows and rows no chunk
	// reaches.
	parallelFor(workers, heads*qBlocks, func(_, unit int) {
		bh, qb := unit/qBlocks, unit%qBlocks
		mask := &masks[bh/p.H]
		row0 := qb * blockRows
		rows := min(blockRows, p.Nq-row0)
		at := (bh*p.Nq + row0) * d
		var sum []T
		if row0 < mask.Lq {
			for c := range chunks {
				if qb0, qb1 := chunkRowBlocks(mask, c, perChunk, p.Nk); qb < qb0 || qb >= qb1 {
					continue
				}
				if part := dqT[c][at : at+d*rows]; sum == nil {
					sum = part
				} else {
					add(sum, part)
				}
			}
		}
		if sum == nil {
			clear(dq[at : at+rows*d])
			return
		}
		transpose(d, rows, sum, rows, dq[at:], d)
	})
	return nil
}

// rowDots sets dots[r] = Σ_c a[r·d+c]·b[r·d+c] for each row r of the
// len(dots) rows of d elements in a and b. Each row is one sum in column
// order: with it, dP − D cancels exactly where the softmax is constant (a
// row that sees one key, O = V), which the sweep's Nk = 1 case checks;
// four partial sums of a row did not. A row's sum is a chain of dependent
// additions, so four rows run at once, each its own chain with the bits
// of the one-row loop: 1.2 µs per block of 64 rows at D = 64 on dev,
// where one row at a time took 2.4 (2026-12-05).
func rowDots[T kernels.Float](dots, a, b []T, d int) {
	r := 0
	for ; r+4 <= len(dots); r += 4 {
		a0, a1, a2, a3 := a[r*d:(r+1)*d], a[(r+1)*d:(r+2)*d], a[(r+2)*d:(r+3)*d], a[(r+3)*d:(r+4)*d]
		b0, b1, b2, b3 := b[r*d:(r+1)*d], b[(r+1)*d:(r+2)*d], b[(r+2)*d:(r+3)*d], b[(r+3)*d:(r+4)*d]
		var s0, s1, s2, s3 T
		for c := range d {
			s0 += a0[c] * b0[c]
			s1 += a1[c] * b1[c]
			s2 += a2[c] * b2[c]
			s3 += a3[c] * b3[c]
		}
		dots[r], dots[r+1], dots[r+2], dots[r+3] = s0, s1, s2, s3
	}
	for ; r < len(dots); r++ {
		var s T
		for c, x := range a[r*d : (r+1)*d] {
			s += x * b[r*d+c]
		}
		dots[r] = s
	}
}

// chunkRowBlocks returns the query blocks [qb0, qb1) that key chunk c
// (key blocks [c·per, (c+1)·per)) reaches in a batch entry with mask: the
// blocks of its dQᵀ part that backwardKeyBlock's tiles write, the union of
// its key blocks' row ranges (whose bounds grow with the key). The part's
// other blocks hold nothing of the chunk's, so they are neither cleared
// nor summed: under a window most of every part, under a causal mask the
// early rows of the later chunks.
func chunkRowBlocks(mask *kernels.Mask, c, per, nk int) (qb0, qb1 int) {
	ks, ke := c*per*blockCols, min(nk, (c+1)*per*blockCols, mask.Lk)
	if ks >= ke {
		return 0, 0
	}
	lo, _ := mask.QueryRange(ks)
	_, hi := mask.QueryRange(ke - 1)
	if lo >= hi {
		return 0, 0
	}
	return lo / blockRows, ceilDiv(hi, blockRows)
}

// backwardKeyBlock computes dK and dV for keys [col0, col0+Bc) of key
// head t, summed over the query heads qhs that read it, and adds this
// block's share of dQᵀ into each query head's dqT, or sets it there if
// setQ (the chunk's first key block, without a mask); mask is their batch
// entry's.
func backwardKeyBlock[T kernels.Float](ops mathOps[T], sc *backwardScratch[T], p *kernels.Params, mask *kernels.Mask, col0 int, t keyHead[T], qhs []queryHead[T], setQ bool) {
	d, da := p.D, p.D+1
	width := min(blockCols, p.Nk-col0)
	// Padding keys (from Lk on) are not computed: their dK and dV are 0.
	cols := min(width, max(0, mask.Lk-col0))
	clear(t.dk[(col0+cols)*d : (col0+width)*d])
	clear(t.dv[(col0+cols)*d : (col0+width)*d])
	if cols == 0 {
		for x := range qhs {
			if qhs[x].firstGrad {
				clearCols(qhs[x].dbias, p.Nk, 0, p.Nq, col0, col0+width)
			}
		}
		return
	}
	// With dropout, V's column of ones becomes zeros: the GEMM then gives
	// dP̃ = dO·vᵀ alone, and dropGradient subtracts D after scaling dP̃.
	// Folded in, D would cancel against the scaled dP̃ after rounding at
	// the scale of D/(1−p) (ten times the error at p = 0.9).
	var vOne T = 1
	if p.Dropout.On() {
		vOne = 0
	}
	for c := range cols {
		copy(sc.ka[c*da:c*da+d], t.k[(col0+c)*d:(col0+c+1)*d])
		copy(sc.va[c*da:c*da+d], t.v[(col0+c)*d:(col0+c+1)*d])
		sc.ka[c*da+d], sc.va[c*da+d] = 1, vOne
	}
	transpose(cols, d, t.k[col0*d:], d, sc.kt, blockCols)
	sc.dk, sc.dv = t.dk[col0*d:(col0+cols)*d], t.dv[col0*d:(col0+cols)*d]
	// The first tile through backwardProducts sets dK and dV rather than
	// adding into them; until then they are not cleared, and a tile that
	// adds to a part only clears them first.
	fresh := true
	keysFinite := -1 // unknown until a masked tile asks

	firstRow, endRow := unitRanges(mask, false, col0, cols, p.Nq, sc.qlo[:], sc.qhi[:])
	// The tiles below cover query rows [tileLo, tileHi).
	tileLo, tileHi := firstRow/blockRows*blockRows, min(p.Nq, ceilDiv(endRow, blockRows)*blockRows)
	if tileLo >= tileHi {
		tileLo, tileHi = 0, 0
	}
	for x := range qhs {
		if qhs[x].firstGrad {
			// The first head's tiles write dBias at these keys; what they
			// do not cover, it sets to 0 here: rows that see none of the
			// keys, and padding keys.
			clearCols(qhs[x].dbias, p.Nk, 0, tileLo, col0, col0+cols)
			clearCols(qhs[x].dbias, p.Nk, tileHi, p.Nq, col0, col0+cols)
			clearCols(qhs[x].dbias, p.Nk, 0, p.Nq, col0+cols, col0+width)
		}
	}
	// Only query rows [firstRow, endRow) see any of these keys.
	for x := range qhs {
		qh := &qhs[x]
		for row0 := firstRow / blockRows * blockRows; row0 < endRow; row0 += blockRows {
			rows := min(blockRows, p.Nq-row0)
			cut := backwardTile(ops, sc, p, mask, row0, rows, col0, cols, qh)
			if cut {
				if keysFinite < 0 {
					keysFinite = 0
					// From the copy in ka (whose column of ones is
					// finite): the block's rows of K as read above, even
					// where a caller's dK shares their memory.
					if allFinite(sc.ka[:cols*da]) {
						keysFinite = 1
					}
				}
				qi, doi := qh.q[row0*d:(row0+rows)*d], qh.do[row0*d:(row0+rows)*d]
				if keysFinite == 0 || !blockFinite(qh.finite, row0/blockRows, qi) || !blockFinite(qh.finite, row0/blockRows, doi) {
					// A masked P or dS of 0 times an infinite or NaN operand
					// would still be NaN, so each product takes only the
					// visible pairs.
					fresh = clearFresh(fresh, sc.dk, sc.dv)
					backwardMaskedTile(ops, sc, p, mask, row0, rows, col0, cols, qi, doi, qh.dqT[row0*d:(row0+rows)*d])
					continue
				}
			}
			if cut && windowPanels(p) {
				fresh = clearFresh(fresh, sc.dk, sc.dv)
				backwardPanelProducts(ops, sc, p, row0, rows, cols, qh)
				continue
			}
			backwardProducts(ops, sc, p, row0, rows, cols, qh, fresh, setQ)
			fresh = false
		}
	}
	clearFresh(fresh, sc.dk, sc.dv) // no tile: dK = dV = 0
}

// clearFresh clears dk and dv if fresh (nothing is in them yet) and
// returns false: they now hold what a tile may add to.
func clearFresh[T kernels.Float](fresh bool, dk, dv []T) bool {
	if fresh {
		clear(dk)
		clear(dv)
	}
	return false
}

// backwardTile recomputes Pᵀ and scale·dSᵀ of one tile (keys [col0,
// col0+cols) of the key block loaded in sc against rows [row0, row0+rows)
// of query head qh) into sc.pt and sc.dst, and reports whether the masks
// cut it: whether some of these rows do not see some of these keys.
func backwardTile[T kernels.Float](ops mathOps[T], sc *backwardScratch[T], p *kernels.Params, mask *kernels.Mask, row0, rows, col0, cols int, qh *queryHead[T]) bool {
	da := p.D + 1
	scale := T(p.Scale)
	qsT := qh.qsT[row0*da : (row0+rows)*da]
	doT := qh.doT[row0*da : (row0+rows)*da]
	pt, dst := sc.pt[:cols*blockRows], sc.dst[:cols*blockRows]
	// The masks cut the tile unless every key is seen by all its rows; the
	// bounds grow with the key, so the last key's first row and the first
	// key's end decide it, once per tile rather than once per key. An uncut
	// tile (every tile without a mask) clamps no key's range.
	cut := sc.qlo[cols-1] > row0 || sc.qhi[0] < row0+rows
	panels := cut && windowPanels(p)
	// Without a softcap the bias (transposed) is where the scores' GEMM
	// starts, which adds it for free: bias + (Sᵀ − LSE), the products
	// summed first. A softcap needs the bare scores, so its bias goes
	// through bt below. Only the first rows of each key's row are read.
	// Otherwise the whole tile's GEMMs set pt and dst (gemmStore), and only
	// the panels, which add into parts of them, need them cleared.
	preload := qh.bias != nil && p.Softcap == 0
	if preload && rows < blockRows || !preload && panels {
		clear(pt)
	}
	if preload {
		transposeTile(rows, cols, qh.bias[row0*p.Nk+col0:], p.Nk, pt, blockRows)
	}
	// Sᵀ − LSE (Sᵀ with a softcap) and dPᵀ − D (dP̃ᵀ with dropout), one row
	// per key. A tile that a window cuts is computed by panels of keys,
	// each over the rows it sees (see keyPanelRows); the entries left out
	// are hidden pairs, set to 0 below.
	if panels {
		clear(dst)
		for c0 := 0; c0 < cols; c0 += windowPanelBackward {
			n := min(windowPanelBackward, cols-c0)
			if f, t := keyPanelRows(sc, row0, rows, c0, n); t > f {
				ops.gemm(n, t-f, da, sc.ka[c0*da:], da, qsT[f:], rows, pt[c0*blockRows+f:], blockRows)
				ops.gemm(n, t-f, da, sc.va[c0*da:], da, doT[f:], rows, dst[c0*blockRows+f:], blockRows)
			}
		}
	} else {
		scores := ops.gemmStore
		if preload {
			scores = ops.gemm
		}
		scores(cols, rows, da, sc.ka, da, qsT, rows, pt, blockRows)
		ops.gemmStore(cols, rows, da, sc.va, da, doT, rows, dst, blockRows)
	}
	// Key col0+c, row row0+r reads the ALiBi term tab[r + cols−1−c]: its
	// a − j is Aligned(row0+r) − (col0+c).
	var tab []T
	if p.ALiBi != nil {
		tab = alibiTable(sc.tab, T(p.ALiBi[qh.h]), col0+cols-1-mask.Aligned(row0), rows+cols-1)
	}
	// The bias is stored by rows and the tile works by keys: reading it
	// (and adding into dBias) a column at a time, Nk apart, cost eight
	// times the whole backward, so the tile's bias is transposed once,
	// with contiguous reads (into pt above, or bt with a softcap), and its
	// dS gathered in dbt, written into dBias by rows after the loop.
	var bt, dbt []T
	if qh.bias != nil && !preload {
		bt = sc.bt[:cols*blockRows]
		transposeTile(rows, cols, qh.bias[row0*p.Nk+col0:], p.Nk, bt, blockRows)
	}
	if qh.dbias != nil {
		dbt = sc.dbt[:cols*blockRows]
	}
	// Dropout's words of the tile, drawn by rows (the generator runs along
	// the keys) and read by keys: eight rows at a time, transposed in
	// registers into keepWords.
	var keepWords []uint32
	if p.Dropout.On() {
		keepWords = sc.keepWords
		for r0 := 0; r0 < rows; r0 += 8 {
			n := min(8, rows-r0)
			for i := range n {
				p.Dropout.RowWords(qh.bh, row0+r0+i, col0, sc.rowWords[i*blockCols:i*blockCols+cols])
			}
			simd.TransposeBits32(n, cols, sc.rowWords, blockCols, keepWords[r0:], blockRows)
		}
	}
	if !cut && rows == blockRows && p.Softcap == 0 && tab == nil && bt == nil && dbt == nil && keepWords == nil {
		// Plain attention's whole tiles: every key's rows are visible and
		// its column of Pᵀ and dSᵀ runs on into the next key's, so the
		// exponential and scale·dS take the tile in one pass each, rather
		// than as cols passes of Br elements whose set-up cost as much as
		// their work. Element by element these are the same operations.
		ops.expShift(pt, 0)
		scaledProduct(dst, pt, nil, scale)
		return cut
	}
	for c := range cols {
		ptc, dsc := pt[c*blockRows:c*blockRows+rows], dst[c*blockRows:c*blockRows+rows]
		from, to := 0, rows
		if cut {
			// Rows outside [from, to) do not see key col0+c; that covers
			// every row that sees no key at all. Their P and dS are set
			// to exactly 0, not computed: S − LSE or dP − D may be NaN
			// there.
			from, to = clampRange(sc.qlo[c], sc.qhi[c], row0, rows)
			clear(ptc[:from])
			clear(ptc[to:])
			clear(dsc[:from])
			clear(dsc[to:])
			if dbt != nil {
				// The pairs the masks hide have a dBias share of 0.
				clear(dbt[c*blockRows : c*blockRows+from])
				clear(dbt[c*blockRows+to : c*blockRows+rows])
			}
		}
		vis, dsv := ptc[from:to], dsc[from:to]
		var grad []T
		if p.Softcap != 0 {
			grad = sc.grad[:len(vis)]
			softcapScores(vis, T(p.Softcap), grad)
			subtract(vis, qh.lse[row0+from:])
		}
		if tab != nil {
			subtract(vis, tab[cols-1-c+from:])
		}
		if bt != nil {
			// Only the visible pairs' entries: a masked pair's bias, even
			// NaN, never reaches P.
			add(vis, bt[c*blockRows+from:])
		}
		ops.expShift(vis, 0) // P = exp(S − LSE)
		var colWords []uint32
		if keepWords != nil && to > from {
			colWords = keepWords[c*blockRows+from:]
			dropGradient(dsv, colWords, doT[p.D*rows+from:], p.Dropout)
		}
		// scale·dS = scale·P∘(dP − D), scale folded in once here rather
		// than into both dQ and dK; with a softcap, times its derivative.
		if dbt != nil {
			biasGradient(dsv, vis, grad, scale, dbt[c*blockRows+from:])
		} else {
			scaledProduct(dsv, vis, grad, scale)
		}
		if colWords != nil {
			dropRow(vis, colWords, p.Dropout)
		}
	}
	if dbt != nil {
		addTransposed(cols, rows, dbt, blockRows, qh.dbias[row0*p.Nk+col0:], p.Nk, qh.firstGrad)
	}
	return cut
}

// scaledProduct sets dst[r] = scale·p[r]·dst[r] (times grad[r] with a
// softcap's derivative, nil without), multiplied in that order:
// simd.ScaledProduct32 for float32.
func scaledProduct[T kernels.Float](dst, p, grad []T, scale T) {
	if d32, ok := any(dst).([]float32); ok {
		g32, _ := any(grad).([]float32)
		simd.ScaledProduct32(d32, any(p).([]float32), g32, float32(scale))
		return
	}
	p = p[:len(dst)]
	if grad == nil {
		for r := range dst {
			dst[r] = scale * p[r] * dst[r]
		}
		return
	}
	grad = grad[:len(dst)]
	for r := range dst {
		dst[r] = scale * p[r] * dst[r] * grad[r]
	}
}

// biasGradient is the scale·dS step of backwardTile for one key's visible
// rows when dBias is wanted: dS = P∘(dP − D) (p holds P, dst dP − D) is
// stored in ds for dBias, before the softcap's derivative (grad, nil
// without a softcap) and the scale, which belong to scale·q·k alone; dst
// then holds scale·dS·grad.
func biasGradient[T kernels.Float](dst, p, grad []T, scale T, ds []T) {
	ds = ds[:len(dst)]
	if d32, ok := any(dst).([]float32); ok {
		// The same products, one vector pass each (IEEE products
		// commute, so p·dst is dst·p).
		ds32 := any(ds).([]float32)
		copy(ds32, d32)
		simd.Mul32(ds32, any(p).([]float32))
		copy(d32, ds32)
		if grad != nil {
			simd.Mul32(d32, any(grad).([]float32))
		}
		simd.Scale32(d32, float32(scale))
		return
	}
	for r := range dst {
		x := p[r] * dst[r]
		ds[r] = x
		if grad != nil {
			x *= grad[r]
		}
		dst[r] = scale * x
	}
}

// backwardProducts adds one tile's products: dV_j += Pᵀ·dO_i, dK_j +=
// scale·dSᵀ·Q_i, dQᵀ_i += K_jᵀ·(scale·dSᵀ); dV_j and dK_j are set rather
// than added to if setKV, dQᵀ_i if setQ (gemmStore: the bits of adding
// into zeros).
func backwardProducts[T kernels.Float](ops mathOps[T], sc *backwardScratch[T], p *kernels.Params, row0, rows, cols int, qh *queryHead[T], setKV, setQ bool) {
	d := p.D
	qi, doi := qh.q[row0*d:(row0+rows)*d], qh.do[row0*d:(row0+rows)*d]
	kv, dq := ops.gemm, ops.gemm
	if setKV {
		kv = ops.gemmStore
	}
	if setQ {
		dq = ops.gemmStore
	}
	kv(cols, d, rows, sc.pt, blockRows, doi, d, sc.dv, d)
	kv(cols, d, rows, sc.dst, blockRows, qi, d, sc.dk, d)
	dq(d, rows, cols, sc.kt, blockCols, sc.dst, blockRows, qh.dqT[row0*d:(row0+rows)*d], rows)
}

// backwardPanelProducts is backwardProducts for a tile that a window cuts,
// whose Pᵀ and dSᵀ backwardTile computed by panels (windowPanels): dV and
// dK are summed by panels of keys over the rows each panel sees, and dQ by
// panels of rows over the keys each sees, rather than over the whole tile.
//
// That leaves the bits as they are: the GEMMs sum each element's products
// from zero in the order of the inner index and add the sum to C after, and
// the inner indices a panel leaves out, before or after its band, only ever
// contribute exact zeros (the masked P and dS of a finite tile), which add
// nothing to a sum begun at +0.
func backwardPanelProducts[T kernels.Float](ops mathOps[T], sc *backwardScratch[T], p *kernels.Params, row0, rows, cols int, qh *queryHead[T]) {
	d := p.D
	qi, doi := qh.q[row0*d:(row0+rows)*d], qh.do[row0*d:(row0+rows)*d]
	dqT := qh.dqT[row0*d : (row0+rows)*d]
	for c0 := 0; c0 < cols; c0 += windowPanelBackward {
		n := min(windowPanelBackward, cols-c0)
		if f, t := keyPanelRows(sc, row0, rows, c0, n); t > f {
			ops.gemm(n, d, t-f, sc.pt[c0*blockRows+f:], blockRows, doi[f*d:], d, sc.dv[c0*d:], d)
			ops.gemm(n, d, t-f, sc.dst[c0*blockRows+f:], blockRows, qi[f*d:], d, sc.dk[c0*d:], d)
		}
	}
	for r0 := 0; r0 < rows; r0 += windowPanelBackward {
		n := min(windowPanelBackward, rows-r0)
		if f, t := rowPanelKeys(sc, row0, rows, cols, r0, n); t > f {
			ops.gemm(d, n, t-f, sc.kt[f:], blockCols, sc.dst[f*blockRows+r0:], blockRows, dqT[r0:], rows)
		}
	}
}

// windowPanels reports whether the backward runs the tiles that the masks
// cut by panels: under a window bounded on the left, where every row, and
// so every key, sees a band that moves with it, a whole tile would compute
// up to Br − 1 rows per key (and Bc − 1 keys per row) that it does not
// see, against 31 for a panel of windowPanelBackward = 32.
func windowPanels(p *kernels.Params) bool {
	return p.Window.On && p.Window.Left >= 0
}

// keyPanelRows returns the rows [from, to), of the tile's rows from row0,
// that some key of [c0, c0+n) of the key block in sc sees: the span of
// those keys' ranges (empty ones aside), outside which backwardTile sets
// their P and dS to exactly 0.
func keyPanelRows[T kernels.Float](sc *backwardScratch[T], row0, rows, c0, n int) (from, to int) {
	from, to = rows, 0
	for c := c0; c < c0+n; c++ {
		if f, t := clampRange(sc.qlo[c], sc.qhi[c], row0, rows); t > f {
			from, to = min(from, f), max(to, t)
		}
	}
	return from, to
}

// rowPanelKeys returns the keys [from, to), of the cols of the key block in
// sc, that some of the tile's rows [r0, r0+n) see (of its rows from row0),
// found from the same per-key ranges as keyPanelRows.
func rowPanelKeys[T kernels.Float](sc *backwardScratch[T], row0, rows, cols, r0, n int) (from, to int) {
	from, to = cols, 0
	for c := range cols {
		if f, t := clampRange(sc.qlo[c], sc.qhi[c], row0, rows); max(f, r0) < min(t, r0+n) {
			from, to = min(from, c), c+1
		}
	}
	return from, to
}

// backwardMaskedTile is backwardProducts for a tile that the masks cut and
// that holds a non-finite operand: the three products of the tile, each
// over the visible (row, key) pairs only.
func backwardMaskedTile[T kernels.Float](ops mathOps[T], sc *backwardScratch[T], p *kernels.Params, mask *kernels.Mask, row0, rows, col0, cols int, qi, doi, dqT []T) {
	d := p.D
	for c := range cols {
		if from, to := clampRange(sc.qlo[c], sc.qhi[c], row0, rows); to > from {
			ops.gemm(1, d, to-from, sc.pt[c*blockRows+from:], blockRows, doi[from*d:], d, sc.dv[c*d:], d)
			ops.gemm(1, d, to-from, sc.dst[c*blockRows+from:], blockRows, qi[from*d:], d, sc.dk[c*d:], d)
		}
	}
	for r := range rows {
		lo, hi := mask.KeyRange(row0 + r)
		if from, to := clampRange(lo, hi, col0, cols); to > from {
			ops.gemm(d, 1, to-from, sc.kt[from:], blockCols, sc.dst[from*blockRows+r:], blockRows, dqT[r:], rows)
		}
	}
}

// dropGradient turns dst, which holds dP̃ on one key's visible rows (dP̃ =
// dO·vᵀ, the gradient of the dropped probabilities Z = P∘M/(1−p)), into
// the softmax's dP − D = M/(1−p)·dP̃ − D. words are the key's Philox words
// of these rows (row r at words[r], dropRow compares them with the
// threshold), negD holds −D for these rows. A dropped entry gives −D
// exactly, whatever dP̃ holds (NaN and ±Inf included).
func dropGradient[T kernels.Float](dst []T, words []uint32, negD []T, d kernels.Dropout) {
	dropRow(dst, words, d)
	add(dst, negD)
}
