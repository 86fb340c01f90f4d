//go:build flashgpu

package model

import (
	"fmt"

	"github.com/gorgonia-flash/flashattention/cudakernels"
	"github.com/gorgonia-flash/flashattention/op"
)

// DeviceOptions returns the op.Attention options that put flash attention
// on the named device: "cpu" keeps op's default backend, "gpu" opens CUDA
// device 0 in FP32. The GPU backend lives as long as the process (the
// example and the sweep are short-lived commands), so it is never closed.
func DeviceOptions(device string) ([]op.Option, error) {
	switch device {
	case "cpu":
		return nil, nil
	case "gpu":
		b, err := cudakernels.NewBackend()
		if err != nil {
			return nil, fmt.Errorf("gpu: %w", err)
		}
		return []op.Option{op.WithBackend(b)}, nil
	}
	return nil, fmt.Errorf("unknown device %q: want cpu or gpu", device)
}
