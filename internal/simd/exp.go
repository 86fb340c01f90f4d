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
