// Package bench holds the benchmarks of this module; the package itself has
// no code. Results, with the machine and command that produced them, are in
// RESULTS.md beside this file.
//
//   - BenchmarkKernel*: the CPU backend alone (package cpukernels), forward
//     and backward, reported in GFLOP/s.
//   - BenchmarkGraph*: forward+backward of one attention inside a Gorgonia
//     graph on a TapeMachine, op.Attention against the same attention built
//     naively from Gorgonia's ops (BatchedMatMul + SoftMax + BatchedMatMul
//     with Gorgonia's own gradients), in one run.
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
//
// The command in bench/sweep (go run ./bench/sweep) sweeps the sequence
// length for the example transformer, naive against flash, one child
// process per point, and writes the tables and plots kept in bench/results.
package bench
