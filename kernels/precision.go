package kernels

import (
	"fmt"
	"strings"
)

// Precision names the arithmetic a backend uses for float32 tensors. Inputs
// and outputs stay float32 in every mode; only the products inside change.
// Float64 tensors are always computed in float64.
type Precision int

const (
	// FP32 computes in float32 throughout (CPU, or CUDA cores).
	FP32 Precision = iota
	// TF32 rounds matrix-product operands to 10 mantissa bits (tensor
	// cores) and accumulates in float32.
	TF32
	// BF16 converts matrix-product operands to bfloat16 (8 mantissa bits)
	// and accumulates in float32.
	BF16
	// FP16 converts matrix-product operands to IEEE half (11 mantissa bits,
	// largest 65504) and accumulates in float32.
	FP16
)

func (p Precision) String() string {
	switch p {
	case FP32:
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

// ParsePrecision returns the Precision that String names ("fp32", "tf32",
// "bf16" or "fp16", any case), or an error wrapping ErrInvalidParams.
func ParsePrecision(s string) (Precision, error) {
	for _, p := range []Precision{FP32, TF32, BF16, FP16} {
		if strings.EqualFold(s, p.String()) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w: precision %q, want fp32, tf32, bf16 or fp16", ErrInvalidParams, s)
}
