package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestNaiveNonFinite checks the rules of the package doc (Masking
// convention) on the reference itself, one query row per rule, causal with
// Nq > Nk so that row 0 sees no key.
func TestNaiveNonFinite(t *testing.T) {
	p := Params{B: 1, H: 1, Nq: 6, Nk: 5, D: 2, Scale: 1, Causal: true}
	inf, nan := math.Inf(1), math.NaN()
	q := []float64{
		nan, 1, // row 0: sees no key, so its NaN goes nowhere
		1, 0.5, // row 1: finite
		nan, 1, // row 2: NaN scores
		-inf, 0, // row 3: keys have a positive column 0, so all −Inf
		inf, 0, // row 4: +Inf scores
		0.5, 0.5, // row 5: finite, sees every key
	}
	k := []float64{1, 0.2, 2, -1, 1.5, 0.3, 1, 1, 0.5, -0.5}
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	do := []float64{1, nan, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
	o, lse := make([]float64, 12), make([]float64, 6)
	dq, dk, dv := make([]float64, 12), make([]float64, 10), make([]float64, 10)
	if err := NaiveForward(p, q, k, v, o, lse); err != nil {
		t.Fatal(err)
	}
	if err := NaiveBackward(p, q, k, v, o, lse, do, nil, dq, dk, dv); err != nil {
		t.Fatal(err)
	}
	isNaN := func(x []float64) bool { return math.IsNaN(x[0]) && math.IsNaN(x[1]) }
	finite := func(x []float64) bool {
		return !math.IsNaN(x[0]+x[1]) && !math.IsInf(x[0], 0) && !math.IsInf(x[1], 0)
	}
	rows := []struct {
		lse      float64 // NaN means NaN
		oNaN     bool
		zeroOut  bool // O and dQ exactly 0
		dqFinite bool
	}{
		{inf, false, true, true},
		{0, false, false, true},
		{nan, true, false, false},
		{-inf, true, false, false},
		{inf, true, false, false},
		{0, false, false, true},
	}
	for i, want := range rows {
		oi, dqi := o[2*i:2*i+2], dq[2*i:2*i+2]
		switch {
		case math.IsNaN(want.lse) && !math.IsNaN(lse[i]),
			!math.IsNaN(want.lse) && math.IsInf(want.lse, 0) && lse[i] != want.lse,
			want.lse == 0 && (math.IsNaN(lse[i]) || math.IsInf(lse[i], 0)):
			t.Errorf("row %d: LSE %v, want %v (0 meaning finite)", i, lse[i], want.lse)
		}
		if want.oNaN != isNaN(oi) || (!want.oNaN && !finite(oi)) {
			t.Errorf("row %d: O %v, NaN wanted: %v", i, oi, want.oNaN)
		}
		if want.zeroOut && (oi[0] != 0 || oi[1] != 0 || dqi[0] != 0 || dqi[1] != 0) {
			t.Errorf("row %d sees no key: O %v, dQ %v, want 0", i, oi, dqi)
		}
		if want.dqFinite != finite(dqi) {
			t.Errorf("row %d: dQ %v, finite wanted: %v", i, dqi, want.dqFinite)
		}
	}
	// Rows 2–4 see keys 0 … 3 and are NaN there, so those keys' gradients
	// are NaN; only row 5 sees key 4, and row 0's NaN dO reaches nothing.
	for j := range 5 {
		nanWant := j < 4
		if got := isNaN(dk[2*j:2*j+2]) && isNaN(dv[2*j:2*j+2]); got != nanWant {
			t.Errorf("key %d: dK %v, dV %v, NaN wanted: %v", j, dk[2*j:2*j+2], dv[2*j:2*j+2], nanWant)
		}
	}
}

// TestNaiveBackwardMatchesFiniteDifferences checks the reference backward
// against central differences of the reference forward's loss Σ O∘dO +
// Σ LSE∘dLSE, for
// every variant at once, dropout included: the forward and the backward
// must draw one mask, and the backward must use it as the derivative of
// the forward. Lengths leave padding rows whose dO is not zero, which must
// not reach any gradient.
func TestNaiveBackwardMatchesFiniteDifferences(t *testing.T) {
	p := Params{B: 2, H: 4, Hkv: 2, Nq: 6, Nk: 9, D: 3, Scale: 0.7, Causal: true,
		Window: Window{On: true, Left: 5, Right: 1}, Softcap: 2, ALiBi: []float64{0.3, 0.2, 0.1, 0.05},
		QLens: []int{6, 4}, KLens: []int{9, 5}, Dropout: Dropout{P: 0.3, Seed: 42, Offset: 7}}
	rng := rand.New(rand.NewPCG(3, 4))
	fill := func(n int) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		return x
	}
	q, k, v, do := fill(p.QLen()), fill(p.KLen()), fill(p.KLen()), fill(p.QLen())
	dlse := fill(p.LSELen())
	o, lse := make([]float64, p.QLen()), make([]float64, p.LSELen())
	loss := func() float64 {
		if err := NaiveForward(p, q, k, v, o, lse); err != nil {
			t.Fatal(err)
		}
		l := dot(o, do)
		for i, x := range lse {
			if !math.IsInf(x, 0) { // rows without keys: LSE +Inf, no gradient
				l += x * dlse[i]
			}
		}
		return l
	}
	loss()
	dq, dk, dv := make([]float64, p.QLen()), make([]float64, p.KLen()), make([]float64, p.KLen())
	if err := NaiveBackward(p, q, k, v, o, lse, do, dlse, dq, dk, dv); err != nil {
		t.Fatal(err)
	}
	dropped := 0
	for bh := range p.B * p.H {
		for i := range p.Nq {
			for j := range p.Nk {
				if !p.Dropout.Kept(bh, i, j) {
					dropped++
				}
			}
		}
	}
	if dropped == 0 {
		t.Fatal("the mask drops nothing; the test would not test dropout")
	}
	const h = 1e-6
	for _, x := range []struct {
		name     string
		in, grad []float64
	}{{"q", q, dq}, {"k", k, dk}, {"v", v, dv}} {
		for e := range x.in {
			keep := x.in[e]
			x.in[e] = keep + h
			up := loss()
			x.in[e] = keep - h
			down := loss()
			x.in[e] = keep
			if fd := (up - down) / (2 * h); math.Abs(fd-x.grad[e]) > 1e-6*max(1, math.Abs(fd)) {
				t.Errorf("d%s[%d] = %v, finite differences %v", x.name, e, x.grad[e], fd)
			}
		}
	}
}
