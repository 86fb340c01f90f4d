package conformance

import (
	"math"
	"slices"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// TestKeepReferences checks that a kept reference or baseline answers only
// the same computation: the same parameters, precision and input bits.
func TestKeepReferences(t *testing.T) {
	release := KeepReferences(1 << 30)
	defer release()
	p := kernels.Params{B: 1, H: 2, Nq: 9, Nk: 13, D: 8, Scale: 0.3, Causal: true, ALiBi: []float64{0.5, 0.25}}
	pr := randomProblem(p, 7)
	q, k, v, do := widen(pr.q), widen(pr.k), widen(pr.v), widen(pr.do)
	first, err := reference(p, q, k, v, do, nil)
	if err != nil {
		t.Fatal(err)
	}
	same := func(a, b result[float64]) bool { return &a.o[0] == &b.o[0] }
	again, _ := reference(p, slices.Clone(q), slices.Clone(k), slices.Clone(v), slices.Clone(do), nil)
	if !same(first, again) {
		t.Error("the same inputs in other slices computed the reference again")
	}

	// Anything that changes the computation misses.
	negZero := slices.Clone(q)
	negZero[3] = math.Copysign(0, -1)
	q[3] = 0
	zero, _ := reference(p, q, k, v, do, nil)
	if other, _ := reference(p, negZero, k, v, do, nil); same(zero, other) {
		t.Error("-0 found the reference of +0")
	}
	slopes := p
	slopes.ALiBi = []float64{0.5, 0.125}
	withSlopes, _ := reference(slopes, q, k, v, do, nil)
	if same(zero, withSlopes) {
		t.Error("other ALiBi slopes found the kept reference")
	}
	if other, _ := reference(p, q, k, v, do, make([]float64, p.LSELen())); same(zero, other) {
		t.Error("a gradient of the LSE found the reference without one")
	}
	// What the caller does with its slices afterwards changes no entry:
	// p's slopes now equal slopes', and p finds slopes' entry.
	p.ALiBi[1] = 0.125
	if other, _ := reference(p, q, k, v, do, nil); !same(other, withSlopes) {
		t.Error("equal parameters in another slice missed")
	}

	b16 := naive32(p, kernels.BF16, pr.q, pr.k, pr.v, pr.do, nil)
	if again := naive32(p, kernels.BF16, pr.q, pr.k, pr.v, pr.do, nil); &again.o[0] != &b16.o[0] {
		t.Error("the same baseline was computed again")
	}
	if f16 := naive32(p, kernels.FP16, pr.q, pr.k, pr.v, pr.do, nil); &f16.o[0] == &b16.o[0] {
		t.Error("the FP16 baseline found the BF16 one")
	}

	release()
	if after, _ := reference(slopes, q, k, v, do, nil); len(references.entries) != 0 || same(after, withSlopes) {
		t.Error("release kept entries")
	}
}

// TestKeepReferencesLimit checks that the memo keeps at most its limit,
// dropping the least recently used entry first.
func TestKeepReferencesLimit(t *testing.T) {
	p := kernels.Params{B: 1, H: 1, Nq: 16, Nk: 16, D: 16, Scale: 0.25}
	problems := []problem{randomProblem(p, 1), randomProblem(p, 2), randomProblem(p, 3)}
	ref := func(pr problem) result[float64] {
		r, err := reference(p, widen(pr.q), widen(pr.k), widen(pr.v), widen(pr.do), nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Room for two problems: their outputs, 4·256 + 16 float64s each.
	release := KeepReferences(2 * (4*256 + 16) * 8)
	defer release()
	r0, r1 := ref(problems[0]), ref(problems[1])
	if again := ref(problems[0]); &again.o[0] != &r0.o[0] { // now the most recent
		t.Fatal("problem 0 was not kept")
	}
	ref(problems[2]) // drops problem 1, the least recently used
	if again := ref(problems[0]); &again.o[0] != &r0.o[0] {
		t.Error("problem 0 was dropped before the least recently used")
	}
	if again := ref(problems[1]); &again.o[0] == &r1.o[0] {
		t.Error("the memo kept more than its limit")
	}
}
