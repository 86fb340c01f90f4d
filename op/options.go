package op

import (
	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/kernels"
)

// Option configures Attention.
type Option func(*config)

type config struct {
	causal   bool
	scale    float64
	scaleSet bool
	backend  kernels.Backend
}

func defaultConfig() config {
	return config{backend: cpukernels.Backend{}}
}

// WithCausal applies a bottom-right aligned causal mask: query i sees key j
// if and only if j ≤ i + (Nk − Nq).
func WithCausal(causal bool) Option { return func(c *config) { c.causal = causal } }

// WithScale sets the factor applied to Q·Kᵀ before the softmax. The default
// is 1/√D. It must be finite; 0 is allowed and gives uniform attention.
func WithScale(scale float64) Option {
	return func(c *config) { c.scale, c.scaleSet = scale, true }
}

// WithBackend runs the op on b instead of the default pure-Go CPU backend.
func WithBackend(b kernels.Backend) Option { return func(c *config) { c.backend = b } }
