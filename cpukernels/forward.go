package cpukernels

import (
	"math"

	"github.com/gorgonia-flash/flashattention/internal/hostmem"
	"github.com/gorgonia-flash/flashattention/internal/simd"
	"github.com/gorgonia-flash/flashattention/kernels"
)

// forwardScratch is one worker's tiles; nothing in it depends on N.
type forwardScratch[T kernels.Float] struct {
	qs []T // Br×D: the query tile pre-multiplied by scale
	s  []T // Br×scoreCols: scores, then probabilities
	m  []T // Br: running row maximum
	l  []T // Br: running row sum of exp(S − m)
	// Br each: a whole tile's new row maxima and sums of exp(S − mNew),
	// from ops.softmaxRows, and the rescaling factors of the rows whose
	// maximum moved (foldRows).
	mNew, sum, alpha []T
	moved            [blockRows]int // foldRows' rows that rescale
	tab              []T            // windowPanelRows+maxSpan: the tile's ALiBi terms (alibiTable); nil without ALiBi
	// maxSpan: the Philox words of dropout's mask along one row of a tile
	// (kernels.Dropout.RowWords), compared with its threshold in vector
	// lanes (dropRow); nil without dropout.
	words []uint32
	// Row r of the unit sees keys [lo[r], hi[r]): kernels.Params.KeyRange,
	// asked once per unit rather than by every cut tile and again at the
	// end. Arrays, so that they cost no allocation.
	lo, hi [blockRows]int
}

// maxSpan is the widest tile of keys forwardRowBlock takes: tileSpan's
// for a panel of windowPanelRows rows.
const maxSpan = blockRows / windowPanelRows * blockCols

// scoreCols is the width of the scores' scratch at Br rows: a whole block
// of rows takes two key blocks a tile, so that each online-softmax step
// (the row maxima, a rescale of the accumulator when they move, the
// variants' per-tile set-up) and each P·V product cover 256 keys. 64 KiB
// of float32 scores still sit in L2 beside the Q and V tiles. On dev
// (2026-12-04, bench/RESULTS.md) 256 beat Bc by 2–7 % on the plain forward,
// and 512 did no better than 256.
const scoreCols = 2 * blockCols

// tileSpan is the keys per tile of a pass over rows rows: whole key blocks,
// as many as the scores' Br×scoreCols scratch holds for those rows, at
// most maxSpan. A panel of 16 rows under a window then computes its band
// of 256 + 16 keys as one tile, one online-softmax step per row, where
// tiles of Bc keys took three steps and mostly rescaled the accumulator at
// each.
func tileSpan(rows int) int {
	return min(blockRows*scoreCols/blockCols/rows, maxSpan/blockCols) * blockCols
}

// forwardScratchLen is the number of elements of one forwardScratch.
func forwardScratchLen(d int) int {
	// words counted as elements.
	return forwardTilesLen(d) + windowPanelRows + 2*maxSpan
}

// forwardTilesLen is the number of elements of a forwardScratch's tiles,
// qs to sum, which newForwardScratch carves out of one slice.
func forwardTilesLen(d int) int {
	return blockRows*d + blockRows*scoreCols + 5*blockRows
}

// newForwardScratch returns one worker's scratch for p, its tiles carved
// out of tiles (forwardTilesLen(p.D) elements). What tiles holds does not
// matter: every element is written before it is read, so the forward
// takes them from its recycled buffer, where fresh ones (80 KiB at D = 64)
// cost their clearing and first touch on every call (newForwardScratch
// took 1.4 % of the forward at N = 512 on dev, 2026-12-04).
func newForwardScratch[T kernels.Float](p kernels.Params, tiles []T) *forwardScratch[T] {
	next := carver(tiles)
	sc := &forwardScratch[T]{
		qs:    next(blockRows * p.D),
		s:     next(blockRows * scoreCols),
		m:     next(blockRows),
		l:     next(blockRows),
		mNew:  next(blockRows),
		sum:   next(blockRows),
		alpha: next(blockRows),
	}
	// Plain attention allocates no variant scratch.
	if p.ALiBi != nil {
		sc.tab = make([]T, windowPanelRows+maxSpan)
	}
	if p.Dropout.On() {
		sc.words = make([]uint32, maxSpan)
	}
	return sc
}

