package naivegraph

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestMatchesReference checks the baseline itself, so that comparisons
// against it mean something.
func TestMatchesReference(t *testing.T) {
	for _, causal := range []bool{false, true} {
		p := kernels.Params{B: 2, H: 2, Nq: 7, Nk: 11, D: 5, Scale: 0.4, Causal: causal}
		rng := rand.New(rand.NewPCG(1, 2))
		fill := func(n int) []float64 {
			x := make([]float64, n)
			for i := range x {
				x[i] = rng.NormFloat64()
			}
			return x
		}
		qd, kd, vd := fill(p.QLen()), fill(p.KLen()), fill(p.KLen())
		want, lse := make([]float64, p.QLen()), make([]float64, p.LSELen())
		if err := kernels.NaiveForward(p, qd, kd, vd, want, lse); err != nil {
			t.Fatal(err)
		}
		g := gorgonia.NewGraph()
		// Unnamed input nodes of equal shape would be merged into one by
		// gorgonia's hash-consing, so each gets a name.
		node := func(name string, data []float64, n int) *gorgonia.Node {
			val := tensor.New(tensor.WithShape(p.B, p.H, n, p.D), tensor.WithBacking(data))
			return gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(p.B, p.H, n, p.D), gorgonia.WithValue(val), gorgonia.WithName(name))
		}
		o, err := Attention(node("q", qd, p.Nq), node("k", kd, p.Nk), node("v", vd, p.Nk), p.Scale, causal)
		if err != nil {
			t.Fatal(err)
		}
		m := gorgonia.NewTapeMachine(g)
		if err := m.RunAll(); err != nil {
			t.Fatal(err)
		}
		m.Close()
		for i, x := range o.Value().Data().([]float64) {
			if math.Abs(x-want[i]) > 1e-12 {
				t.Fatalf("causal=%v: O[%d] = %v, want %v", causal, i, x, want[i])
			}
		}
	}
}
