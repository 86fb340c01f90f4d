package op

import (
	"math"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// Resolved is what a list of Options asks for, resolved the way Attention
// resolves it, for packages that build attention nodes of their own out of
// this package's options (package ring).
type Resolved struct {
	// Backend is WithBackend's, else the device and precision of the
	// options or the environment.
	Backend kernels.Backend
	// Params holds the options' Scale (1/√D by default), Causal, Window,
	// Softcap, ALiBi and Dropout; its shape fields are zero.
	Params kernels.Params
	// Layout is WithLayout's, BHND by default.
	Layout Layout
	// Lengths, Bias and KVCache report whether WithLengths, WithBias or
	// WithKVCache was given.
	Lengths, Bias, KVCache bool
}

// Resolve applies opts for inputs of head dimension d. Its errors are
// those of Attention for the same options: they wrap ErrInvalidInput (or
// ErrNoGPU).
func Resolve(d int, opts ...Option) (Resolved, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.layout.check(); err != nil {
		return Resolved{}, err
	}
	b, err := cfg.resolveBackend()
	if err != nil {
		return Resolved{}, err
	}
	scale := 1 / math.Sqrt(float64(d))
	if cfg.scaleSet {
		scale = cfg.scale
	}
	return Resolved{
		Backend: b,
		Params: kernels.Params{Scale: scale, Causal: cfg.causal, Window: cfg.window, Softcap: cfg.softcap,
			ALiBi: cfg.alibi, Dropout: cfg.dropout},
		Layout:  cfg.layout,
		Lengths: cfg.qLens != nil || cfg.kLens != nil,
		Bias:    cfg.biasSet,
		KVCache: cfg.cacheSet,
	}, nil
}