func forward[T kernels.Float](workers int, p kernels.Params, q, k, v, o, lse []T) error {
	if err := kernels.CheckForward(p, q, k, v, o, lse); err != nil {
		return err
	}
	if usesDecode(p) {
		return decode(workers, p, q, k, v, o, lse)
	}
	if p.Pages != nil {
		var err error
		if p, k, v, err = densePages(p, k, v); err != nil {
			return err
		}
	}
	heads, kvHeads := p.B*p.H, p.B*p.KVHeads()
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
	//
	// The workers' tiles follow Kᵀ in the same recycled buffer.
	buf := takeBuffer[T](p.KLen() + nScratch*forwardTilesLen(p.D))
	defer giveBuffer(buf)
	kt := buf[:p.KLen()] // every element a tile reads is written below
	// Whether each key block's V is finite, which a tile the masks cut
	// asks, is found here once when that reads less of V than asking on
	// the spot (blockFinite) would. Under a window most tiles are cut. A
	// causal mask cuts about one tile of tileSpan keys per row block and
	// query head, so asking reads a key head's V group·qBlocks·span/Nk
	// times over, four times at N = 2048 (2 % of the causal forward on
	// dev, 2026-12-05), and once here; but a few query rows against many
	// keys (a chunk of a long prompt) ask about a small part of V. Without
	// a mask no tile is cut and nothing asks: nil.
	var vFinite []bool
	asked := qBlocks * (p.H / p.KVHeads()) * tileSpan(blockRows)
	if p.Window.On || p.Causal && p.Nk <= asked {
		vFinite = make([]bool, kvHeads*kBlocks)
	}
	masks := entryMasks(p)
	parallelFor(workers, kvHeads*kBlocks, func(_, unit int) {
		bh, kb := unit/kBlocks, unit%kBlocks
		if kb*blockCols >= masks[bh/p.KVHeads()].Lk {
			return // padding keys, which no row reads
		}
		at := (bh*p.Nk + kb*blockCols) * p.D
		w := min(blockCols, p.Nk-kb*blockCols)
		transpose(w, p.D, k[at:], p.D, kt[at:], w)
		if vFinite != nil {
			vFinite[unit] = allFinite(v[at : at+w*p.D])
		}
	})

	scratch := make([]*forwardScratch[T], nScratch)
	for w := range scratch {
		at := p.KLen() + w*forwardTilesLen(p.D)
		scratch[w] = newForwardScratch(p, buf[at:at+forwardTilesLen(p.D)])
	}
	ops := opsFor[T]()
	group := p.H / p.KVHeads()
	biasData := kernels.BiasData[T](p.Bias)
	parallelFor(workers, heads*qBlocks, func(w, unit int) {
		bh, qb := forwardUnit(unit, qBlocks, heads)
		b, h := bh/p.H, bh%p.H
		mask := &masks[b]
		row0 := qb * blockRows
		rows := min(blockRows, p.Nq-row0)
		qOff := (bh*p.Nq + row0) * p.D
		o, lse := o[qOff:qOff+rows*p.D], lse[bh*p.Nq+row0:bh*p.Nq+row0+rows]
		// Padding rows (from Lq on) are not computed: output 0, LSE +Inf,
		// as for any row that sees no key.
		live := min(rows, max(0, mask.Lq-row0))
		clear(o[live*p.D:])
		for r := live; r < rows; r++ {
			lse[r] = T(math.Inf(1))
		}
		if live == 0 {
			return
		}
		// Query heads of a group read their key head where it is: K and V
		// are never repeated.
		kvh := b*p.KVHeads() + h/group
		kOff := kvh * p.Nk * p.D
		var vf []bool
		if vFinite != nil {
			vf = vFinite[kvh*kBlocks : (kvh+1)*kBlocks]
		}
		var bias []T
		if biasData != nil {
			at := p.BiasOffset(bh) + row0*p.Nk
			bias = biasData[at : at+live*p.Nk]
		}
		// A window bounded on the left gives each row a band of keys that
		// moves with the row, so one pass over the unit's Br rows computes
		// scores for Br − 1 keys per row that the row does not see (a fifth
		// of the work at 256 keys). Panels of fewer rows each compute their
		// own, narrower band; a row's visible keys, and so its bits, do not
		// change.
		panel := live
		if p.Window.On && p.Window.Left >= 0 {
			panel = windowPanelRows
		}
		for r0 := 0; r0 < live; r0 += panel {
			n := min(panel, live-r0)
			var panelBias []T
			if bias != nil {
				panelBias = bias[r0*p.Nk : (r0+n)*p.Nk]
			}
			forwardRowBlock(ops, scratch[w], &p, mask, bh, row0+r0, n, vf,
				q[qOff+r0*p.D:qOff+(r0+n)*p.D], kt[kOff:kOff+p.Nk*p.D], v[kOff:kOff+p.Nk*p.D], panelBias, o[r0*p.D:], lse[r0:])
		}
	})
	return nil
}

