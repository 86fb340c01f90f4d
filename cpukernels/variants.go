package cpukernels

import (
	"slices"

	"github.com/gorgonia-flash/flashattention/internal/simd"
	"github.com/gorgonia-flash/flashattention/kernels"
)

// clampRange returns the part of [lo, hi) inside [base, base+n), relative
// to base: the visible columns (or rows) of one tile.
func clampRange(lo, hi, base, n int) (from, to int) {
	from = min(n, max(0, lo-base))
	to = max(from, min(n, hi-base))
	return from, to
}

// softcapScores replaces each s[i] by c·tanh(s[i]/c) and, when grad is not
// nil, stores 1 − tanh² (the derivative) in grad[i].
//
// float32 scores take simd.Softcap32, in float32 throughout: an odd
// polynomial below |s/c| = ½ and 1 − 2/(1 + e^{2|s/c|}) above, within 4
// ulp of the result everywhere. The exponential form alone has an
// absolute error of a few rounding units, so near 0 it errs by units of c
// rather than of the result; in float32 that was four times a naive
// float32 computation's error on the softcap golden case, which is why
// the float32 path was computed in float64 before Softcap32. float64
// scores keep that form, in place, through the vectorised exponential and
// with no branch on the sign: an e that overflows to +Inf gives exactly 1,
// e = 0 gives −1, and NaN stays NaN.
func softcapScores[T kernels.Float](s []T, c T, grad []T) {
	c64 := float64(c)
	switch x := any(s).(type) {
	case []float32:
		g, _ := any(grad).([]float32)
		simd.Softcap32(x, g, float32(c))
	case []float64:
		simd.Scale64(x, 2/c64)
		simd.ExpShift64(x, 0)
		g, _ := any(grad).([]float64)
		simd.TanhScaleFromExp64(x, g, x, c64)
	}
}

// alibiTable fills tab[u] = slope·|d0 − u| for u in [0, n). A tile's ALiBi
// term slope·|a − j| depends only on a − j, which is constant along the
// tile's diagonals, so one table of rows + cols − 1 entries serves the
// whole tile: each row (or each key's column) subtracts a contiguous slice
// of it, with no per-score absolute value or conversion.
func alibiTable[T kernels.Float](tab []T, slope T, d0, n int) []T {
	tab = tab[:n]
	for u := range tab {
		tab[u] = slope * T(max(d0-u, u-d0))
	}
	return tab
}

// subtract sets s[i] −= t[i] (simd.Sub32, Sub64): a row's ALiBi terms.
func subtract[T kernels.Float](s, t []T) {
	switch x := any(s).(type) {
	case []float32:
		simd.Sub32(x, any(t).([]float32))
	case []float64:
		simd.Sub64(x, any(t).([]float64))
	}
}

// add sets s[i] += t[i] (simd.Add32, Add64): the bias entries of one
// row's visible keys in the forward, of one key's visible rows in the
// backward.
func add[T kernels.Float](s, t []T) {
	switch x := any(s).(type) {
	case []float32:
		simd.Add32(x, any(t).([]float32))
	case []float64:
		simd.Add64(x, any(t).([]float64))
	}
}

// addTransposed adds the rows×cols matrix src (row stride lds), transposed,
// into dst (cols×rows, row stride ldd): a tile's dSᵀ into dBias, by rows
// of dBias. With store, it writes src + 0 instead, which is what adding
// into a cleared dst gave (+0 for −0 included), without reading dst.
//
// float32 goes through simd.AddTransposed32 (8×8 blocks in registers);
// float64 goes eight rows of dst at a time, reading src in runs of eight
// contiguous entries (one key's dS at eight query rows) rather than one
// strided entry at a time.
func addTransposed[T kernels.Float](rows, cols int, src []T, lds int, dst []T, ldd int, store bool) {
	if s32, ok := any(src).([]float32); ok {
		simd.AddTransposed32(rows, cols, s32, lds, any(dst).([]float32), ldd, store)
		return
	}
	c := 0
	for ; c+8 <= cols; c += 8 {
		d0 := dst[c*ldd : c*ldd+rows]
		d1 := dst[(c+1)*ldd:][:len(d0)]
		d2 := dst[(c+2)*ldd:][:len(d0)]
		d3 := dst[(c+3)*ldd:][:len(d0)]
		d4 := dst[(c+4)*ldd:][:len(d0)]
		d5 := dst[(c+5)*ldd:][:len(d0)]
		d6 := dst[(c+6)*ldd:][:len(d0)]
		d7 := dst[(c+7)*ldd:][:len(d0)]
		if store {
			for r := range d0 {
				s := src[r*lds+c:][:8]
				d0[r], d1[r], d2[r], d3[r] = s[0]+0, s[1]+0, s[2]+0, s[3]+0
				d4[r], d5[r], d6[r], d7[r] = s[4]+0, s[5]+0, s[6]+0, s[7]+0
			}
			continue
		}
		for r := range d0 {
			s := src[r*lds+c:][:8]
			d0[r] += s[0]
			d1[r] += s[1]
			d2[r] += s[2]
			d3[r] += s[3]
			d4[r] += s[4]
			d5[r] += s[5]
			d6[r] += s[6]
			d7[r] += s[7]
		}
	}
	for ; c < cols; c++ {
		d := dst[c*ldd : c*ldd+rows]
		if store {
			for r := range d {
				d[r] = src[r*lds+c] + 0
			}
			continue
		}
		for r := range d {
			d[r] += src[r*lds+c]
		}
	}
}

