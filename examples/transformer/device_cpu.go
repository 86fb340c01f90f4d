//go:build !flashgpu

package main

import (
	"fmt"

	"github.com/gorgonia-flash/flashattention/op"
)

// deviceOptions returns the op.Attention options that put flash attention on
// the named device. This binary has no GPU kernels, so only "cpu" (op's
// default backend) is accepted.
func deviceOptions(device string) ([]op.Option, error) {
	switch device {
	case "cpu":
		return nil, nil
	case "gpu":
		return nil, fmt.Errorf("gpu needs a binary built with the flashgpu tag (go run -tags flashgpu ./examples/transformer -device=gpu)")
	}
	return nil, fmt.Errorf("unknown device %q: want cpu or gpu", device)
}
