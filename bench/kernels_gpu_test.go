//go:build flashgpu

package bench

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
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

var family = flag.String("family", "auto", "kernel family of the tensor-core kernels in BenchmarkKernelsGPU and BenchmarkVariantsGPU: auto, sm80 or sm90")

var reps = flag.Int("reps", 3, "timed runs of each KernelTime in BenchmarkKernelsGPU and BenchmarkVariantsGPU, whose median each reports: more narrow an A/B's spread between rounds (devab.sh's REPS)")

var kernelDir = flag.String("kerneldir", "", "BenchmarkKernelsGPU's backends load their modules from this directory (cudakernels.WithKernelDir) instead of the binary's own: cudakernels/ptx times the PTX that a user's build loads, compiled by the driver, beside a binary whose embedded modules are devpack.sh's CUBIN=1 machine code")

var deterministic = flag.Bool("deterministic", true, "BenchmarkKernelsGPU's backends: false lets the Hopper backward of plain 16-bit problems sum dQ by reductions in one kernel (cudakernels.WithDeterministic)")

// tuneTableOptions returns WithTuneTable of the table in the file
// FLASHATTN_TUNE_TABLE names, when set: a table that flashtune has just
// written on this GPU, timed beside the heuristic before it is committed.
// Unset, the backends take their device's committed table, if any.
func tuneTableOptions(b *testing.B) []cudakernels.Option {
	path := os.Getenv("FLASHATTN_TUNE_TABLE")
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	t, err := cudakernels.ParseTuneTable(data)
	if err != nil {
		b.Fatalf("FLASHATTN_TUNE_TABLE: %v", err)
	}
	return []cudakernels.Option{cudakernels.WithTuneTable(t)}
}

