//go:build !noasm

package simd

// expShift32AVX2 computes, 8 lanes at a time with a masked tail,
//
//	for i := range x { x[i] = exp(x[i] - shift); sum += x[i] }
//
// with x[i] − shift rounded to float32, results below 2^-125 flushed to 0,
// and the sum taken over 8 lane-wise partial sums reduced pairwise at the
// end (a fixed order).
//
//go:noescape
func expShift32AVX2(x []float32, shift float32) float32

// expShift64AVX2 is expShift32AVX2 for float64 (4 lanes, results below
// 2^-1021 flushed to 0).
//
//go:noescape
func expShift64AVX2(x []float64, shift float64) float64

// expShift32AVX512 computes the loop of expShift32AVX2 16 lanes at a time,
// with a polynomial of its own (degree 5, where AVX2's is 7): its results
// may differ from AVX2's in the last bits, within the same 2 ulp.
//
//go:noescape
func expShift32AVX512(x []float32, shift float32) float32

// expShift64AVX512 computes the loop of expShift64AVX2 8 lanes at a time.
//
//go:noescape
func expShift64AVX512(x []float64, shift float64) float64

// softmaxRows32AVX512 is SoftmaxRows32 on AVX-512, the row's maximum and
// exponential by max32AVX512's and expShift32AVX512's instructions.
//
//go:noescape
func softmaxRows32AVX512(rows, cols int, s *float32, ld int, mOld, mNew, sum *float32)

func softmaxRows32(rows, cols int, s []float32, ld int, mOld, mNew, sum []float32) {
	if hasAVX512 {
		softmaxRows32AVX512(rows, cols, &s[0], ld, &mOld[0], &mNew[0], &sum[0])
		return
	}
	softmaxRowsGeneric(rows, cols, s, ld, mOld, mNew, sum, Max32, ExpShift32)
}

func expShift32(x []float32, shift float32) float32 {
	switch {
	case hasAVX512:
		return expShift32AVX512(x, shift)
	case hasAVX2:
		return expShift32AVX2(x, shift)
	}
	return expShiftGeneric(x, shift)
}

func expShift64(x []float64, shift float64) float64 {
	switch {
	case hasAVX512:
		return expShift64AVX512(x, shift)
	case hasAVX2:
		return expShift64AVX2(x, shift)
	}
	return expShiftGeneric(x, shift)
}
