package kernels

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestVisibleKeys(t *testing.T) {
	cases := []struct {
		p    Params
		want []int // per query row
	}{
		{Params{Nq: 3, Nk: 5}, []int{5, 5, 5}},
		{Params{Nq: 3, Nk: 3, Causal: true}, []int{1, 2, 3}},
		{Params{Nq: 2, Nk: 5, Causal: true}, []int{4, 5}},          // bottom-right: last row sees all
		{Params{Nq: 5, Nk: 2, Causal: true}, []int{0, 0, 0, 1, 2}}, // leading rows see nothing
		{Params{Nq: 1, Nk: 7, Causal: true}, []int{7}},             // decoding
	}
	for _, c := range cases {
		for i, want := range c.want {
			if got := c.p.VisibleKeys(i); got != want {
				t.Errorf("%+v: VisibleKeys(%d) = %d, want %d", c.p, i, got, want)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	good := Params{B: 1, H: 2, Nq: 3, Nk: 4, D: 8, Scale: 0.5}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid params: %v", err)
	}
	bad := map[string]func(p *Params){
		"B=0":       func(p *Params) { p.B = 0 },
		"H<0":       func(p *Params) { p.H = -1 },
		"Nq=0":      func(p *Params) { p.Nq = 0 },
		"Nk=0":      func(p *Params) { p.Nk = 0 },
		"D=0":       func(p *Params) { p.D = 0 },
		"NaN scale": func(p *Params) { p.Scale = math.NaN() },
		"Inf scale": func(p *Params) { p.Scale = math.Inf(1) },
		"too large": func(p *Params) { p.B, p.Nq = 1<<16, 1<<16 },
	}
	for name, mutate := range bad {
		p := good
		mutate(&p)
		if err := p.Validate(); !errors.Is(err, ErrInvalidParams) {
			t.Errorf("%s: got %v, want an error wrapping ErrInvalidParams", name, err)
		}
	}
}

func TestFLOPs(t *testing.T) {
	p := Params{B: 2, H: 3, Nq: 5, Nk: 7, D: 11}
	if got, want := p.ForwardFLOPs(), 4.0*2*3*5*7*11; got != want {
		t.Errorf("ForwardFLOPs = %v, want %v", got, want)
	}
	p.Causal = true
	if got, want := p.BackwardFLOPs(), 2.5*2*2*3*5*7*11; got != want {
		t.Errorf("causal BackwardFLOPs = %v, want %v", got, want)
	}
}

func TestParsePrecision(t *testing.T) {
	for _, p := range []Precision{FP32, TF32, BF16, FP16} {
		for _, s := range []string{p.String(), strings.ToUpper(p.String())} {
			if got, err := ParsePrecision(s); err != nil || got != p {
				t.Errorf("ParsePrecision(%q) = %v, %v; want %v", s, got, err, p)
			}
		}
	}
	for _, s := range []string{"", "fp64", "bf16 "} {
		if _, err := ParsePrecision(s); !errors.Is(err, ErrInvalidParams) {
			t.Errorf("ParsePrecision(%q): error %v, want ErrInvalidParams", s, err)
		}
	}
}
