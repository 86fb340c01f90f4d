package cpukernels_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/kernels/conformance"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, cpukernels.Backend{}, kernels.FP32, conformance.WithVariants(conformance.AllVariants...))
}

// TestPrecisionErrors logs the float32 errors against float64 on one
// problem (conformance.ReportErrors), for the documentation.
func TestPrecisionErrors(t *testing.T) {
	conformance.ReportErrors(t, cpukernels.Backend{}, kernels.FP32)
}

// TestWorkersDoNotChangeResults requires bit-identical outputs whatever the
// number of goroutines: the work split depends on the shape alone.
func TestWorkersDoNotChangeResults(t *testing.T) {
	p := kernels.Params{B: 1, H: 3, Nq: 300, Nk: 700, D: 40, Scale: 0.15, Causal: true}
	rng := rand.New(rand.NewPCG(1, 2))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	q, k, v, do := fill(p.QLen()), fill(p.KLen()), fill(p.KLen()), fill(p.QLen())
	run := func(workers int) [][]float32 {
		b := cpukernels.Backend{Workers: workers}
		o, lse := make([]float32, p.QLen()), make([]float32, p.LSELen())
		dq, dk, dv := make([]float32, p.QLen()), make([]float32, p.KLen()), make([]float32, p.KLen())
		if err := b.Forward32(p, q, k, v, o, lse); err != nil {
			t.Fatal(err)
		}
		if err := b.Backward32(p, q, k, v, o, lse, do, nil, dq, dk, dv); err != nil {
			t.Fatal(err)
		}
		return [][]float32{o, lse, dq, dk, dv}
	}
	want := run(1)
	for _, workers := range []int{2, 3, 7} {
		for i, got := range run(workers) {
			if !slices.Equal(got, want[i]) {
				t.Errorf("%d workers: output %d differs from the serial result", workers, i)
			}
		}
	}
}
