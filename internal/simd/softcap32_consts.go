package simd

import "math"

// softcap32Consts are the constants of softcap32AVX512, broadcast from
// here: the tanh series' coefficients of x³ … x¹⁵ divided by x³'s power
// pattern (so that tanh x = x + x·z·P(z), z = x², P's coefficients from
// z⁶ down), then those of exp(r) = Σ rᵏ/k! from r⁷ down to r⁰, log₂e, ln 2
// in two parts (hi + lo), ½, 1, 2, the largest exponent argument kept, and
// the sign mask. The series coefficients are tanh's Taylor coefficients
// (Bernoulli numbers), exact rationals rounded to float32.
const softcap32NConsts = 23

var softcap32Consts = [softcap32NConsts]float32{
	// P(z), z⁶ … z⁰: −929569/638512875, 21844/6081075, −1382/155925,
	// 62/2835, −17/315, 2/15, −1/3.
	-929569.0 / 638512875, 21844.0 / 6081075, -1382.0 / 155925, 62.0 / 2835, -17.0 / 315, 2.0 / 15, -1.0 / 3,
	// exp(r), r⁷ … r⁰.
	1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1, 1,
	// log₂e, ln 2 = hi + lo (hi with 9 zero low bits, so that n·hi is exact).
	1.44269504088896341, 0.693145751953125, 1.42860682030941723212e-6,
	// ½, 1, 2, the exponent argument's cap (e^100 overflows to +Inf), and
	// the sign bit (−0, which a Go constant cannot spell).
	0.5, 1, 2, 100, math.Float32frombits(1 << 31),
}
