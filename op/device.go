package op

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/gorgonia-flash/flashattention/autograd"
	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/kernels"
	"gorgonia.org/gorgonia"
)

// Device says where Attention runs when no backend is given explicitly.
type Device int

const (
	// CPU is the pure-Go backend (package cpukernels), the default.
	CPU Device = iota
	// GPU is CUDA device 0, in a binary built with the flashgpu tag.
	GPU
)

func (d Device) String() string {
	switch d {
	case CPU:
		return "cpu"
	case GPU:
		return "gpu"
	}
	return fmt.Sprintf("Device(%d)", int(d))
}

// The environment variables Attention reads when the corresponding option is
// not given. They are read each time Attention builds a node.
const (
	// EnvDevice selects the device: "cpu" or "gpu" (any case). Unset or
	// empty means cpu.
	EnvDevice = "FLASHATTN_DEVICE"
	// EnvPrecision selects the GPU's float32 arithmetic: "fp32", "tf32",
	// "bf16" or "fp16" (any case). Unset or empty means fp32.
	EnvPrecision = "FLASHATTN_PRECISION"
)

// ErrNoGPU is wrapped by the error Attention returns when the GPU is asked
// for and cannot be used: the binary was built without the flashgpu tag, or
// there is no CUDA device (then the error also wraps cudakernels.ErrNoDevice).
var ErrNoGPU = errors.New("GPU not available")

// resolveBackend picks the backend: WithBackend, else the device and
// precision from the options or the environment.
func (c config) resolveBackend() (kernels.Backend, error) {
	if c.backendSet {
		if c.backend == nil {
			return nil, invalid("WithBackend(nil)")
		}
		return c.backend, nil
	}
	dev, prec := c.device, c.prec
	if !c.deviceSet {
		s := strings.ToLower(strings.TrimSpace(os.Getenv(EnvDevice)))
		switch s {
		case "", "cpu":
			dev = CPU
		case "gpu":
			dev = GPU
		default:
			return nil, invalid("%s=%q, want cpu or gpu", EnvDevice, s)
		}
	}
	if !c.precSet {
		if s := strings.TrimSpace(os.Getenv(EnvPrecision)); s != "" {
			p, err := kernels.ParsePrecision(s)
			if err != nil { // wraps kernels.ErrInvalidParams, which is ErrInvalidInput
				return nil, fmt.Errorf("op.Attention: %s: %w", EnvPrecision, err)
			}
			prec = p
		}
	}
	switch dev {
	case CPU:
		return cpukernels.Backend{}, nil
	case GPU:
		b, err := sharedGPU(prec)
		if err != nil {
			return nil, fmt.Errorf("op.Attention: %w", err)
		}
		return b, nil
	}
	return nil, invalid("device %v, want CPU or GPU", dev)
}

// Release frees the device memory that the attention nodes of g hold
// between a forward and its backward (see the package documentation). The
// graph stays usable: a later run keeps state again, and a backward whose
// forward state was released uploads its inputs instead.
func Release(g *gorgonia.ExprGraph) error {
	var errs []error
	for _, n := range g.AllNodes() {
		if a, ok := n.Op().(*autograd.Op); ok {
			errs = append(errs, a.Release())
		}
	}
	return errors.Join(errs...)
}
