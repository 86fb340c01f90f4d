package cpukernels

import (
	"math"

	"github.com/gorgonia-flash/flashattention/internal/hostmem"
	"github.com/gorgonia-flash/flashattention/kernels"
)

// decodeRows is the most query rows per key head (query heads of a group
// times Nq) that the decode path takes: one forward tile's worth, so that
// every row of a key head shares each read of its K and V.
const decodeRows = blockRows

// splitCores is the core count the decode's key split is chosen for
// (kernels.SplitKV). A constant, not Workers or the machine's cores: the
// split decides the order of the sums, and results must not depend on
// where or with how many goroutines a call runs. 64 units keep up to 64
// cores busy on one sequence; on fewer, the extra splits cost only their
// merge, a few rows of D per split.
const splitCores = 64

// ntRows is the group size (query rows per key head) below which the
// score product is S = Q·Kᵀ by simd.GemmNT32, where the CPU has its
// vector path, rather than Sᵀ = K·Qᵀ by the GEMM: the GEMM vectorises
// along the rows, so a group of 4 fills 4 of its 16 lanes. simd's
// BenchmarkGemmNT32 (128 keys, D = 128, AVX-512) puts GemmNT32 4× faster
// at 4 rows and 2× at 8, and the GEMM ahead from 16.
const ntRows = 16

// usesDecode reports whether p runs on the decode path: few rows per key
// head, no bias and no dropout (the tiled forward computes those).
func usesDecode(p kernels.Params) bool {
	return p.H/p.KVHeads()*p.Nq <= decodeRows && p.Bias == nil && !p.Dropout.On()
}

// decodeScratch is one worker's tiles: the forward's, for the group's
// rows, with the scaled queries transposed (D×rows) and the scores of one
// key block by keys (Bc×rows), as the score GEMM takes and makes them
// (GemmNT32 reads the queries by rows and writes S by rows).
type decodeScratch[T kernels.Float] struct {
	*forwardScratch[T]
	qt  []T // D×rows: (scale·Q)ᵀ
	st  []T // Bc×rows: Sᵀ of one key block
	acc []T // rows×D: the unnormalised outputs, kept apart from o for a split's partials
}

// decodeScratchLen is the number of elements of one decodeScratch's
// slices for rows rows at head dimension d: a forward scratch's tiles,
// then qt, st and acc.
func decodeScratchLen(d, rows int) int {
	return forwardTilesLen(d) + d*rows + blockCols*rows + rows*d
}

// newDecodeScratch carves a worker's scratch out of tiles
// (decodeScratchLen elements, contents undefined).
func newDecodeScratch[T kernels.Float](p kernels.Params, rows int, tiles []T) *decodeScratch[T] {
	next := carver(tiles)
	return &decodeScratch[T]{forwardScratch: newForwardScratch(p, next(forwardTilesLen(p.D))),
		qt: next(p.D * rows), st: next(blockCols * rows), acc: next(rows * p.D)}
}