// transposeTile is transpose for a tile read from a large matrix (the
// bias, row stride Nk): float32 as transpose does it; float64 reads
// eight rows of src at a time and writes each column's eight entries
// together, eight contiguous elements of dst.
func transposeTile[T kernels.Float](rows, cols int, src []T, lds int, dst []T, ldd int) {
	if _, ok := any(src).([]float32); ok {
		transpose(rows, cols, src, lds, dst, ldd) // simd.Transpose32
		return
	}
	r := 0
	for ; r+8 <= rows; r += 8 {
		s0 := src[r*lds : r*lds+cols]
		s1 := src[(r+1)*lds:][:len(s0)]
		s2 := src[(r+2)*lds:][:len(s0)]
		s3 := src[(r+3)*lds:][:len(s0)]
		s4 := src[(r+4)*lds:][:len(s0)]
		s5 := src[(r+5)*lds:][:len(s0)]
		s6 := src[(r+6)*lds:][:len(s0)]
		s7 := src[(r+7)*lds:][:len(s0)]
		for c := range s0 {
			d := dst[c*ldd+r:][:8]
			d[0], d[1], d[2], d[3] = s0[c], s1[c], s2[c], s3[c]
			d[4], d[5], d[6], d[7] = s4[c], s5[c], s6[c], s7[c]
		}
	}
	if r < rows {
		transpose(rows-r, cols, src[r*lds:], lds, dst[r:], ldd)
	}
}

// clearCols sets columns [c0, c1) of rows [r0, r1) of the matrix m (row
// stride ld) to 0.
func clearCols[T kernels.Float](m []T, ld, r0, r1, c0, c1 int) {
	if c0 >= c1 {
		return
	}
	for r := r0; r < r1; r++ {
		clear(m[r*ld+c0 : r*ld+c1])
	}
}

// blockFinite is spanFinite for block i alone.
func blockFinite[T kernels.Float](known []bool, i int, x []T) bool {
	return spanFinite(known, i, i+1, x)
}

// spanFinite reports whether blocks [b0, b1), whose elements are x, hold no
// NaN or ±Inf: from known when the caller scanned every block up front
// (known not nil), else a scan of x now.
func spanFinite[T kernels.Float](known []bool, b0, b1 int, x []T) bool {
	if known != nil {
		return !slices.Contains(known[b0:b1], false)
	}
	return allFinite(x)
}

// entryMasks returns every batch entry's kernels.Mask, found once per call
// rather than by every work unit (a unit per head when N is small).
func entryMasks(p kernels.Params) []kernels.Mask {
	masks := make([]kernels.Mask, p.B)
	for b := range masks {
		masks[b] = p.Mask(b)
	}
	return masks
}

// unitRanges fills lo[x], hi[x] with the range of base+x for x < n: the
// keys row base+x sees (byRow, Mask.KeyRange, full = Nk) or the rows that
// see key base+x (Mask.QueryRange, full = Nq). Both bounds grow with x, so
// the first start and the last end bound the whole unit, which it returns
// (end = 0 when no x has a non-empty range); and when neither of them is
// cut, no mask reaches the unit and every range is [0, full), which is set
// without asking the mask n times. (A flag rather than a method value,
// which would be allocated per call.)
func unitRanges(mask *kernels.Mask, byRow bool, base, n, full int, lo, hi []int) (first, end int) {
	rng := mask.QueryRange
	if byRow {
		rng = mask.KeyRange
	}
	first, firstEnd := rng(base)
	lastStart, end := rng(base + n - 1)
	masked := lastStart > 0 || firstEnd < full
	for x := range n {
		lo[x], hi[x] = 0, full
		if masked {
			lo[x], hi[x] = rng(base + x)
		}
	}
	if first >= end {
		end = 0
	}
	return first, end
}
