package simd

import "math"

// ExpShift32 replaces each x[i] by exp(x[i] − shift) and returns their sum.
// An x[i] of −Inf becomes 0. shift must be finite.
func ExpShift32(x []float32, shift float32) float32 {
	return expShiftGeneric(x, shift)
}

// ExpShift64 is ExpShift32 for float64.
func ExpShift64(x []float64, shift float64) float64 {
	return expShiftGeneric(x, shift)
}

func expShiftGeneric[T float32 | float64](x []T, shift T) T {
	var sum T
	for i, xi := range x {
		e := T(math.Exp(float64(xi - shift)))
		x[i] = e
		sum += e
	}
	return sum
}
