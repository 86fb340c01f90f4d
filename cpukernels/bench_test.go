package cpukernels_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/kernels"
)

// benchShapes are training-like problems, B·H = 32 at N = 1024 and D = 64,
// plus the other extreme, many heads of one row each, where per-head
// set-up rather than the GEMMs dominates.
var benchShapes = []kernels.Params{
	{B: 4, H: 8, Nq: 1024, Nk: 1024, D: 64},
	{B: 4, H: 8, Nq: 1024, Nk: 1024, D: 64, Causal: true},
	{B: 4096, H: 16, Nq: 1, Nk: 1, D: 64},
}

func BenchmarkForward32(b *testing.B)  { benchPass[float32](b, false) }
func BenchmarkBackward32(b *testing.B) { benchPass[float32](b, true) }

func benchPass[T kernels.Float](b *testing.B, backward bool) {
	for _, p := range benchShapes {
		p.Scale = 1 / math.Sqrt(float64(p.D))
		b.Run(fmt.Sprintf("BH%d_N%d_D%d_causal=%v", p.B*p.H, p.Nq, p.D, p.Causal), func(b *testing.B) {
			t := newTensors[T](p, 1)
			fwd, bwd := kernels.EntryPoints[T](cpukernels.Backend{})
			if err := fwd(p, t.q, t.k, t.v, t.o, t.lse); err != nil {
				b.Fatal(err)
			}
			if backward { // warm, as benchVariants says
				if err := bwd(p, t.q, t.k, t.v, t.o, t.lse, t.do, nil, t.dq, t.dk, t.dv); err != nil {
					b.Fatal(err)
				}
			}
			flops := p.ForwardFLOPs()
			if backward {
				flops = p.BackwardFLOPs()
			}
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if backward {
					err = bwd(p, t.q, t.k, t.v, t.o, t.lse, t.do, nil, t.dq, t.dk, t.dv)
				} else {
					err = fwd(p, t.q, t.k, t.v, t.o, t.lse)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// variantShapes are issue 10's CPU benchmark: B = 1, H = 8, N = 2048,
// D = 64, float32, plain attention beside each variant. Throughput counts
// the visible work only (kernels.Params.VisibleFLOPs), so that a variant
// that costs what it computes reports the plain path's GFLOP/s.
func variantShapes() []struct {
	name string
	p    kernels.Params
} {
	base := kernels.Params{B: 1, H: 8, Nq: 2048, Nk: 2048, D: 64, Scale: 1.0 / 8}
	slopes := make([]float64, base.H)
	for h := range slopes {
		slopes[h] = math.Exp2(-float64(h + 1))
	}
	with := func(set func(p *kernels.Params)) kernels.Params {
		p := base
		set(&p)
		return p
	}
	return []struct {
		name string
		p    kernels.Params
	}{
		{"plain", base},
		{"gqa_Hkv2", with(func(p *kernels.Params) { p.Hkv = 2 })},
		{"window256_causal", with(func(p *kernels.Params) {
			p.Causal, p.Window = true, kernels.Window{On: true, Left: 255, Right: -1}
		})},
		{"softcap30", with(func(p *kernels.Params) { p.Softcap = 30 })},
		{"alibi", with(func(p *kernels.Params) { p.ALiBi = slopes })},
		// The same 8 heads as 4 sequences of 2 heads, padded to 2048 from
		// lengths averaging a quarter of that.
		{"lengths_quarter", with(func(p *kernels.Params) {
			p.B, p.H = 4, 2
			p.QLens, p.KLens = []int{1024, 512, 256, 256}, []int{1024, 512, 256, 256}
		})},
		{"dropout0.1", with(func(p *kernels.Params) { p.Dropout = kernels.Dropout{P: 0.1, Seed: 1} })},
		// A bias per head ([1, 8, N, N], 128 MiB) and one shared by every
		// head ([1, 1, N, N]), with dBias written by the backward.
		{"bias_per_head", with(func(p *kernels.Params) { p.Bias = &kernels.Bias{Bb: 1, Hb: 8} })},
		{"bias_shared", with(func(p *kernels.Params) { p.Bias = &kernels.Bias{Bb: 1, Hb: 1} })},
	}
}

func BenchmarkVariantsForward32(b *testing.B)  { benchVariants(b, false) }
func BenchmarkVariantsBackward32(b *testing.B) { benchVariants(b, true) }

func benchVariants(b *testing.B, backward bool) {
	for _, s := range variantShapes() {
		b.Run(s.name, func(b *testing.B) {
			p := s.p
			t := newTensors[float32](p, 1)
			if p.Bias != nil {
				bias := newTensors[float32](kernels.Params{B: 1, H: 1, Nq: p.BiasLen(), D: 1}, 2).q
				p.Bias = &kernels.Bias{Bb: p.Bias.Bb, Hb: p.Bias.Hb, Data32: bias, Grad32: make([]float32, len(bias))}
			}
			be := cpukernels.Backend{}
			if err := be.Forward32(p, t.q, t.k, t.v, t.o, t.lse); err != nil {
				b.Fatal(err)
			}
			// One backward before the timing, as the forward above: the
			// first call fills the recycled buffers (page faults on fresh
			// memory), which cost a third of a 3-iteration average.
			if backward {
				if err := be.Backward32(p, t.q, t.k, t.v, t.o, t.lse, t.do, nil, t.dq, t.dk, t.dv); err != nil {
					b.Fatal(err)
				}
			}
			flops := p.VisibleFLOPs()
			if backward {
				flops *= 2.5
			}
			for b.Loop() {
				var err error
				if backward {
					err = be.Backward32(p, t.q, t.k, t.v, t.o, t.lse, t.do, nil, t.dq, t.dk, t.dv)
				} else {
					err = be.Forward32(p, t.q, t.k, t.v, t.o, t.lse)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
