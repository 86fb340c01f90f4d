package conformance

import (
	"fmt"
	"math"
)

// Precision names the arithmetic a backend's float32 path computes in. It
// only selects the naive baseline that defines the float32 tolerance.
type Precision int

const (
	// Float32 is exact single precision on CUDA cores or the CPU.
	Float32 Precision = iota
	// TF32 rounds matrix-multiply operands to 10 mantissa bits and
	// accumulates in float32.
	TF32
	// BF16 stores matrix-multiply operands and results as bfloat16 (8
	// mantissa bits) and accumulates in float32.
	BF16
	// FP16 stores matrix-multiply operands and results as IEEE half (11
	// mantissa bits, max 65504) and accumulates in float32.
	FP16
)

func (p Precision) String() string {
	switch p {
	case Float32:
		return "fp32"
	case TF32:
		return "tf32"
	case BF16:
		return "bf16"
	case FP16:
		return "fp16"
	}
	return fmt.Sprintf("Precision(%d)", int(p))
}

// rounding returns how the naive baseline in precision p rounds the operands
// of each matrix product (in) and each operation's result (out). This
// mirrors an eager framework: TF32 matmuls take rounded inputs and return
// float32, while BF16 and FP16 tensors are stored rounded.
func (p Precision) rounding() (in, out func(float32) float32) {
	identity := func(x float32) float32 { return x }
	switch p {
	case TF32:
		return roundMantissa(10), identity
	case BF16:
		return roundMantissa(7), roundMantissa(7)
	case FP16:
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
