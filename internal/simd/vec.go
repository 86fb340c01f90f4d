package simd

import "math"

// Max32 returns the largest element of x, ignoring NaNs; it returns −Inf
// for an empty x or one holding only −Inf and NaN. This is the row maximum
// m of online softmax.
func Max32(x []float32) float32 {
	if len(x) == 0 {
		return float32(math.Inf(-1))
	}
	return max32(x)
}

// Max64 is Max32 for float64.
func Max64(x []float64) float64 {
	if len(x) == 0 {
		return math.Inf(-1)
	}
	return max64(x)
}

// Scale32 multiplies each x[i] by a: the rescaling of an output row by
// exp(m_old − m_new) in online softmax.
func Scale32(x []float32, a float32) {
	if len(x) > 0 {
		scale32(x, a)
	}
}

// Scale64 is Scale32 for float64.
func Scale64(x []float64, a float64) {
	if len(x) > 0 {
		scale64(x, a)
	}
}

// maxGeneric is the portable reference loop for Max32 and Max64.
func maxGeneric[T float32 | float64](x []T) T {
	m := T(math.Inf(-1))
	for _, v := range x {
		if v > m {
			m = v
		}
	}
	return m
}

// scaleGeneric is the portable reference loop for Scale32 and Scale64.
func scaleGeneric[T float32 | float64](x []T, a T) {
	for i := range x {
		x[i] *= a
	}
}