// bandUnits is about how many forward units a band of heads holds
// (forwardUnit).
const bandUnits = 64

// forwardUnit maps the forward's work unit to its query head (of the B·H)
// and row block. The heads go by bands of consecutive heads, about
// bandUnits units each, so that the workers running at once share a few
// heads' K and V (a band's K, Kᵀ and V take about 3·4096·D elements, 3 MiB
// at D = 64 in float32, until one head alone holds more); within a band
// the row blocks go from the last, each over the band's heads. Under a
// causal mask a row block sees more keys the later it is, so the long
// units start first and the short ones fill the end of the call: in the
// order of the row blocks, head by head, the last head's longest units
// started last and the other workers waited for them. A model of the
// dynamic hand-out (TestUnitsLongestFirst) put that idle share at 5 % of
// 16 workers at N = 2048 and 22 % at N = 512 (B = 1, H = 8), 0 in this
// order. Without a mask every unit costs the same; and which worker
// computes a unit, or when, never changes its bits.
func forwardUnit(unit, qBlocks, heads int) (bh, qb int) {
	per := min(heads, ceilDiv(bandUnits, qBlocks))
	first := unit / (per * qBlocks) * per
	n := min(per, heads-first) // the last band may hold fewer heads
	r := unit - first*qBlocks
	return first + r%n, qBlocks - 1 - r/n
}

