package conformance

import (
	"math"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// rounding returns how the naive baseline in precision p rounds the operands
// of each matrix product (in) and each operation's result (out). This
// mirrors an eager framework: TF32 matmuls take rounded inputs and return
// float32, while BF16 and FP16 tensors are stored rounded.
func rounding(p kernels.Precision) (in, out func(float32) float32) {
	identity := func(x float32) float32 { return x }
	switch p {
	case kernels.TF32:
		return roundMantissa(10), identity
	case kernels.BF16:
		return roundMantissa(7), roundMantissa(7)
	case kernels.FP16:
		return roundHalf, roundHalf
	}
	return identity, identity
}

// roundMantissa rounds to nearest-even keeping bits explicit mantissa bits,
// with float32's exponent range (bfloat16, TF32).
func roundMantissa(bits uint) func(float32) float32 {
	drop := 23 - bits
	return func(x float32) float32 {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return x
		}
		u := math.Float32bits(x)
		half := uint32(1)<<(drop-1) - 1 + (u>>drop)&1
		u += half
		u &^= uint32(1)<<drop - 1
		return math.Float32frombits(u)
	}
}

// roundHalf rounds to IEEE binary16: 10 explicit mantissa bits, overflow to
// ±Inf past 65504, and subnormals below 2^-14.
func roundHalf(x float32) float32 {
	ax := math.Abs(float64(x))
	switch {
	case math.IsNaN(float64(x)) || ax == 0:
		return x
	case ax >= 65520: // rounds past the largest half, 65504
		return float32(math.Copysign(math.Inf(1), float64(x)))
	case ax < 1.0/(1<<14): // subnormal: fixed spacing 2^-24
		q := math.RoundToEven(float64(x) * (1 << 24))
		return float32(q / (1 << 24))
	}
	return roundMantissa(10)(x)
}
