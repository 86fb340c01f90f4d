package cudakernels

import (
	"errors"
	"strings"
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

// TestRefuseVariants runs without a GPU: a family refuses exactly the
// variants it does not compute, and names only those.
func TestRefuseVariants(t *testing.T) {
	plain := kernels.Params{B: 2, H: 4, Nq: 8, Nk: 8, D: 16, Scale: 0.25, Causal: true}
	gqa := plain
	gqa.Hkv, gqa.KLens = 2, []int{3, 8}
	drop := gqa
	drop.Dropout = kernels.Dropout{P: 0.1, Seed: 1}
	bias := drop
	bias.Bias = &kernels.Bias{Bb: 1, Hb: 4}
	paged := gqa
	paged.Pages = &kernels.Pages{Size: 4, Count: 3, Table: [][]int{{0}, {1, 2}}}
	for _, tc := range []struct {
		name     string
		p        kernels.Params
		computed variantSet
		refused  string // "" when accepted
	}{
		{"plain, nothing computed", plain, 0, ""},
		{"GQA and lengths, nothing computed", gqa, 0, "grouped-query attention (Hkv = 2, H = 4), per-sequence lengths"},
		{"GQA and lengths, masks and modifiers", gqa, masksAndMods, ""},
		{"GQA, lengths and dropout, masks and modifiers", drop, masksAndMods, "dropout 0.1"},
		{"GQA, lengths and dropout, everything", drop, allVariants, ""},
		{"bias and dropout, masks and modifiers", bias, masksAndMods, "dropout 0.1, an additive bias"},
		{"bias and dropout, all but the bias", bias, masksAndMods | dropoutVariant, "an additive bias"},
		{"bias and dropout, everything", bias, allVariants, ""},
		{"pages, everything dense", paged, allVariants, "paged keys and values"},
		{"pages, the decoding kernels", paged, masksAndMods | pagedVariant, ""},
		{"pages and dropout, the decoding kernels", func() kernels.Params { q := paged; q.Dropout = drop.Dropout; return q }(), masksAndMods | pagedVariant, "dropout 0.1"},
		{"pages, nothing computed", paged, 0, "grouped-query attention (Hkv = 2, H = 4), per-sequence lengths, paged keys and values"},
	} {
		err := refuseVariants(tc.p, "test kernels", tc.computed)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: got %v, want nil", tc.name, err)
		case tc.refused != "" && (!errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), ": "+tc.refused+": not yet in test kernels")):
			t.Errorf("%s: got %v, want ErrUnsupported naming %q", tc.name, err, tc.refused)
		}
	}
}