// forwardRowBlock computes rows [row0, row0+rows) of query head bh (of
// the B·H) in a batch entry whose masks are mask, softcapping its scores,
// lowering them by ALiBi and adding the bias (in that order) before the
// online softmax, and dropping probabilities after it: q and o hold those
// rows, bias their rows of the head's bias slice (rows×Nk; nil without a
// bias), kt is its key head's Kᵀ by key blocks (D×w each) and v its V
// (Nk×D), vFinite whether each of its key blocks of V is finite (nil: not
// known, see blockFinite).
//
// The unnormalised output accumulates in o's rows themselves, which
// finishRows then divides in place: a scratch accumulator cost a copy of
// every row into o at the end, a second pass over each row (with the
// division, 5 % of the forward at N = 512 on dev, 2026-12-04).
func forwardRowBlock[T kernels.Float](ops mathOps[T], sc *forwardScratch[T], p *kernels.Params, mask *kernels.Mask, bh, row0, rows int, vFinite []bool, q, kt, v, bias, o, lse []T) {
	d := p.D
	scale := T(p.Scale)
	copy(sc.qs, q)
	ops.scale(sc.qs[:rows*d], scale)
	acc := o[:rows*d]
	clear(acc)
	negInf := T(math.Inf(-1))
	for r := range rows {
		sc.m[r], sc.l[r] = negInf, 0
	}
	// Each row sees a contiguous key range whose bounds grow with the row,
	// so the first row's start and the last row's end bound the key blocks
	// the unit visits: a window of w keys costs about w + Br + Bc keys per
	// row, not Nk.
	first, keys := unitRanges(mask, true, row0, rows, p.Nk, sc.lo[:], sc.hi[:])
	span := tileSpan(rows) // the scores' row stride
	for col0 := first / blockCols * blockCols; col0 < keys; col0 += span {
		// The tile covers keys [c0, c0+cols): its key blocks, less the keys
		// no row of the unit sees at its ends, so that a window that starts
		// inside a block does not pay for the whole block.
		c0 := max(col0, first)
		end := min(col0+span, keys)
		cols := end - c0
		s := sc.s[:rows*span]
		// Without a softcap, which needs the bare scores, the GEMM starts
		// from the bias and so adds it for free: bias + S, the products
		// summed first. Otherwise it sets the tile, which it covers.
		preload := bias != nil && p.Softcap == 0
		product := ops.gemmStore
		if preload {
			product = ops.gemm
			for r := range rows {
				copy(s[r*span:r*span+cols], bias[r*p.Nk+c0:])
			}
		}
		// S = (scale·Q)·Kᵀ, one product per key block of Kᵀ (D×w each, its
		// own row stride).
		for kb := col0; kb < end; kb += blockCols {
			from := max(kb, c0)
			product(rows, min(kb+blockCols, end)-from, d, sc.qs, d, kt[kb*d+from-kb:], min(blockCols, p.Nk-kb), s[from-c0:], span)
		}
		// Row r, key c0+x reads the ALiBi term tab[x + rows−1−r]: its
		// a − j is Aligned(row0+r) − (c0+x).
		var tab []T
		if p.ALiBi != nil {
			tab = alibiTable(sc.tab, T(p.ALiBi[bh%p.H]), mask.Aligned(row0)-c0+rows-1, rows+cols-1)
		}
		// The masks cut the tile unless every row sees all its keys; the
		// bounds grow with the row, so the last row's start and the first
		// row's end decide it, once per tile rather than once per row. An
		// uncut tile (every tile without a mask) asks no row for its range.
		cut := sc.lo[rows-1] > c0 || sc.hi[0] < c0+cols
		if !cut && p.Softcap == 0 && tab == nil && (bias == nil || preload) {
			// Nothing to do to the scores before the softmax: the whole
			// tile's maxima and exponentials in one call (the same bits as
			// onlineSoftmax's two calls per row), then each row's fold.
			ops.softmaxRows(rows, cols, s, span, sc.m, sc.mNew, sc.sum)
			sc.foldRows(ops, rows, cols, s, span, acc, d)
			if sc.words != nil {
				for r := range rows {
					sc.dropRow(p, bh, row0+r, c0, s[r*span:r*span+cols])
				}
			}
		} else {
			for r := range rows {
				sr := s[r*span : r*span+cols]
				from, to := 0, cols
				if cut {
					// Keys outside the row's range are masked. Their
					// probabilities are exactly 0, whatever their scores
					// (even NaN) were.
					from, to = clampRange(sc.lo[r], sc.hi[r], c0, cols)
					clear(sr[:from])
					clear(sr[to:])
					if from == to {
						continue
					}
				}
				if p.Softcap != 0 {
					softcapScores(sr[from:to], T(p.Softcap), nil)
				}
				if tab != nil {
					subtract(sr[from:to], tab[rows-1-r+from:])
				}
				if bias != nil && !preload {
					// Only the visible keys' entries are read: a masked
					// pair's bias, even NaN, never reaches the row (a
					// preloaded one was cleared above with its score).
					add(sr[from:to], bias[r*p.Nk+c0+from:])
				}
				onlineSoftmax(ops, sc, r, sr[from:to], acc[r*d:(r+1)*d])
				if sc.words != nil {
					sc.dropRow(p, bh, row0+r, c0+from, sr[from:to])
				}
			}
		}
		// acc += P·V for this tile.
		vb := v[c0*d : (c0+cols)*d]
		if cut && !spanFinite(vFinite, col0/blockCols, ceilDiv(end, blockCols), vb) {
			// Some rows do not see some keys of this tile, and a masked P
			// of 0 times an infinite or NaN value would still be NaN: each
			// row takes only the keys it sees.
			for r := range rows {
				if from, to := clampRange(sc.lo[r], sc.hi[r], c0, cols); to > from {
					ops.gemm(1, d, to-from, s[r*span+from:], span, vb[from*d:], d, acc[r*d:], d)
				}
			}
			continue
		}
		ops.gemm(rows, d, cols, s, span, vb, d, acc, d)
	}
	sc.finishRows(ops, rows, d, o, lse)
}

