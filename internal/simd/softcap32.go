package simd

import "math"

// Softcap32 replaces each s[i] by c·tanh(s[i]/c), the attention softcap,
// and, when grad is not nil, sets grad[i] to 1 − tanh²(s[i]/c), its
// derivative, all in float32 arithmetic. With x = s/c it takes an odd
// polynomial in x for |x| < ½ (the Taylor series of tanh to x¹⁵, below
// 2·10⁻⁸ relative there) and 1 − 2/(1 + e^{2|x|}) with x's sign from ½ on,
// where no cancellation is left; the derivative is 1 − t² for the first
// and q·(2 − q), q = 2/(1 + e^{2|x|}), for the second, which keeps its
// precision where t nears ±1. ±Inf scores give ±c (derivative 0), NaN stays
// NaN. The AVX-512 path is within 4 ulp of c·tanh and within 2⁻²² of the
// derivative (TestSoftcap32); the portable loop computes both in float64
// and rounds once. In float32 it is about twice the speed of the float64
// exponential that the softcap took before. c must be positive. It panics
// if grad is not nil and its length differs.
func Softcap32(s, grad []float32, c float32) {
	if grad != nil {
		checkSameLen(len(grad), len(s))
	}
	if len(s) > 0 {
		softcap32(s, grad, c)
	}
}

// softcap32Generic is the portable loop of Softcap32.
func softcap32Generic(s, grad []float32, c float32) {
	c64 := float64(c)
	for i, x := range s {
		t := math.Tanh(float64(x) / c64)
		s[i] = float32(c64 * t)
		if grad != nil {
			grad[i] = float32(1 - t*t)
		}
	}
}
