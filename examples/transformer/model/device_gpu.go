//go:build flashgpu

package model

import (
	"errors"
	"fmt"

	"github.com/gorgonia-flash/flashattention/op"
)

// DeviceOptions returns the op.Attention options that put flash attention
// on the named device. This is the one place where a CUDA backend gets
// selected (op.WithBackend); package cudakernels does not export one yet, so
// "gpu" is refused with that reason rather than silently running on the CPU.
func DeviceOptions(device string) ([]op.Option, error) {
	switch device {
	case "cpu":
		return nil, nil
	case "gpu":
		return nil, errors.New("gpu: package cudakernels exports no attention backend yet")
	}
	return nil, fmt.Errorf("unknown device %q: want cpu or gpu", device)
}
