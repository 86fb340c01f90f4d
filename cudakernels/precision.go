package cudakernels

import (
	"errors"
	"fmt"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// Precision selects how the float32 entry points (Forward32, Backward32)
// compute; it is kernels.Precision, shared with the conformance suite and
// package op. Forward64 and Backward64 always compute in float64 on CUDA
// cores.
type Precision = kernels.Precision

// The precisions, as kernels defines them.
const (
	FP32 = kernels.FP32
	TF32 = kernels.TF32
	BF16 = kernels.BF16
	FP16 = kernels.FP16
)

var (
	// ErrNoDevice is wrapped by NewBackend's error when no usable CUDA device
	// is present.
	ErrNoDevice = errors.New("cudakernels: no CUDA device")
	// ErrUnsupported is wrapped by errors for requests this package cannot
	// serve (a head dimension, precision or device it has no kernel for).
	// For a head dimension it comes together with kernels.ErrInvalidParams.
	ErrUnsupported = errors.New("cudakernels: unsupported")
	// ErrOutOfMemory is wrapped when a device (or page-locked host)
	// allocation fails for lack of memory. It wraps kernels.ErrOutOfMemory,
	// so callers can test for either.
	ErrOutOfMemory = fmt.Errorf("cudakernels: out of device memory: %w", kernels.ErrOutOfMemory)
)
