//go:build flashgpu

package model

import (
	"fmt"

	"github.com/gorgonia-flash/flashattention/cudakernels"
	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
)

// DeviceOptions returns the op.Attention options that put flash attention
// on the named device: "cpu" keeps op's default backend, "gpu" opens CUDA
// device 0 computing float32 in precision prec. The GPU backend lives as
// long as the process (the example and the sweep are short-lived commands),
// so it is never closed.
func DeviceOptions(device string, prec kernels.Precision) ([]op.Option, error) {
	switch device {
	case "cpu":
		return nil, cpuPrecision(prec)
	case "gpu":
		b, err := cudakernels.NewBackend(cudakernels.WithPrecision(prec))
		if err != nil {
			return nil, fmt.Errorf("gpu: %w", err)
		}
		return []op.Option{op.WithBackend(b)}, nil
	}
	return nil, fmt.Errorf("unknown device %q: want cpu or gpu", device)
}
