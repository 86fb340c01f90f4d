package cudakernels

import (
	"errors"
	"fmt"
)

// Precision selects how the float32 entry points (Forward32, Backward32)
// compute. Inputs and outputs are float32 in every mode; only the arithmetic
// inside the kernel changes. Forward64 and Backward64 always compute in
// float64 on CUDA cores.
type Precision int

const (
	// FP32 computes exactly in float32 on CUDA cores.
	FP32 Precision = iota
	// TF32 multiplies on tensor cores with inputs rounded to TF32 (10-bit
	// mantissa) and accumulates in float32.
	TF32
	// BF16 converts inputs to bfloat16 on chip, multiplies on tensor cores
	// and accumulates in float32.
	BF16
	// FP16 converts inputs to float16 on chip, multiplies on tensor cores and
	// accumulates in float32.
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

var (
	// ErrNoDevice is wrapped by NewBackend's error when no usable CUDA device
	// is present.
	ErrNoDevice = errors.New("cudakernels: no CUDA device")
	// ErrUnsupported is wrapped by errors for requests this package cannot
	// serve (a head dimension, precision or device it has no kernel for).
	// For a head dimension it comes together with kernels.ErrInvalidParams.
	ErrUnsupported = errors.New("cudakernels: unsupported")
	// ErrOutOfMemory is wrapped when a device allocation fails for lack of
	// memory.
	ErrOutOfMemory = errors.New("cudakernels: out of device memory")
)