// finishRows turns the accumulators acc of rows 0 … rows−1, in o on entry
// (rows of d), into O = acc / l in place, writes LSE = m + log l into lse,
// and sets O = 0, LSE = +Inf for the rows whose key range [lo, hi) is
// empty.
func (sc *forwardScratch[T]) finishRows(ops mathOps[T], rows, d int, o, lse []T) {
	for r := range rows {
		or := o[r*d : (r+1)*d]
		if sc.hi[r] == sc.lo[r] {
			// Decided by the mask, not by l = 0, which a row whose scores
			// are all −Inf reaches too (and that row's O is NaN).
			clear(or)
			lse[r] = T(math.Inf(1))
			continue
		}
		// For a row whose scores were all −Inf, acc = l = 0 and O = 0·∞ =
		// NaN, LSE = −Inf + log 0 = −Inf, the IEEE values of the formulas.
		ops.scale(or, 1/sc.l[r])
		lse[r] = sc.m[r] + T(math.Log(float64(sc.l[r])))
	}
}

// dropRow drops the probabilities pr of row row of query head bh, keys
// from c0 on: the row sum l took every probability; only P·V drops.
func (sc *forwardScratch[T]) dropRow(p *kernels.Params, bh, row, c0 int, pr []T) {
	words := sc.words[:len(pr)]
	p.Dropout.RowWords(bh, row, c0, words)
	dropRow(pr, words, p.Dropout)
}

// dropRow turns one row's probabilities P into Z = P∘M/(1−p), its mask
// given by the Philox words of its keys.
func dropRow[T kernels.Float](pr []T, words []uint32, d kernels.Dropout) {
	switch x := any(pr).(type) {
	case []float32:
		simd.DropScale32(x, words, d.Threshold(), float32(d.KeepScale()))
	case []float64:
		simd.DropScale64(x, words, d.Threshold(), d.KeepScale())
	}
}

// onlineSoftmax folds the visible scores sr of row r into its running
// maximum m, sum l and accumulator acc (d elements), and leaves in sr the
// probabilities exp(S − m) to multiply with V.
//
// The maximum skips NaN scores (ops.max), so a NaN reaches l through its
// exponential and makes O and LSE NaN at the end. That needs a finite
// shift; when there is none, the row is handled here so that l, m and acc
// end with the IEEE values of log Σ exp(S) and O.
func onlineSoftmax[T kernels.Float](ops mathOps[T], sc *forwardScratch[T], r int, sr, acc []T) {
	mNew := max(sc.m[r], ops.max(sr))
	if math.IsInf(float64(mNew), 0) {
		infiniteShift(ops, sc, r, sr, acc, mNew)
		return
	}
	foldRow(ops, sc, r, mNew, ops.expShift(sr, mNew), acc)
}

