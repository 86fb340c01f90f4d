//go:build !flashgpu

package model

import (
	"fmt"

	"github.com/gorgonia-flash/flashattention/op"
)

// DeviceOptions returns the op.Attention options that put flash attention
// on the named device, for NewGraph and NewSampler. This build has no GPU
// kernels, so only "cpu" (op's default backend) is accepted; a build with
// the flashgpu tag replaces this file.
func DeviceOptions(device string) ([]op.Option, error) {
	switch device {
	case "cpu":
		return nil, nil
	case "gpu":
		return nil, fmt.Errorf("gpu needs a binary built with the flashgpu tag (go build -tags flashgpu)")
	}
	return nil, fmt.Errorf("unknown device %q: want cpu or gpu", device)
}
