package simd

import "math"

// ExpShift32 replaces each x[i] by exp(x[i] − shift) and returns their sum,
// added in a fixed order so that results are deterministic.
// An x[i] of −Inf becomes 0. shift must be finite.
//
// The assembly paths are within 2 ulp of exp(x[i] − shift) (with x[i] − shift
// rounded to float32 first, as in the portable loop) and flush results
// below 2^-125 to 0; see the package doc.
func ExpShift32(x []float32, shift float32) float32 {
	if len(x) == 0 {
		return 0
	}
	return expShift32(x, shift)
}

// ExpShift64 is ExpShift32 for float64. The assembly paths are within
// 1e-15 relative error (a few ulp) and flush results below 2^-1021 to 0.
func ExpShift64(x []float64, shift float64) float64 {
	if len(x) == 0 {
		return 0
	}
	return expShift64(x, shift)
}

// SoftmaxRows32 takes one step of online softmax on each of rows rows of
// cols scores, ld apart in s: row r's shift is mNew[r] = max(mOld[r],
// Max32(row)), and unless that is ±Inf the row becomes exp(S − mNew[r])
// with sum[r] = ExpShift32(row, mNew[r]), the same bits as those calls; a
// row with an infinite shift is left as it is (sum[r] is not written), for
// the caller's own handling of it. On AVX-512 the whole tile is one call.
//
// SoftmaxRows32 panics if cols < 1 or ld < cols (with more than one row),
// or if a slice is too short.
func SoftmaxRows32(rows, cols int, s []float32, ld int, mOld, mNew, sum []float32) {
	if checkRows(rows, cols, len(s), ld, len(mOld), len(mNew), len(sum)) {
		softmaxRows32(rows, cols, s, ld, mOld, mNew, sum)
	}
}

// SoftmaxRows64 is SoftmaxRows32 for float64.
func SoftmaxRows64(rows, cols int, s []float64, ld int, mOld, mNew, sum []float64) {
	if checkRows(rows, cols, len(s), ld, len(mOld), len(mNew), len(sum)) {
		softmaxRowsGeneric(rows, cols, s, ld, mOld, mNew, sum, Max64, ExpShift64)
	}
}

// checkRows panics on misuse of SoftmaxRows and reports whether there is
// any row; the assembly indexes with raw pointers.
func checkRows(rows, cols, ls, ld, lOld, lNew, lSum int) bool {
	if rows <= 0 {
		return false
	}
	switch {
	case cols < 1:
		panic("simd: SoftmaxRows needs cols ≥ 1")
	case rows > 1 && ld < cols:
		panic("simd: SoftmaxRows needs ld ≥ cols")
	case ls < (rows-1)*ld+cols:
		panic("simd: SoftmaxRows: s too short")
	case lOld < rows || lNew < rows || lSum < rows:
		panic("simd: SoftmaxRows: mOld, mNew or sum too short")
	}
	return true
}

// softmaxRowsGeneric is SoftmaxRows by its definition, one row's calls at
// a time.
func softmaxRowsGeneric[T float32 | float64](rows, cols int, s []T, ld int, mOld, mNew, sum []T, rowMax func([]T) T, expShift func([]T, T) T) {
	for r := range rows {
		row := s[r*ld : r*ld+cols]
		m := max(mOld[r], rowMax(row))
		mNew[r] = m
		if !math.IsInf(float64(m), 0) {
			sum[r] = expShift(row, m)
		}
	}
}

// expShiftGeneric is the portable reference loop the assembly must match.
func expShiftGeneric[T float32 | float64](x []T, shift T) T {
	var sum T
	for i, xi := range x {
		e := T(math.Exp(float64(xi - shift)))
		x[i] = e
		sum += e
	}
	return sum
}