// decode computes the forward of a problem usesDecode accepts, dense or
// paged. One work unit is a (key head, key split): it loads every query
// row of the key head's group (H/Hkv heads × Nq rows, contiguous in q),
// and for each block of its keys takes the scores of all those rows in one
// product on K where it lies: S = (scale·Q)·Kᵀ by simd.GemmNT32 for a
// group below ntRows where it has a vector path, else Sᵀ = K·(scale·Q)ᵀ
// by the GEMM on the few query rows transposed, never the cache; both sum
// each score in the same order, the backward's. Then it adds P·V for all
// of them in one GEMM, so each K and V row is read from memory once per
// call whatever the group size. The keys a unit's rows see (their masks'
// union) are split into kernels.SplitKV(p, splitCores) ranges; with more
// than one, each unit writes a partial output and LSE per row, in float64,
// and kernels.MergePartials combines a row's partials in split order
// afterwards.
func decode[T kernels.Float](workers int, p kernels.Params, q, k, v, o, lse []T) error {
	g := p.H / p.KVHeads()
	rows := g * p.Nq
	kvHeads := p.B * p.KVHeads()
	n := kernels.SplitKV(p, splitCores)
	units := kvHeads * n
	nScratch := max(1, min(workers, units))
	var parts int // float64 elements of the partials, two of T's at most
	if n > 1 {
		parts = units * rows * (p.D + 1)
	}
	if err := hostmem.CheckElems[T](nScratch*(forwardScratchLen(p.D)+(2*p.D+blockCols)*rows) + 2*parts); err != nil {
		return err
	}
	var partO, partLSE []float64
	var seen []bool
	if n > 1 {
		// Row r of key head kvh, split s: index (kvh·rows + r)·n + s, so
		// that a row's partials are contiguous for the merge. Recycled
		// (workspace.go): every unit writes seen for its rows, and the
		// merge reads the partials of the splits seen only.
		partO, partLSE = takeBuffer[float64](units*rows*p.D), takeBuffer[float64](units*rows)
		defer giveBuffer(partO)
		defer giveBuffer(partLSE)
		seen = make([]bool, units*rows)
	}
	// The workers' scratch comes from one recycled buffer too (run sets
	// every element it reads), each worker carving its part at its first
	// unit: with 350 KB of fresh scratch and partials a step of a short
	// cache took 989 µs where it now takes 411 (dev, Nk = 1024,
	// BenchmarkDecode32, 2026-12-04).
	per := decodeScratchLen(p.D, rows)
	buf := takeBuffer[T](nScratch * per)
	defer giveBuffer(buf)
	scratch := make([]*decodeScratch[T], nScratch)
	masks := entryMasks(p)
	ops := opsFor[T]()
	parallelFor(workers, units, func(w, unit int) {
		if scratch[w] == nil {
			scratch[w] = newDecodeScratch(p, rows, buf[w*per:(w+1)*per])
		}
		kvh, s := unit/n, unit%n
		b := kvh / p.KVHeads()
		qOff := (b*p.H + kvh%p.KVHeads()*g) * p.Nq * p.D
		u := decodeUnit[T]{p: &p, ops: ops, sc: scratch[w], mask: &masks[b], kvh: kvh, g: g, rows: rows}
		from, to := u.ranges(s, n)
		u.run(from, to, q[qOff:qOff+rows*p.D], k, v)
		if n == 1 {
			u.finish(o[qOff:qOff+rows*p.D], lse[qOff/p.D:qOff/p.D+rows])
			return
		}
		for r := range rows {
			at := (kvh*rows+r)*n + s
			partLSE[at], seen[at] = u.partial(r, from, to, partO[at*p.D:(at+1)*p.D])
		}
	})
	if n == 1 {
		return nil
	}
	parallelFor(workers, kvHeads, func(_, kvh int) {
		b := kvh / p.KVHeads()
		qOff := (b*p.H + kvh%p.KVHeads()*g) * p.Nq * p.D
		for r := range rows {
			at := (kvh*rows + r) * n
			row := qOff + r*p.D
			lse[row/p.D] = T(kernels.MergePartials(partLSE[at:at+n], partO[at*p.D:(at+n)*p.D], seen[at:at+n], o[row:row+p.D]))
		}
	})
	return nil
}

// decodeUnit is one work unit's problem: key head kvh of the B·Hkv, whose
// g query heads give rows = g·Nq rows, row r being row r mod Nq of the
// group's head r / Nq.
type decodeUnit[T kernels.Float] struct {
	p       *kernels.Params
	ops     mathOps[T]
	sc      *decodeScratch[T]
	mask    *kernels.Mask
	kvh     int
	g, rows int
}

// ranges sets every row's key range in the scratch and returns split s of
// n of their union.
func (u *decodeUnit[T]) ranges(s, n int) (from, to int) {
	first, end := u.mask.Lk, 0
	for r := range u.rows {
		lo, hi := u.mask.KeyRange(r % u.p.Nq)
		u.sc.lo[r], u.sc.hi[r] = lo, hi
		if lo < hi {
			first, end = min(first, lo), max(end, hi)
		}
	}
	if first >= end {
		return 0, 0
	}
	return kernels.SplitRange(first, end, s, n)
}

// run folds keys [from, to) into the rows' running maxima, sums and
// accumulators, block by block, as forwardRowBlock does for one head.
func (u *decodeUnit[T]) run(from, to int, q, k, v []T) {
	p, sc, ops, d, rows := u.p, u.sc, u.ops, u.p.D, u.rows
	copy(sc.qs, q)
	ops.scale(sc.qs[:rows*d], T(p.Scale))
	nt := ops.gemmNT != nil && rows < ntRows
	if !nt {
		transpose(rows, d, sc.qs, d, sc.qt, rows)
	}
	clear(sc.acc[:rows*d])
	for r := range rows {
		sc.m[r], sc.l[r] = T(math.Inf(-1)), 0
	}
	for c0 := from; c0 < to; c0 += blockCols {
		cols := min(blockCols, to-c0)
		// S by rows, for the softmax, a contiguous run of keys (a page's,
		// or the whole block) at a time: directly, or as Sᵀ = K·(scale·Q)ᵀ
		// transposed.
		s := sc.s[:rows*blockCols]
		if nt {
			clear(s)
			for x := 0; x < cols; {
				n, at := u.keyRun(c0, x, cols)
				ops.gemmNT(rows, n, d, sc.qs, d, k[at:], d, s[x:], blockCols)
				x += n
			}
		} else {
			st := sc.st[:cols*rows]
			clear(st)
			for x := 0; x < cols; {
				n, at := u.keyRun(c0, x, cols)
				ops.gemm(n, rows, d, k[at:], d, sc.qt, rows, st[x*rows:], rows)
				x += n
			}
			transpose(cols, rows, st, rows, s, blockCols)
		}
		cut := false
		for r := range rows {
			sr := s[r*blockCols : r*blockCols+cols]
			lo, hi := clampRange(sc.lo[r], sc.hi[r], c0, cols)
			if lo > 0 || hi < cols {
				// Masked keys' probabilities are exactly 0, whatever their
				// scores (even NaN) were.
				cut = true
				clear(sr[:lo])
				clear(sr[hi:])
			}
			if lo == hi {
				continue
			}
			if p.Softcap != 0 {
				softcapScores(sr[lo:hi], T(p.Softcap), nil)
			}
			if p.ALiBi != nil {
				h := u.kvh%p.KVHeads()*u.g + r/p.Nq
				a := u.mask.Aligned(r % p.Nq)
				subtract(sr[lo:hi], alibiTable(sc.tab, T(p.ALiBi[h]), a-c0, cols)[lo:])
			}
			onlineSoftmax(ops, sc.forwardScratch, r, sr[lo:hi], sc.acc[r*d:(r+1)*d])
		}
		// acc += P·V, run by run.
		for x := 0; x < cols; {
			n, at := u.keyRun(c0, x, cols)
			u.addPV(s[x:], v[at:at+n*d], c0+x, n, cut)
			x += n
		}
	}
}

