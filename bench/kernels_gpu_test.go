//go:build flashgpu

package bench

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"testing"

	"github.com/gorgonia-flash/flashattention/cudakernels"
	"github.com/gorgonia-flash/flashattention/kernels"
)

// kernelShapes are FlashAttention's benchmark shapes: B·N = 16384 tokens,
// hidden 2048 (H = 2048/D), N from 512 to 16384, D 64 and 128, causal off
// and on. -short keeps N = 2048 and 8192.
func kernelShapes(short bool) []kernels.Params {
	ns := []int{512, 1024, 2048, 4096, 8192, 16384}
	if short {
		ns = []int{2048, 8192}
	}
	var ps []kernels.Params
	for _, d := range []int{64, 128} {
		for _, causal := range []bool{false, true} {
			for _, n := range ns {
				ps = append(ps, kernels.Params{B: 16384 / n, H: 2048 / d, Nq: n, Nk: n, D: d,
					Scale: 1 / math.Sqrt(float64(d)), Causal: causal})
			}
		}
	}
	return ps
}

var family = flag.String("family", "auto", "kernel family of the tensor-core forward in BenchmarkKernelsGPU: auto, sm80 or sm90")

// BenchmarkKernelsGPU times our CUDA kernels alone (cudakernels'
// KernelTime: CUDA events, L2 flushed before each run, median of 3, the
// conversion of the fp32 inputs to the operand type included) at
// kernelShapes, forward and backward in every precision (TF32's backward
// runs on tensor cores where the device's kernel family has one, else it is
// FP32's on rounded operands). It reports ms and TFLOP/s with FLOPs as in
// kernels.Params. gpu_side_by_side.py runs it beside PyTorch's SDPA and
// prints one table. -family picks the kernel family of the tensor-core
// kernels (the forward's and, on Hopper, the backward's).
func BenchmarkKernelsGPU(b *testing.B) {
	fam, err := cudakernels.ParseFamily(*family)
	if err != nil {
		b.Fatal(err)
	}
	for _, prec := range []cudakernels.Precision{cudakernels.FP32, cudakernels.TF32, cudakernels.BF16, cudakernels.FP16} {
		be, err := cudakernels.NewBackend(cudakernels.WithPrecision(prec), cudakernels.WithFamily(fam))
		if errors.Is(err, cudakernels.ErrNoDevice) {
			b.Skipf("no CUDA device: %v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		for _, pass := range []string{"fwd", "bwd"} {
			for _, p := range kernelShapes(testing.Short()) {
				name := fmt.Sprintf("%v/%s/D%d_N%d_causal=%v", prec, pass, p.D, p.Nq, p.Causal)
				b.Run(name, func(b *testing.B) {
					var ms float64
					for b.Loop() {
						if ms, err = be.KernelTime(p, pass == "bwd", 3); err != nil {
							b.Fatal(err)
						}
					}
					flops := p.ForwardFLOPs()
					if pass == "bwd" {
						flops = p.BackwardFLOPs()
					}
					b.ReportMetric(ms, "kernel-ms")
					b.ReportMetric(flops/ms/1e9, "TFLOP/s")
				})
			}
		}
		if err := be.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
