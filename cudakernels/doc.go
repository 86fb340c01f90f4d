// Package cudakernels computes fused attention on NVIDIA GPUs. It implements
// kernels.Backend with CUDA kernels driven through gorgonia.org/cu (the CUDA
// driver API); it never imports Gorgonia itself.
//
// # Build tag
//
// The GPU code builds only with the tag flashgpu (not Gorgonia's cuda tag):
//
//	eval "$(../shared/tools/cuda-sdk.sh)"   # cuda.h and a libcuda stub for cgo
//	go test -c -tags flashgpu -o .gpu/cudakernels.test ./cudakernels
//
// Without the tag the package holds only Precision, its errors and the
// staleness test of the generated kernels, so a default build needs neither
// cgo nor CUDA. A tagged binary needs libcuda.so.1 at run time. Note that
// gorgonia.org/cu calls cuInit in an init function and exits the process if
// it fails: a tagged binary on a machine with a driver but no usable GPU ends
// there, before any test can skip. Where the driver loads but finds no
// device, NewBackend returns an error wrapping ErrNoDevice and the tests skip.
//
// # Use
//
//	b, err := cudakernels.NewBackend(cudakernels.WithPrecision(cudakernels.FP32))
//	if err != nil { ... }           // ErrNoDevice, ErrUnsupported
//	defer b.Close()
//	err = b.Forward32(p, q, k, v, o, lse)
//
// Shapes, the masking convention (bottom-right aligned causal; rows that see
// no key get LSE = +Inf, output 0, gradients 0) and the saved state (LSE
// only) are those of package kernels. Each call copies its host slices to the
// device, runs the kernels and copies the results back; nothing of size
// Nq×Nk is allocated. The copies go through page-locked staging memory on two
// streams, in chunks of (batch, head) pairs, so that one chunk's copies
// overlap another's kernels (resident_gpu.go); results are bit-identical
// whatever the chunking. The Backend also implements kernels.Resident:
// ForwardKeep32/64 keep the device copies of q, k, v, o and lse in a
// DeviceState, and BackwardKept32/64 then upload only do. The staging
// memory and a device workspace are kept between calls, grown to the
// largest call's need; Trim frees them, Close frees everything, including
// states not released. MemInfo reports the device's free memory and
// KernelTime the kernels' time without copies. A Backend owns one CUDA context on one OS thread (a
// context is bound to a thread) and runs every call there, so it is safe for
// concurrent use; calls are serialised.
//
// Errors, never panics, for: head dimensions above 256 (wrapping both
// kernels.ErrInvalidParams and ErrUnsupported), problems past
// kernels.MaxElements or the grid limit, allocation failure (ErrOutOfMemory),
// no device (ErrNoDevice), devices older than compute capability 8.0, and
// precisions without kernels (ErrUnsupported).
//
// # Precision modes
//
// Precision selects the arithmetic of Forward32 and Backward32; inputs and
// outputs are float32 in every mode. Forward64 and Backward64 always compute
// in float64 on CUDA cores, for gradient checks on the GPU.
//
//   - FP32: exact float32 on CUDA cores, forward and backward. Passes the
//     conformance suite on an H200.
//   - BF16, FP16: forward on tensor cores (mma.sync m16n8k16), the fp32
//     inputs rounded to bf16/fp16 on chip, fp32 accumulation and softmax,
//     for D ≤ 128. Backward32 runs the float32 CUDA-core backward on Q, K,
//     V and dO rounded to the storage precision exactly as the forward
//     rounded them (a small in-place kernel on the backward's device
//     copies; the caller's slices are untouched), with O and LSE as given.
//     dP = dO·V and D = rowsum(dO∘O) then see the V that built O, so
//     dS = P∘(dP − D) cancels where it must: with one visible key, O is
//     exactly the rounded V and dQ, dK come out exactly 0. Forward and
//     backward pass the whole conformance suite on an H200. D above 128
//     returns ErrUnsupported from both (no D = 256 tensor-core forward is
//     built). There is no tensor-core backward yet.
//   - TF32: not implemented; NewBackend returns ErrUnsupported.
//
// # Kernels
//
// The CUDA sources are under csrc/, one concern per file: common.cuh (mask,
// math, guards), simt_tile.cuh (tile geometry and shared-memory layout of the
// CUDA-core kernels), fwd_simt.cuh (forward), bwd_simt.cuh (backward),
// mma.cuh (tensor-core fragments, packing, cp.async), fwd_mma.cuh
// (tensor-core forward), round.cuh (storage rounding of the low-precision
// backward's operands) and flash.cu (the extern "C" entry points).
//
// The tensor-core forward first converts Q, K and V once into 16-bit
// scratch copies with rows padded to the compiled head dimension (zeros
// past D), so rows are 16-byte aligned. Each block then owns 128 query rows
// (4 warps, two m16 tiles of 16 rows per warp, so every K and V fragment
// read from shared memory feeds two mma) and walks key tiles of 64: tiles
// are copied into shared memory by cp.async (K and V double buffered),
// fragments are read with ldmatrix (.trans for V), S = Q·Kᵀ stays in mma
// accumulators, the online softmax works on those registers (the causal
// mask only on tiles that cross a row's last visible key; the rescale of O
// skipped once a row's maximum stops changing), and P is re-packed in
// registers as the A operand of O += P·V. Key tiles past the block's last
// visible key are skipped under the causal mask.
//
// The CUDA-core family ("simt") works on tiles of 32 rows (16 for float64 at
// D = 256) with 8 threads per row:
//
//   - forward: one block per tile of query rows loops over key tiles up to
//     the last key its last row sees (causal block skipping), with the online
//     softmax (running max m and sum l per row) and the output accumulators in
//     registers; masked tails handle any Nq and Nk.
//   - backward: D = rowsum(dO∘O) (one thread per row); dK and dV per key tile,
//     looping over query tiles and recomputing P = exp(scale·QKᵀ − LSE) from
//     the saved LSE; dQ in a separate pass per query tile. Every output
//     element is written by one thread in a fixed order, so results are
//     bit-identical from run to run (deterministic; no atomics).
//
// Head dimensions are compiled for 32, 64, 128 and 256; any other D up to 256
// is padded with zero columns inside the kernel (D = 8, 40, 96, 200 work).
// These kernels are correct rather than fast; they load tiles synchronously
// (no cp.async) and compute with scalar FMAs. The Go side picks a kernel per
// precision and head dimension (fwdKernel), so further families — a
// tensor-core backward, a Hopper family with wgmma and TMA — slot in beside
// these without touching callers.
//
// # Speed
//
// Measured on an H200 (BenchmarkForward, BenchmarkBackward; CUDA events, L2
// flushed, median of 3), TFLOP/s at D = 128, N = 8192, B = 2, H = 16,
// non-causal: FP32 forward 12.7, backward 8.9 (earlier run); BF16 and FP16
// forward 289 (causal 243; D = 64, N = 2048: 192), the conversion to 16 bits
// included. In the same call PyTorch's SDPA reached 46.0/37.1 (fp32,
// efficient kernel), 350/296 (bf16, FlashAttention 2; causal 318, D = 64
// 300) and 612/521 (bf16, cuDNN). The targets (BF16 ≥ 350 forward, 280
// backward; TF32 ≥ 4× PyTorch fp32) are not met yet: the forward reaches
// 83 % of FA2 (77 % causal, 64 % at D = 64), and the low-precision backward
// still runs on CUDA cores.
//
// # Generated files and the staleness check
//
// ptx/flash_sm80.ptx and ptx/flash_sm90.ptx are generated by gen.sh (nvcc
// -O3 -lineinfo -std=c++17 --ptx, -arch=compute_80 and compute_90), each
// with a "Code generated ... DO NOT EDIT." header, and embedded into the
// tagged build; the loader picks compute_90 on compute capability 9.x and
// compute_80 otherwise, and the driver compiles the PTX when the module
// loads. kernels.manifest records the sha256 of gen.sh, of every file under
// csrc/ and of each PTX file. TestGeneratedKernelsUpToDate, a plain CPU test
// in the default build, fails when any of them differs, so changing a .cu
// file without regenerating breaks `go test ./cudakernels`.
//
// To regenerate, run `go generate ./cudakernels` where nvcc (CUDA 12 or
// newer) exists. On this project nvcc lives only on the GPU machine:
// devrun.sh runs gen.sh there, tests the fresh PTX (through
// FLASHATTN_KERNEL_DIR, which the tests pass to WithKernelDir) and returns
// ptx/ and kernels.manifest to be committed.
//
// # Tests
//
// The tagged tests skip when no device is present. They run the shared
// conformance suite (kernels/conformance) on the FP32 backend, plus head
// dimensions 96 to 256 and unsupported ones; TestConformanceBF16 and
// TestConformanceFP16 run the whole suite (forward and backward) on the
// low-precision backends, TestLowPrecisionOneKey checks the exact zeros of
// one-key rows and TestLowPrecisionLimits the errors above D = 128.
// BenchmarkForward and BenchmarkBackward time the kernels with CUDA events at FlashAttention's benchmark shapes (B·N = 16384
// tokens, hidden 2048) after flushing the L2 cache; peers.py times PyTorch's
// SDPA at the same shapes.
package cudakernels