// addPV adds P·V of keys [j0, j0+n) to the accumulators: s holds their
// probabilities (row r at r·Bc), vb their values.
func (u *decodeUnit[T]) addPV(s, vb []T, j0, n int, cut bool) {
	sc, d := u.sc, u.p.D
	if cut && !allFinite(vb) {
		// A masked P of 0 times an infinite or NaN value would still be
		// NaN: each row takes only the keys it sees.
		for r := range u.rows {
			if lo, hi := clampRange(sc.lo[r], sc.hi[r], j0, n); hi > lo {
				u.ops.gemm(1, d, hi-lo, s[r*blockCols+lo:], blockCols, vb[lo*d:], d, sc.acc[r*d:], d)
			}
		}
		return
	}
	u.ops.gemm(u.rows, d, n, s, blockCols, vb, d, sc.acc, d)
}

// keyRun returns the run of consecutive key rows in k and v that starts
// at key c0+x of a block of cols keys: its length n and its offset. Dense
// keys make one run of the rest of the block, paged ones end at their
// page's end.
func (u *decodeUnit[T]) keyRun(c0, x, cols int) (n, at int) {
	p := u.p
	n = cols - x
	if p.Pages != nil {
		n = min(n, p.Pages.Size-(c0+x)%p.Pages.Size)
	}
	return n, p.KeyRow(u.kvh, c0+x)
}

// finish writes the rows' outputs and LSEs once run has covered all their
// keys, as forwardRowBlock ends (finishRows, on a copy of the
// accumulators in o).
func (u *decodeUnit[T]) finish(o, lse []T) {
	copy(o, u.sc.acc[:u.rows*u.p.D])
	u.sc.finishRows(u.ops, u.rows, u.p.D, o, lse)
}

// partial writes row r's output over the split [from, to) into o, in
// float64, and returns its LSE and whether the row saw a key of the split.
func (u *decodeUnit[T]) partial(r, from, to int, o []float64) (float64, bool) {
	sc, d := u.sc, u.p.D
	if max(sc.lo[r], from) >= min(sc.hi[r], to) {
		return 0, false
	}
	l := float64(sc.l[r])
	for i, x := range sc.acc[r*d : (r+1)*d] {
		o[i] = float64(x) / l
	}
	return float64(sc.m[r]) + math.Log(l), true
}

// densePages gathers paged keys and values into dense [B, Hkv, Nk, D]
// tensors and returns them with p's problem on them, for the tiled
// forward: a long prompt attends to its cache once, where one copy of its
// keys costs little beside the scores of its many rows. Padding keys stay
// zero.
func densePages[T kernels.Float](p kernels.Params, k, v []T) (kernels.Params, []T, []T, error) {
	dp := p
	dp.Pages = nil
	if err := hostmem.CheckElems[T](2 * dp.KLen()); err != nil {
		return p, nil, nil, err
	}
	dk, dv := make([]T, dp.KLen()), make([]T, dp.KLen())
	size := p.Pages.Size
	for kvh := range p.B * p.KVHeads() {
		lk := p.Mask(kvh / p.KVHeads()).Lk
		for j := 0; j < lk; j += size {
			run := min(size, lk-j) * p.D
			from, to := p.KeyRow(kvh, j), dp.KeyRow(kvh, j)
			copy(dk[to:to+run], k[from:from+run])
			copy(dv[to:to+run], v[from:from+run])
		}
	}
	return dp, dk, dv, nil
}
