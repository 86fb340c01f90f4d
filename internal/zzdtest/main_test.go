package zzdtest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/kernels"
)

func fill(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rand.NormFloat64())
	}
	return x
}

func BenchmarkDecodeWarm(b *testing.B) {
	p := kernels.Params{B: 1, H: 32, Hkv: 8, Nq: 1, Nk: 1024, D: 128, Scale: 1 / math.Sqrt(128), Causal: true}
	q, k, v := fill(p.QLen()), fill(p.KLen()), fill(p.KLen())
	o, lse := make([]float32, p.QLen()), make([]float32, p.LSELen())
	be := cpukernels.Backend{}
	for b.Loop() {
		be.Forward32(p, q, k, v, o, lse)
	}
}
