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

// Add32 sets s[i] += t[i] for every i of s; t must be at least as long.
// It adds the bias entries of a row's visible keys to their scores.
func Add32(s, t []float32) {
	if len(s) > 0 {
		add32(s, t[:len(s)])
	}
}

// Add64 is Add32 for float64.
func Add64(s, t []float64) {
	if len(s) > 0 {
		add64(s, t[:len(s)])
	}
}

// Sub32 sets s[i] −= t[i] for every i of s; t must be at least as long.
// It subtracts a row's ALiBi terms from its scores.
func Sub32(s, t []float32) {
	if len(s) > 0 {
		sub32(s, t[:len(s)])
	}
}

// Sub64 is Sub32 for float64.
func Sub64(s, t []float64) {
	if len(s) > 0 {
		sub64(s, t[:len(s)])
	}
}

// Mul32 sets s[i] *= t[i] for every i of s; t must be at least as long.
// It forms the bias gradient's dS = P∘(dP − D).
func Mul32(s, t []float32) {
	if len(s) > 0 {
		mul32(s, t[:len(s)])
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

// addGeneric is the portable reference loop for Add32 and Add64.
func addGeneric[T float32 | float64](s, t []T) {
	t = t[:len(s)]
	for i := range s {
		s[i] += t[i]
	}
}

// subGeneric is the portable reference loop for Sub32 and Sub64.
func subGeneric[T float32 | float64](s, t []T) {
	t = t[:len(s)]
	for i := range s {
		s[i] -= t[i]
	}
}

// mulGeneric is the portable reference loop for Mul32.
func mulGeneric[T float32 | float64](s, t []T) {
	t = t[:len(s)]
	for i := range s {
		s[i] *= t[i]
	}
}
