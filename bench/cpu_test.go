package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/internal/naivegraph"
	"github.com/gorgonia-flash/flashattention/internal/simd"
	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The shape the targets are stated at: B=1, H=8, D=64, N=2048.
var shapes = []kernels.Params{
	{B: 1, H: 8, Nq: 2048, Nk: 2048, D: 64},
	{B: 1, H: 8, Nq: 2048, Nk: 2048, D: 64, Causal: true},
	{B: 1, H: 8, Nq: 512, Nk: 512, D: 64},
	{B: 1, H: 8, Nq: 2048, Nk: 2048, D: 128},
}

func name(p kernels.Params) string {
	return fmt.Sprintf("B%d_H%d_N%d_D%d_causal=%v", p.B, p.H, p.Nq, p.D, p.Causal)
}

func randomSlice[T kernels.Float](n int, seed uint64) []T {
	rng := rand.New(rand.NewPCG(seed, 3))
	x := make([]T, n)
	for i := range x {
		x[i] = T(rng.NormFloat64())
	}
	return x
}

// fmaPeak is the float32 FMA rate of GOMAXPROCS goroutines running
// simd.FMAPeak32 at once for a tenth of a second, in GFLOP/s: the ceiling
// the kernel benchmarks report their fraction of (of-peak). Each
// benchmark measures it right after its own timing, at its own thread
// count, since a shared machine's share of its host drifts between
// benchmarks.
func fmaPeak() float64 {
	const rounds, span = 1 << 16, 100 * time.Millisecond
	threads := runtime.GOMAXPROCS(0)
	flops := make([]float64, threads)
	var wg sync.WaitGroup
	start := time.Now()
	for t := range threads {
		wg.Go(func() {
			for time.Since(start) < span {
				flops[t] += simd.FMAPeak32(rounds)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	var total float64
	for _, f := range flops {
		total += f
	}
	return total / elapsed / 1e9
}

func BenchmarkKernelForward32(b *testing.B)  { benchKernel[float32](b, false) }
func BenchmarkKernelForward64(b *testing.B)  { benchKernel[float64](b, false) }
func BenchmarkKernelBackward32(b *testing.B) { benchKernel[float32](b, true) }
func BenchmarkKernelBackward64(b *testing.B) { benchKernel[float64](b, true) }

func benchKernel[T kernels.Float](b *testing.B, backward bool) {
	for _, p := range shapes {
		p.Scale = 1 / math.Sqrt(float64(p.D))
		b.Run(name(p), func(b *testing.B) {
			q, k, v, do := randomSlice[T](p.QLen(), 1), randomSlice[T](p.KLen(), 2), randomSlice[T](p.KLen(), 3), randomSlice[T](p.QLen(), 4)
			o, lse := make([]T, p.QLen()), make([]T, p.LSELen())
			dq, dk, dv := make([]T, p.QLen()), make([]T, p.KLen()), make([]T, p.KLen())
			fwd, bwd := kernels.EntryPoints[T](cpukernels.Backend{})
			if err := fwd(p, q, k, v, o, lse); err != nil {
				b.Fatal(err)
			}
			// A backward before the timing too: the first call fills the
			// recycled buffers (page faults on fresh memory), as PyTorch's
			// side (torch_cpu_sdpa.py) warms up before it times.
			if backward {
				if err := bwd(p, q, k, v, o, lse, do, nil, dq, dk, dv); err != nil {
					b.Fatal(err)
				}
			}
			flops := p.ForwardFLOPs()
			if backward {
				flops = p.BackwardFLOPs()
			}
			for b.Loop() {
				var err error
				if backward {
					err = bwd(p, q, k, v, o, lse, do, nil, dq, dk, dv)
				} else {
					err = fwd(p, q, k, v, o, lse)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			gflops := flops * float64(b.N) / b.Elapsed().Seconds() / 1e9
			b.ReportMetric(gflops, "GFLOP/s")
			if _, f32 := any(T(0)).(float32); f32 {
				b.StopTimer()
				b.ReportMetric(gflops/fmaPeak(), "of-peak")
			}
		})
	}
}

// BenchmarkGraph times one forward+backward of attention in a Gorgonia graph
// on a TapeMachine, float32: flash, flash on inputs in the BNHD layout
// (op.WithLayout, which transposes them), and naive.
func BenchmarkGraph(b *testing.B) {
	for _, p := range shapes[:2] {
		p.Scale = 1 / math.Sqrt(float64(p.D))
		for _, impl := range []string{"flash", "flash-bnhd", "naive"} {
			b.Run(impl+"/"+name(p), func(b *testing.B) {
				m, err := buildGraph(p, impl)
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				for b.Loop() {
					if err := m.RunAll(); err != nil {
						b.Fatal(err)
					}
					m.Reset()
				}
				flops := p.ForwardFLOPs() + p.BackwardFLOPs()
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// buildGraph returns a TapeMachine computing sum(attention(q, k, v)) and its
// gradients with respect to q, k and v, for impl "flash", "flash-bnhd" or
// "naive".
func buildGraph(p kernels.Params, impl string) (gorgonia.VM, error) {
	g := gorgonia.NewGraph()
	input := func(name string, n int, seed uint64) *gorgonia.Node {
		shape := []int{p.B, p.H, n, p.D}
		if impl == "flash-bnhd" {
			shape[1], shape[2] = n, p.H
		}
		val := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(randomSlice[float32](p.B*p.H*n*p.D, seed)))
		return gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(shape...), gorgonia.WithName(name), gorgonia.WithValue(val))
	}
	q, k, v := input("q", p.Nq, 1), input("k", p.Nk, 2), input("v", p.Nk, 3)
	var o *gorgonia.Node
	var err error
	switch impl {
	case "naive":
		o, err = naivegraph.Attention(q, k, v, p.Scale, p.Causal)
	case "flash-bnhd":
		o, err = op.Attention(q, k, v, op.WithCausal(p.Causal), op.WithScale(p.Scale), op.WithLayout(op.BNHD))
	default:
		o, err = op.Attention(q, k, v, op.WithCausal(p.Causal), op.WithScale(p.Scale))
	}
	if err != nil {
		return nil, err
	}
	cost, err := gorgonia.Sum(o)
	if err != nil {
		return nil, err
	}
	if _, err := gorgonia.Grad(cost, q, k, v); err != nil {
		return nil, err
	}
	return gorgonia.NewTapeMachine(g), nil
}
