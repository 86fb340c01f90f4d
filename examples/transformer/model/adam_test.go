package model

import (
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
)

// TestAdamMatchesGorgonia: five steps of Adam on a float64 model leave the
// same parameters as Gorgonia's AdamSolver with the same constants, up to
// the rounding of a different order of operations.
func TestAdamMatchesGorgonia(t *testing.T) {
	cfg := Config{Vocab: 5, Seq: 6, Layers: 1, Heads: 2, Dim: 8, Dtype: "float64"}
	ours, err := New(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := New(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	solvers := []G.Solver{
		&Adam{LR: 1e-2, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8},
		G.NewAdamSolver(G.WithLearnRate(1e-2), G.WithBeta2(0.99)),
	}
	var graphs []*Graph
	for _, m := range []*Model{ours, theirs} {
		gr, err := m.NewGraph(2, AttentionFlash, true)
		if err != nil {
			t.Fatal(err)
		}
		graphs = append(graphs, gr)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	for range 5 {
		in, tg := randomBatch(rng, 2, cfg.Seq, cfg.Vocab)
		for i, gr := range graphs {
			if _, err := gr.Run(in, tg); err != nil {
				t.Fatal(err)
			}
			if err := gr.Step(solvers[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, p := range ours.params {
		a, b := p.t.Data().([]float64), theirs.params[i].t.Data().([]float64)
		if d := maxRelDiff(t, a, b); d > 1e-12 {
			t.Errorf("%s differs from Gorgonia's Adam by %.2g", p.name, d)
		}
	}
}

func TestScheduleRate(t *testing.T) {
	s := Schedule{Peak: 1e-2, Warmup: 10, Floor: 0.1, Steps: 111}
	for _, tc := range []struct {
		i    int
		want float64
	}{
		{0, 1e-3},    // first warmup step
		{9, 1e-2},    // warmup reaches the peak
		{60, 5.5e-3}, // half way down the cosine
		{110, 1e-3},  // the floor at the last step
		{500, 1e-3},  // and after it
	} {
		if got := s.Rate(tc.i); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("step %d: learning rate %v, want %v", tc.i, got, tc.want)
		}
	}
	for i := 1; i < s.Steps; i++ {
		if a, b := s.Rate(i-1), s.Rate(i); (i < s.Warmup && b <= a) || (i > s.Warmup && b > a) {
			t.Errorf("steps %d → %d: learning rate %v → %v is not warmup-then-decay", i-1, i, a, b)
		}
	}
	s.Floor = 1
	if got := s.Rate(80); got != s.Peak {
		t.Errorf("floor 1: learning rate %v, want the constant %v", got, s.Peak)
	}
}
