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
			flops := p.ForwardFLOPs()
			if backward {
				flops = p.BackwardFLOPs()
			}
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if backward {
					err = bwd(p, t.q, t.k, t.v, t.o, t.lse, t.do, t.dq, t.dk, t.dv)
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
