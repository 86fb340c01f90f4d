package op

import (
	"github.com/gorgonia-flash/flashattention/kernels"
)

// Option configures Attention.
type Option func(*config)

type config struct {
	causal     bool
	scale      float64
	scaleSet   bool
	backend    kernels.Backend
	backendSet bool
	device     Device
	deviceSet  bool
	prec       kernels.Precision
	precSet    bool
}

// WithCausal applies a bottom-right aligned causal mask: query i sees key j
// if and only if j ≤ i + (Nk − Nq).
func WithCausal(causal bool) Option { return func(c *config) { c.causal = causal } }

// WithScale sets the factor applied to Q·Kᵀ before the softmax. The default
// is 1/√D. It must be finite; 0 is allowed and gives uniform attention.
func WithScale(scale float64) Option {
	return func(c *config) { c.scale, c.scaleSet = scale, true }
}

// WithBackend runs the op on b, which the caller owns (and closes). It takes
// precedence over WithDevice, WithPrecision and the environment.
func WithBackend(b kernels.Backend) Option {
	return func(c *config) { c.backend, c.backendSet = b, true }
}

// WithDevice selects where the op runs, overriding FLASHATTN_DEVICE: CPU
// (the pure-Go backend) or GPU (CUDA device 0, in a build with the flashgpu
// tag). See the package documentation for who owns the GPU backend.
func WithDevice(d Device) Option { return func(c *config) { c.device, c.deviceSet = d, true } }

// WithPrecision selects the arithmetic of float32 attention on the GPU,
// overriding FLASHATTN_PRECISION: kernels.FP32 (the default), TF32, BF16 or FP16.
// Float64 attention always computes in float64, and the CPU backend always
// computes float32 exactly, so it ignores the precision.
func WithPrecision(p kernels.Precision) Option {
	return func(c *config) { c.prec, c.precSet = p, true }
}