// BenchmarkKernelsGPU times our CUDA kernels alone (cudakernels'
// KernelTime: CUDA events, L2 flushed before each run, median of -reps runs (3), the
// conversion of the fp32 inputs to the operand type included) at
// kernelShapes, forward and backward in every precision (TF32's backward
// runs on tensor cores where the device's kernel family has one, else it is
// FP32's on rounded operands). It reports ms and TFLOP/s with FLOPs as in
// kernels.Params. gpu_side_by_side.py runs it beside PyTorch's SDPA and
// prints one table. -family picks the kernel family of the tensor-core
// kernels (the forward's and, on Hopper, the backward's; on Hopper FP32's
// plain rows at D ≤ 128 run on the 3xTF32 kernels but with -family sm80);
// with the default, auto, FLASHATTN_TUNE_TABLE may name a tuning table to
// choose by.
func BenchmarkKernelsGPU(b *testing.B) {
	fam, err := cudakernels.ParseFamily(*family)
	if err != nil {
		b.Fatal(err)
	}
	for _, prec := range []cudakernels.Precision{cudakernels.FP32, cudakernels.TF32, cudakernels.BF16, cudakernels.FP16} {
		opts := append(tuneTableOptions(b), cudakernels.WithPrecision(prec), cudakernels.WithFamily(fam),
			cudakernels.WithDeterministic(*deterministic))
		if *kernelDir != "" {
			opts = append(opts, cudakernels.WithKernelDir(*kernelDir))
		}
		be, err := cudakernels.NewBackend(opts...)
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
						if ms, err = be.KernelTime(p, pass == "bwd", *reps); err != nil {
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

// variantShapes are issue 10's speed targets: BF16-sized problems at D =
// 128 (B·N = 16384 tokens, H = 16), each variant beside the plain kernel
// on the same shape. FLOPs are the visible ones (kernels.Params.
// VisibleFLOPs: 4·D per row and key the masks leave), so that a variant
// that costs no more than its visible work runs at the plain kernel's
// TFLOP/s.
func variantShapes() []struct {
	name string
	p    kernels.Params
} {
	const d = 128
	at := func(n int, causal bool) kernels.Params {
		return kernels.Params{B: 16384 / n, H: 2048 / d, Nq: n, Nk: n, D: d, Scale: 1 / math.Sqrt(d), Causal: causal}
	}
	slopes := make([]float64, 16)
	for h := range slopes {
		slopes[h] = math.Exp2(-8 * float64(h+1) / 16) // ALiBi's geometric slopes
	}
	gqa, softcap, alibi := at(8192, true), at(8192, true), at(8192, true)
	gqa.Hkv, softcap.Softcap, alibi.ALiBi = 2, 30, slopes
	window := at(16384, true)
	window.Window = kernels.Window{On: true, Left: 1023, Right: 0} // 1024 keys, the row's own included
	// Eight sequences padded to N = 8192, lengths averaging N/4.
	lengths := kernels.Params{B: 8, H: 16, Nq: 8192, Nk: 8192, D: d, Scale: 1 / math.Sqrt(d), Causal: true,
		QLens: []int{2048, 1024, 3072, 2048, 512, 3584, 2048, 2048}}
	lengths.KLens = lengths.QLens
	dropout := at(8192, true)
	dropout.Dropout = kernels.Dropout{P: 0.1, Seed: 1}
	// One [N, N] bias slice shared by every batch entry and head, its
	// gradient wanted (KernelTime fills the bias on the device and never
	// touches Grad32).
	bias := at(8192, true)
	bias.Bias = &kernels.Bias{Bb: 1, Hb: 1, Grad32: make([]float32, bias.Nq*bias.Nk)}
	return []struct {
		name string
		p    kernels.Params
	}{
		{"plain_N8192_causal", at(8192, true)},
		{"plain_N16384_causal", at(16384, true)},
		{"gqa8_N8192_causal", gqa},
		{"window1024_N16384_causal", window},
		{"softcap30_N8192_causal", softcap},
		{"alibi_N8192_causal", alibi},
		{"lengths_quarter_N8192_causal", lengths},
		{"dropout0.1_N8192_causal", dropout},
		{"bias_shared_N8192_causal", bias},
	}
}

// BenchmarkVariantsGPU times each attention variant's kernels alone
// (KernelTime, as BenchmarkKernelsGPU) in FP32 (CUDA cores) and BF16
// (tensor cores), forward and backward, reporting TFLOP/s on visible FLOPs
// (backward 2.5× the forward's). A precision whose kernels do not compute a
// variant yet reports it skipped, with the reason.
// gpu_variants_side_by_side.py runs it beside FlexAttention and SDPA.
// -family picks the tensor-core family, as in BenchmarkKernelsGPU.
func BenchmarkVariantsGPU(b *testing.B) {
	fam, err := cudakernels.ParseFamily(*family)
	if err != nil {
		b.Fatal(err)
	}
	for _, prec := range []cudakernels.Precision{cudakernels.BF16, cudakernels.FP32} {
		be, err := cudakernels.NewBackend(cudakernels.WithPrecision(prec), cudakernels.WithFamily(fam))
		if errors.Is(err, cudakernels.ErrNoDevice) {
			b.Skipf("no CUDA device: %v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		for _, pass := range []string{"fwd", "bwd"} {
			for _, v := range variantShapes() {
				if prec == cudakernels.FP32 && v.p.Nq > 8192 {
					continue // minutes per call on the CUDA cores
				}
				b.Run(fmt.Sprintf("%v/%s/%s", prec, pass, v.name), func(b *testing.B) {
					var ms float64
					for b.Loop() {
						if ms, err = be.KernelTime(v.p, pass == "bwd", *reps); errors.Is(err, cudakernels.ErrUnsupported) {
							b.Skip(err)
						} else if err != nil {
							b.Fatal(err)
						}
					}
					flops := v.p.VisibleFLOPs()
					if pass == "bwd" {
						flops *= 2.5
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

// decodeGrid is issue 11's decode grid: one new row per sequence (Nq = 1)
// against cached lengths of 1k to 128k keys, B ∈ {1, 8, 64}, H = 32 query
// heads with Hkv ∈ {32, 8}, D = 128; points whose keys and values would
// exceed maxDecodeBytes (in float32), or a tensor kernels.MaxElements, are
// left out. -test.short keeps B = 1
// and 8 at 4k and 64k.
func decodeGrid(short bool) []kernels.Params {
	const maxDecodeBytes = 40 << 30
	lens, batches := []int{1 << 10, 4 << 10, 16 << 10, 64 << 10, 128 << 10}, []int{1, 8, 64}
	if short {
		lens, batches = []int{4 << 10, 64 << 10}, []int{1, 8}
	}
	var ps []kernels.Params
	for _, hkv := range []int{32, 8} {
		for _, bs := range batches {
			for _, l := range lens {
				if n := int64(bs) * int64(hkv) * int64(l) * 128; 2*4*n > maxDecodeBytes || n > kernels.MaxElements {
					continue
				}
				ps = append(ps, kernels.Params{B: bs, H: 32, Hkv: hkv, Nq: 1, Nk: l, D: 128, Scale: 1 / math.Sqrt(128), Causal: true})
			}
		}
	}
	return ps
}

// BenchmarkDecodeGPU times a decode step's attention alone (cudakernels'
// DecodeKernelTime: the split-KV units and their merge, CUDA events, L2
// flushed, median of 5) over decodeGrid, with keys and values in the cache
// format of each precision (bf16 for BF16, float32 for FP32), and reports
// the effective bandwidth (cache bytes read ÷ time) beside the device's
// read ceiling, measured first in the same run (cudakernels' ReadCeiling
// over 4 GiB), and read-us, the time ReadCeiling takes to read the step's
// bytes once (the floor of a step of that size, launch and ramp
// included). decode_side_by_side.py runs it beside PyTorch's SDPA.
func BenchmarkDecodeGPU(b *testing.B) {
	for _, prec := range []cudakernels.Precision{cudakernels.BF16, cudakernels.FP32} {
		be, err := cudakernels.NewBackend(cudakernels.WithPrecision(prec))
		if errors.Is(err, cudakernels.ErrNoDevice) {
			b.Skipf("no CUDA device: %v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		const ceilingBytes = 4 << 30
		secs, err := be.ReadCeiling(ceilingBytes, 5)
		if err != nil {
			b.Fatal(err)
		}
		ceiling := ceilingBytes / secs / 1e12
		b.Run(fmt.Sprintf("%v/read-ceiling", prec), func(b *testing.B) {
			for b.Loop() {
			}
			b.ReportMetric(ceiling, "TB/s")
		})
		for _, p := range decodeGrid(testing.Short()) {
			b.Run(fmt.Sprintf("%v/B%d_Hkv%d_L%d", prec, p.B, p.KVHeads(), p.Nk), func(b *testing.B) {
				var secs float64
				var bytes int64
				for b.Loop() {
					if secs, bytes, err = be.DecodeKernelTime(p, 5); err != nil {
						b.Fatal(err)
					}
				}
				// The same bytes read once and nothing else: what a step
				// of this size can at best take, launch and ramp included.
				read, err := be.ReadCeiling(bytes, 5)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(secs*1e6, "kernel-us")
				b.ReportMetric(read*1e6, "read-us")
				b.ReportMetric(float64(bytes)/secs/1e12, "TB/s")
				b.ReportMetric(float64(bytes)/secs/1e12/ceiling, "of-ceiling")
			})
		}
		if err := be.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
