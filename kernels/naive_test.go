package kernels

import (
	"math"
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
	if err := NaiveBackward(p, q, k, v, o, lse, do, dq, dk, dv); err != nil {
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
