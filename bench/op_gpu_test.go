//go:build flashgpu

package bench

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/gorgonia-flash/flashattention/cudakernels"
	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
)

// BenchmarkOpGPU times attention on the GPU including the copies between
// host and device, at FlashAttention's benchmark shapes (B·N = 16384
// tokens, hidden 2048, H = 2048/D, non-causal), in BF16, and reports each
// time beside the kernels' own (cudakernels' KernelTime, median of a few
// event-timed runs on device-resident data):
//
//   - call-fwd, call-fwdbwd: the backend alone on host slices (Forward32;
//     ForwardKeep32 + BackwardKept32), which is what the copies cost;
//   - graph-fwd, graph-fwdbwd: op.Attention in a Gorgonia graph on a
//     TapeMachine, the attention alone, and cost = sum(O) with its
//     gradients (Gorgonia's own CPU work for the sum and its gradient is
//     included);
//   - gorgonia-sum: that sum and its gradient alone, on a tensor of O's
//     size, which is what graph-fwdbwd spends outside the op.
//
// Metrics: ms per run, TFLOP/s (FLOPs as in kernels.Params), kernel_ms and
// x_kernel, the ratio of the two times (1 is the ideal).
func BenchmarkOpGPU(b *testing.B) {
	be, err := cudakernels.NewBackend(cudakernels.WithPrecision(cudakernels.BF16))
	if errors.Is(err, cudakernels.ErrNoDevice) {
		b.Skipf("no CUDA device: %v", err)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	for _, d := range []int{128, 64} {
		for _, n := range []int{1024, 4096, 16384} {
			p := kernels.Params{B: 16384 / n, H: 2048 / d, Nq: n, Nk: n, D: d, Scale: 1 / math.Sqrt(float64(d))}
			benchOpGPU(b, be, p)
		}
	}
}

func benchOpGPU(b *testing.B, be *cudakernels.Backend, p kernels.Params) {
	fwdK, err := be.KernelTime(p, false, 5)
	if err != nil {
		b.Fatal(err)
	}
	bwdK, err := be.KernelTime(p, true, 3)
	if err != nil {
		b.Fatal(err)
	}
	q, k, v := randomSlice[float32](p.QLen(), 1), randomSlice[float32](p.KLen(), 2), randomSlice[float32](p.KLen(), 3)
	do := randomSlice[float32](p.QLen(), 4)
	o, lse := make([]float32, p.QLen()), make([]float32, p.LSELen())
	dq, dk, dv := make([]float32, p.QLen()), make([]float32, p.KLen()), make([]float32, p.KLen())
	report := func(b *testing.B, flops, kernelMs float64) {
		ms := float64(b.Elapsed().Microseconds()) / 1e3 / float64(b.N)
		b.ReportMetric(ms, "ms")
		b.ReportMetric(flops/ms/1e9, "TFLOP/s")
		b.ReportMetric(kernelMs, "kernel_ms")
		b.ReportMetric(ms/kernelMs, "x_kernel")
	}
	fwdFlops, allFlops := p.ForwardFLOPs(), p.ForwardFLOPs()+p.BackwardFLOPs()
	prefix := fmt.Sprintf("bf16/D%d_N%d_B%d_H%d", p.D, p.Nq, p.B, p.H)

	// Each case runs once before its timed loop, so that allocations the
	// backend keeps (workspace, staging) and first touches of the output
	// pages are not timed.
	b.Run(prefix+"/call-fwd", func(b *testing.B) {
		if err := be.Forward32(p, q, k, v, o, lse); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := be.Forward32(p, q, k, v, o, lse); err != nil {
				b.Fatal(err)
			}
		}
		report(b, fwdFlops, fwdK)
	})
	call := func(b *testing.B) {
		st, err := be.ForwardKeep32(p, q, k, v, o, lse)
		if err != nil {
			b.Fatal(err)
		}
		if err := errors.Join(be.BackwardKept32(st, p, do, nil, dq, dk, dv), st.Release()); err != nil {
			b.Fatal(err)
		}
	}
	b.Run(prefix+"/call-fwdbwd", func(b *testing.B) {
		call(b)
		for b.Loop() {
			call(b)
		}
		report(b, allFlops, fwdK+bwdK)
	})
	for _, grad := range []bool{false, true} {
		g := gorgonia.NewGraph()
		node := func(name string, n int, data []float32) *gorgonia.Node {
			shape := []int{p.B, p.H, n, p.D}
			val := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
			return gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(shape...), gorgonia.WithName(name), gorgonia.WithValue(val))
		}
		qn, kn, vn := node("q", p.Nq, q), node("k", p.Nk, k), node("v", p.Nk, v)
		out, err := op.Attention(qn, kn, vn, op.WithBackend(be))
		if err != nil {
			b.Fatal(err)
		}
		name, flops, kms := "/graph-fwd", fwdFlops, fwdK
		if grad {
			name, flops, kms = "/graph-fwdbwd", allFlops, fwdK+bwdK
			if _, err := gorgonia.Grad(gorgonia.Must(gorgonia.Sum(out)), qn, kn, vn); err != nil {
				b.Fatal(err)
			}
		}
		m := gorgonia.NewTapeMachine(g)
		b.Run(prefix+name, func(b *testing.B) {
			if err := m.RunAll(); err != nil {
				b.Fatal(err)
			}
			m.Reset()
			for b.Loop() {
				if err := m.RunAll(); err != nil {
					b.Fatal(err)
				}
				m.Reset()
			}
			report(b, flops, kms)
		})
		m.Close()
	}
	g := gorgonia.NewGraph()
	x := gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(p.B, p.H, p.Nq, p.D), gorgonia.WithName("x"),
		gorgonia.WithValue(tensor.New(tensor.WithShape(p.B, p.H, p.Nq, p.D), tensor.WithBacking(do))))
	if _, err := gorgonia.Grad(gorgonia.Must(gorgonia.Sum(x)), x); err != nil {
		b.Fatal(err)
	}
	m := gorgonia.NewTapeMachine(g)
	defer m.Close()
	b.Run(prefix+"/gorgonia-sum", func(b *testing.B) {
		for b.Loop() {
			if err := m.RunAll(); err != nil {
				b.Fatal(err)
			}
			m.Reset()
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms")
	})
}
