package cpukernels_test

import (
	"fmt"
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
// number of goroutines: the work split depends on the shape alone. With a
// bias broadcast over the batch, the heads or both, dBias sums over heads
// that different work units would otherwise share. A decode problem
// splits its keys the same way whatever the workers (kernels.SplitKV of
// a fixed core count), so its merge is the same too.
func TestWorkersDoNotChangeResults(t *testing.T) {
	for _, p := range []kernels.Params{
		{B: 1, H: 3, Nq: 300, Nk: 700, D: 40, Scale: 0.15, Causal: true},
		{B: 2, H: 3, Nq: 300, Nk: 700, D: 40, Scale: 0.15, Causal: true, Bias: &kernels.Bias{Bb: 1, Hb: 1}},
		{B: 3, H: 4, Hkv: 2, Nq: 130, Nk: 400, D: 24, Scale: 0.2, Bias: &kernels.Bias{Bb: 1, Hb: 4}},
		{B: 3, H: 4, Hkv: 2, Nq: 130, Nk: 400, D: 24, Scale: 0.2, Bias: &kernels.Bias{Bb: 3, Hb: 1}},
		{B: 1, H: 8, Hkv: 2, Nq: 2, Nk: 3000, D: 64, Scale: 0.125, Causal: true},
	} {
		name := "plain"
		if p.Nq*p.H/p.KVHeads() <= 64 {
			name = "decode"
		}
		if p.Bias != nil {
			name = fmt.Sprintf("bias%dx%d", p.Bias.Bb, p.Bias.Hb)
		}
		t.Run(name, func(t *testing.T) { checkWorkers(t, p) })
	}
}

// checkWorkers runs p with 1, 2, 3 and 7 workers and requires the same
// bits from each.
func checkWorkers(t *testing.T, p kernels.Params) {
	rng := rand.New(rand.NewPCG(1, 2))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	q, k, v, do := fill(p.QLen()), fill(p.KLen()), fill(p.KLen()), fill(p.QLen())
	if p.Bias != nil {
		p.Bias = &kernels.Bias{Bb: p.Bias.Bb, Hb: p.Bias.Hb, Data32: fill(p.BiasLen())}
	}
	run := func(workers int) [][]float32 {
		b := cpukernels.Backend{Workers: workers}
		o, lse := make([]float32, p.QLen()), make([]float32, p.LSELen())
		dq, dk, dv := make([]float32, p.QLen()), make([]float32, p.KLen()), make([]float32, p.KLen())
		pb := p
		var dbias []float32
		if p.Bias != nil {
			dbias = make([]float32, p.BiasLen())
			bias := *p.Bias
			bias.Grad32 = dbias
			pb.Bias = &bias
		}
		if err := b.Forward32(p, q, k, v, o, lse); err != nil {
			t.Fatal(err)
		}
		if err := b.Backward32(pb, q, k, v, o, lse, do, nil, dq, dk, dv); err != nil {
			t.Fatal(err)
		}
		return [][]float32{o, lse, dq, dk, dv, dbias}
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
