//go:build !flashgpu

package model

import (
	"fmt"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
)

// DeviceOptions returns the op.Attention options that put flash attention
// on the named device, computing float32 in precision prec on the GPU, for
// NewGraph and NewSampler. This build has no GPU kernels, so only "cpu"
// (op's default backend, float32 as it is) is accepted; a build with the
// flashgpu tag replaces this file.
func DeviceOptions(device string, prec kernels.Precision) ([]op.Option, error) {
	switch device {
	case "cpu":
		return nil, cpuPrecision(prec)
	case "gpu":
		return nil, fmt.Errorf("gpu needs a binary built with the flashgpu tag (go build -tags flashgpu)")
	}
	return nil, fmt.Errorf("unknown device %q: want cpu or gpu", device)
}
