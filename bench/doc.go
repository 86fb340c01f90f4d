// Package bench holds the benchmarks of this module; the package itself has
// no code. Results, with the machine and command that produced them, are in
// RESULTS.md beside this file.
//
//   - BenchmarkKernel*: the CPU backend alone (package cpukernels), forward
//     and backward, reported in GFLOP/s and, for float32, as of-peak: the
//     fraction of the float32 FMA rate that the same number of threads
//     reaches right after (simd.FMAPeak32), which holds still on a shared
//     machine whose share of the host drifts. Take one-thread figures from
//     `-cpu 1` alone: with a list like `-cpu 1,2`, go test ran the first
//     count's sub-benchmarks at the default GOMAXPROCS (RESULTS.md).
//   - BenchmarkGraph*: forward+backward of one attention inside a Gorgonia
//     graph on a TapeMachine, op.Attention against the same attention built
//     naively from Gorgonia's ops (BatchedMatMul + SoftMax + BatchedMatMul
//     with Gorgonia's own gradients), in one run.
//   - BenchmarkKernelsGPU (tag flashgpu): the CUDA kernels alone in every
//     precision at FlashAttention's shapes (B·N = 16384, hidden 2048, N 512
//     to 16384, D 64 and 128, causal off and on), in TFLOP/s;
//     FLASHATTN_TUNE_TABLE=FILE makes it choose kernels by that tuning
//     table (cudakernels.TuneTable, as flashtune writes one) instead of the
//     committed one, -deterministic=false lets the Hopper backward run
//     fused (cudakernels.WithDeterministic), and -kerneldir DIR loads the
//     kernel modules from DIR (cudakernels.WithKernelDir): with
//     ../cudakernels/ptx, the PTX a user's driver compiles, timed by a
//     binary that embeds devpack.sh's cubins.
//   - BenchmarkOpGPU (tag flashgpu): the op on the GPU with its host↔device
//     copies, alone and in a Gorgonia graph, beside the kernels' time.
//
// FLOPs follow FlashAttention's convention: 4·B·H·Nq·Nk·D for the forward,
// 2.5× that for the backward, halved under a causal mask.
//
// Run with
//
//	go test ./bench -run '^$' -bench . -count 6 | tee new.txt
//	benchstat old.txt new.txt
//
// torch_cpu_sdpa.py measures PyTorch's CPU scaled_dot_product_attention on
// the same shapes, for a per-core comparison on a machine that has PyTorch.
// gpu_side_by_side.py runs BenchmarkKernelsGPU from a tagged test binary
// and PyTorch's SDPA (efficient fp32, FlashAttention 2 and cuDNN bf16) on
// the same shapes, in one command, and prints one table:
//
//	eval "$(.ci/cuda-sdk.sh)"   # cuda.h and a libcuda stub, where no CUDA toolkit is installed
//	go test -c -tags flashgpu -o .gpu/bench.test ./bench
//	python3 bench/gpu_side_by_side.py .gpu/bench.test --out side_by_side.md   # on the GPU machine
//
// torch_fp32_accuracy.py (on the GPU machine, PyTorch alone) applies the
// conformance suite's float32 measure (error within 2× the naive float32
// computation's, against float64) to PyTorch's float32 SDPA, which runs on
// tensor cores in 3xTF32: the calibration of what a 3xTF32 kernel reaches.
//
// The command in bench/sweep (go run ./bench/sweep) sweeps the sequence
// length for the example transformer, naive against flash, one child
// process per point, and writes the tables and plots kept in bench/results.
package bench
