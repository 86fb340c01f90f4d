package cudakernels

import (
	"errors"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// TestCheckPlainRefusesVariants runs without a GPU: every variant the
// kernels lack is refused with ErrUnsupported, and plain attention passes.
func TestCheckPlainRefusesVariants(t *testing.T) {
	plain := kernels.Params{B: 1, H: 4, Nq: 8, Nk: 8, D: 16, Scale: 0.25, Causal: true}
	if err := checkPlain(plain); err != nil {
		t.Fatalf("plain attention: %v", err)
	}
	for name, mutate := range map[string]func(*kernels.Params){
		"GQA":     func(p *kernels.Params) { p.Hkv = 2 },
		"window":  func(p *kernels.Params) { p.Window = kernels.Window{On: true, Left: 3, Right: -1} },
		"softcap": func(p *kernels.Params) { p.Softcap = 30 },
		"ALiBi":   func(p *kernels.Params) { p.ALiBi = []float64{1, 0.5, 0.25, 0.125} },
	} {
		p := plain
		mutate(&p)
		if err := checkPlain(p); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: got %v, want an error wrapping ErrUnsupported", name, err)
		}
	}
}