// infiniteShift is onlineSoftmax for a row whose new maximum mNew is
// infinite: every score so far is −Inf or NaN, or one is +Inf, and
// exp(S − m) would be (±Inf) − (±Inf) = NaN. A NaN score makes l NaN for
// good. While m = −Inf these probabilities are 0 for any finite maximum to
// come; once m = +Inf, O is ∞/∞ = NaN (acc is poisoned) and LSE = +Inf (l
// is +Inf, unless NaN).
func infiniteShift[T kernels.Float](ops mathOps[T], sc *forwardScratch[T], r int, sr, acc []T, mNew T) {
	if hasNaN(sr) {
		sc.l[r] = T(math.NaN())
	}
	if mNew > sc.m[r] {
		ops.scale(acc, T(math.NaN()))
		sc.l[r] += T(math.Inf(1))
		sc.m[r] = mNew
	}
	clear(sr)
}

// foldRows is foldRow for every row of a tile that ops.softmaxRows took
// (s, rows of cols scores span apart, its new maxima and sums in sc.mNew
// and sc.sum; acc the rows' accumulators, d apart), with the rescaling
// factors exp(m_old − m_new) of all its rows in one vector call
// (ops.expShift), where a scalar exp per row whose maximum moved took 3 %
// of the forward's profile at N = 2048 on dev (2026-12-05).
func (sc *forwardScratch[T]) foldRows(ops mathOps[T], rows, cols int, s []T, span int, acc []T, d int) {
	moved := sc.moved[:0]
	for r := range rows {
		switch mNew := sc.mNew[r]; {
		case math.IsInf(float64(mNew), 0):
			infiniteShift(ops, sc, r, s[r*span:r*span+cols], acc[r*d:(r+1)*d], mNew)
		case sc.foldWithoutFactor(r, mNew, sc.sum[r]):
		default:
			sc.alpha[len(moved)] = sc.m[r] - mNew
			moved = append(moved, r)
		}
	}
	if len(moved) == 0 {
		return
	}
	alpha := sc.alpha[:len(moved)]
	ops.expShift(alpha, 0)
	for i, r := range moved {
		sc.rescaleRow(ops, r, sc.mNew[r], sc.sum[r], alpha[i], acc[r*d:(r+1)*d])
	}
}

// foldRow folds sum, the sum of row r's probabilities exp(S − mNew) for a
// finite new maximum mNew, into its running sum l and maximum m, and
// rescales its accumulator acc if the maximum moved.
func foldRow[T kernels.Float](ops mathOps[T], sc *forwardScratch[T], r int, mNew, sum T, acc []T) {
	if !sc.foldWithoutFactor(r, mNew, sum) {
		sc.rescaleRow(ops, r, mNew, sum, T(math.Exp(float64(sc.m[r]-mNew))), acc)
	}
}

// foldWithoutFactor folds row r's finite new maximum mNew and sum where
// that takes no rescaling factor, and reports whether it did. The common
// case after the first blocks is a maximum that did not move. On the
// row's first finite block (m = −Inf) the factor would be 0, which
// changes nothing: the accumulator holds only +0 or NaN (the products of
// masked probabilities with a non-finite V), and l only 0 or NaN, which
// l·0 + sum keeps. Most scalar exps at N = 512, two tiles a row, were
// those (2 % of the forward on dev, 2026-12-04).
func (sc *forwardScratch[T]) foldWithoutFactor(r int, mNew, sum T) bool {
	switch mOld := sc.m[r]; {
	case mNew == mOld:
		sc.l[r] += sum
	case math.IsInf(float64(mOld), -1):
		sc.l[r] = sc.l[r]*0 + sum
		sc.m[r] = mNew
	default:
		return false
	}
	return true
}

// rescaleRow folds row r's new maximum mNew and sum with the factor alpha
// = exp(m_old − mNew): l = l·alpha + sum, and acc scaled by alpha.
func (sc *forwardScratch[T]) rescaleRow(ops mathOps[T], r int, mNew, sum, alpha T, acc []T) {
	sc.l[r] = sc.l[r]*alpha + sum
	sc.m[r] = mNew
	ops.scale(acc, alpha)
}
