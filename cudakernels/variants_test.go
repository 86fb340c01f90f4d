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

// TestCheckVariants runs without a GPU: the CUDA-core kernels (FP32 and
// float64) take every variant, the tensor cores none yet.
func TestCheckVariants(t *testing.T) {
	plain := kernels.Params{B: 2, H: 4, Nq: 8, Nk: 8, D: 16, Scale: 0.25, Causal: true}
	gqa := plain
	gqa.Hkv, gqa.KLens = 2, []int{3, 8}
	drop := plain
	drop.Dropout = kernels.Dropout{P: 0.1, Seed: 1}
	for _, tc := range []struct {
		name string
		p    kernels.Params
		prec Precision
		elem int
		ok   bool
	}{
		{"plain BF16", plain, BF16, 4, true},
		{"GQA and lengths FP32", gqa, FP32, 4, true},
		{"GQA and lengths float64", gqa, BF16, 8, true},
		{"GQA and lengths BF16", gqa, BF16, 4, false},
		{"GQA and lengths TF32", gqa, TF32, 4, false},
		{"dropout FP32", drop, FP32, 4, true},
		{"dropout float64", drop, FP32, 8, true},
		{"dropout FP16", drop, FP16, 4, false},
	} {
		err := checkVariants(tc.p, tc.prec, tc.elem)
		if tc.ok && err != nil || !tc.ok && !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: got %v, want ok = %v (else ErrUnsupported)", tc.name, err, tc.ok)
		}
	}
}
