// Package cudakernels computes fused attention on NVIDIA GPUs. It implements
// kernels.Backend with CUDA kernels driven through gorgonia.org/cu (the CUDA
// driver API); it never imports Gorgonia itself.
//
// # Build tag
//
// The GPU code builds only with the tag flashgpu (not Gorgonia's cuda tag):
//
//	eval "$(.ci/cuda-sdk.sh)"   # cuda.h and a libcuda stub for cgo
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
//	b, err := cudakernels.NewBackend(cudakernels.WithPrecision(cudakernels.BF16))
//	if err != nil { ... }           // ErrNoDevice, ErrUnsupported
//	defer b.Close()
//	err = b.Forward32(p, q, k, v, o, lse)
//
// WithFamily(FamilySM80) keeps a Hopper GPU on the mma.sync kernels (to
// compare families); the default picks the fastest family the device runs,
// by the device model's tuning table where one is committed (tuned/), or
// by the one WithTuneTable gives (Tune and cmd/flashtune make them).
// WithDeterministic(false) lets the Hopper backward of plain BF16/FP16
// problems sum dQ by float32 bulk reductions in one kernel instead of two
// deterministic ones (BF16's and FP16's sm90 conformance sets pass with it
// on an H100, 2026-12-07, but for the determinism test, which it skips).
//
// Shapes, the masking convention (bottom-right aligned causal; rows that see
// no key get LSE = +Inf, output 0, gradients 0) and the saved state (LSE
// only) are those of package kernels. Whether a row sees a key is decided
// from the mask alone; every other row follows IEEE arithmetic as
// kernels.NaiveForward does: a NaN score makes the row's output and LSE NaN,
// and a row whose visible scores are all −Inf gets O = NaN (0/0) and
// LSE = −Inf. The backward recomputes P = exp(S − LSE), so such rows give NaN
// gradients. One exception to the naive pattern, allowed by package
// kernels: under a causal mask, a NaN or ±Inf input inside a tile that the
// mask cuts meets the tile's masked probabilities, 0, in the tensor-core
// (and CUDA-core) products, so NaN can appear where the naive result is
// finite; rows that see no key still get O = 0 and LSE = +Inf. Each call
// copies its host slices to the
// device, runs the kernels and copies the results back; nothing of size
// Nq×Nk is allocated. The copies run on two streams, in chunks of (batch,
// head) pairs, so that one chunk's copies overlap another's kernels
// (resident_gpu.go); results are bit-identical whatever the chunking. A
// host slice passed in an earlier call (within the last four) is
// registered with the driver (cuMemHostRegister, its Go object pinned) and
// copied in place; others go through page-locked staging memory. Up to
// 16 GiB of registrations stay between calls, those unused for four calls
// going first, and keep their Go objects allocated meanwhile; Trim and
// Close unregister them. The Backend also implements kernels.Resident:
// ForwardKeep32/64 keep the device copies of q, k, v, o and lse in a
// DeviceState, and BackwardKept32/64 then upload only do. The staging
// memory, the registrations and a device workspace are kept between calls, grown to the
// largest call's need; Trim frees them, Close frees everything, including
// states not released. MemInfo reports the device's free memory and
// KernelTime the kernels' time without copies. A Backend owns one CUDA
// context on one OS thread (a context is bound to a thread) and runs every
// call there, so it is safe for concurrent use; calls are serialised.
//
// Errors, never panics, for: head dimensions above 256 (wrapping both
// kernels.ErrInvalidParams and ErrUnsupported), problems past
// kernels.MaxElements or the grid limit, allocation failure (ErrOutOfMemory),
// no device (ErrNoDevice), devices older than compute capability 8.0,
// unknown precisions (ErrUnsupported), and the attention variants of
// kernels.Params that the kernels a call would run do not compute yet
// (ErrUnsupported naming them; see Attention variants).
//
// # Attention variants
//
// Which kernels compute which variants of kernels.Params, forward and
// backward (each kernel object's computes method says, and an entry point
// refuses the rest with ErrUnsupported before any work):
//
//   - the CUDA-core kernels (FP32, float64, and the CUDA-core backward of
//     the low precisions): all of them;
//   - the tensor-core kernels of both families, the Hopper one (wgmma,
//     TF32, BF16, FP16, where it serves the head dimension: padded 64, 128
//     or 256, TF32's forward up to 128) and the mma.sync one (other GPUs,
//     and D ≤ 32 or TF32's forward above 128 on Hopper): grouped-query
//     heads, windows, lengths, softcap and ALiBi, in separate _var
//     instantiations so that plain attention keeps its tuned kernels
//     (csrc/tc_variants.cuh holds what the families share);
//   - dropout and the bias, on top of those, in _full instantiations: the
//     mma.sync forward in TF32, BF16 and FP16 and its backward in BF16 and
//     FP16 (dBias on tensor cores too), the Hopper forward in BF16 and
//     FP16 at padded 64 and 128 and TF32 at 64, where its two bias tiles
//     fit (wgmmaBuilt; dropout without a bias takes the _drop forward,
//     without bias tiles, on 128-key tiles where wgmmaDropBuilt), and the
//     Hopper backward (and its _drop kernels) in BF16 and FP16 at padded
//     64 and 128 (wgmmaBwdBuilt with full), with a dBias kernel of its own
//     on the same images; TF32's backward of them takes the rounded CUDA
//     cores. The _full kernels stage the bias through shared memory in
//     tiles copied one step ahead (the Hopper backward's dK/dV, where two
//     tiles do not fit, one tile refilled between two barriers).
//
// The CUDA-core kernels work through Params' variant fields
// (csrc/variants.cuh mirrors kernels.Mask and kernels.ModifyScore):
//
//   - Grouped-query attention: query pair bh reads key pair bh / (H/Hkv).
//     The pipeline's chunks hold whole groups, so a chunk's keys are those
//     of its query heads; each dK/dV block owns a key tile of one key head
//     and sums the gradients of every query head of its group in a fixed
//     order, so no expanded dK or dV exists and results stay bit-identical.
//   - Windows, the causal mask and per-sequence lengths: each row sees one
//     contiguous key range, and each key one contiguous row range, so
//     blocks skip the tiles outside them and the products stop at their
//     bounds. Padding rows and keys load as zeros, and products run only
//     over the pairs the mask leaves, so NaN or ±Inf in a masked key, value
//     or row never reaches another row (no MaskedNaNMayPropagate exception
//     for the variants).
//   - Softcap and ALiBi modify the scaled score before the mask; the
//     backward multiplies dS by the softcap's derivative. tanh is the
//     accurate library function.
//   - Dropout draws kernels.Dropout's Philox4x32-10 mask (csrc/philox.cuh)
//     from (seed, offset, b·H + h, i, j) of the call, the same bits as the
//     CPU (TestDropoutMaskMatchesCPU reads it out of the forward).
//   - The additive bias is added after ALiBi, read for visible pairs only.
//     dBias, when wanted, comes from one more kernel (dbias_1tile; on
//     Hopper dbias_tile, the same on wgmma): a
//     block per tile of rows and keys of each bias slice recomputes S and
//     dP for every pair that reads the slice, in a fixed order, and writes
//     their dS summed, so dBias needs no scratch and no atomics; the whole
//     call then runs as one chunk, since every pair of a slice must be on
//     the device.
//
// The lengths, the ALiBi slopes and the bias go to the device once per
// call, into the workspace. A gradient with respect to the LSE runs in every precision:
// dot_do_o writes D = rowsum(dO∘O) − dLSE, which every backward reads.
//
// # Precision modes
//
// Precision selects the arithmetic of Forward32 and Backward32; inputs and
// outputs are float32 in every mode. Forward64 and Backward64 always compute
// in float64 on CUDA cores, for gradient checks on the GPU.
//
//   - FP32 (the default): exact float32 on CUDA cores, forward and
//     backward. It is the default because it is what a float32 Gorgonia
//     graph computes on the CPU, to float32 rounding; the other modes change
//     results in the third or fourth digit and are opted into. On Hopper
//     (unless the backend is held to FamilySM80) plain problems (no
//     variant but the causal mask and a window's right bound, no bias or
//     dropout) at D ≤ 128 run on the tf32 tensor cores by 3xTF32 instead,
//     forward and backward together: every operand split into a tf32 hi
//     and lo part, three products (lo·hi, hi·lo, hi·hi), scores in natural
//     units with expf, the backward's scores summed in the forward's
//     order, per-tile partial sums (csrc/mma.cuh's TF32x3); at D > 64 the
//     scores' big products in two chains of k-slices (the accumulators
//     truncate: sm90.cuh's halved_big) and the backward in three kernels,
//     one gradient each (wgmmaBwdSplit3): dV by two warpgroups that take
//     turns over the query steps, each with a stage of its own, dK and dQ
//     by one warpgroup whose single stage is refilled in two halves, the
//     next step's scores operands while this step's gradient product runs
//     (shared memory holds no second stage of hi and lo parts). They pass
//     the same FP32 suite (H100, 2026-12-05 at D ≤ 64, 2026-12-06 at 128)
//     at 2.4–6.4× the CUDA-core kernels' speed at D ≤ 64, 3.6–4.5× at 128
//     (the backward since 10–16 % faster again; bench/RESULTS.md).
//   - TF32: tensor cores, Q, K, V, dO, P and dS rounded to tf32 (10
//     mantissa bits), fp32 accumulation and softmax. Forward in both
//     kernel families; backward on tensor cores in the Hopper family up to
//     D = 128, elsewhere on CUDA cores on Q, K, V and dO rounded as the
//     forward rounded them.
//   - BF16, FP16: forward and backward on tensor cores, operands rounded to
//     the 16-bit type, P and dS rounded before they multiply, fp32
//     accumulation and softmax. At D = 256 (and 200, padded to 256) the
//     backward runs on CUDA cores on rounded operands: neither family's
//     tensor-core backward fits its dK and dV accumulators and tiles at that
//     width.
//
// In every low-precision backward D = rowsum(dO∘O) is computed from the
// rounded dO, so that dP − D cancels where the forward's softmax is
// constant.
//
// # Kernel families
//
// The tensor-core kernels come in two families, chosen with WithFamily:
// FamilySM80 (mma.sync, compute capability 8.0 and newer) and FamilySM90
// (Hopper: wgmma and bulk asynchronous copies, compute capability 9.0
// only). The default, FamilyAuto, uses FamilySM90 on a 9.0 device wherever
// it is built (forward: BF16 and FP16 at D 64, 128 and 256, TF32 at 64 and
// 128, D padded up as below; backward: all three at D 64 and 128) and
// FamilySM80 or the CUDA cores elsewhere. FamilySM80 also keeps FP32 on
// the CUDA cores where the others take its plain D ≤ 128 problems to the
// 3xTF32 kernels (Precision modes, above). Both families compute the same
// function and pass the same conformance suite; they differ in summation
// order, so results differ in the last bits.
//
// Every mode passes the whole conformance suite on an H200, in both
// families: its float32 errors against the float64 reference stay within
// twice those of a naive computation in the same precision
// (kernels/conformance). TestPrecisionErrors measures them; the figures are
// in bench/RESULTS.md.
//
// # Kernels
//
// The CUDA sources are under csrc/, one concern per file: params.cuh (the
// kernels' argument), common.cuh (mask, math, guards), simt_tile.cuh (tile geometry and shared-memory layout of the
// CUDA-core kernels), fwd_simt.cuh (forward), bwd_simt.cuh (backward),
// fwd_simt_blocked.cuh and bwd_simt_blocked.cuh (register-blocked float32
// forward and backward: 4×4 score blocks per thread from 16-byte shared
// loads; checked on the host, not yet launched on a GPU, see NOTES.md),
// mma.cuh (tensor-core operand types, fragments, cp.async), fwd_mma.cuh
// (tensor-core forward and the conversions to operand types), bwd_mma.cuh
// (tensor-core backward), round.cuh (storage rounding for the CUDA-core
// backward of the low-precision modes) and flash.cu (the extern "C" entry
// points); for the Hopper family, sm90.cuh (wgmma, descriptors, mbarriers,
// bulk copies, the tile-image layout and the conversions into it),
// sm90_variants.cuh (the attention variants in its kernels), fwd_wgmma.cuh
// (forward), fwd_wgmma_ws.cuh (the warp-specialized plain forward),
// bwd_wgmma.cuh (backward) and hopper.cu (its entry points, compiled for
// compute_90a alone).
//
// emu/ runs every kernel family on the host, built with g++ (C++20):
// cuda_emu.h models a launch (a block's threads as fibers meeting at
// __syncthreads, __syncwarp and named barriers, in a seeded random order
// per pass, over shared memory that starts each block as NaN; the
// shuffles, mma.sync and ldmatrix through a per-warp exchange, cp.async
// as a plain copy), and sm90_emu.h the Hopper instructions (wgmma computed
// at the wait that completes it, descriptors with the 128-byte swizzle,
// mbarriers, bulk copies). TestCUDACoreKernelsOnHost compares the
// register-blocked CUDA-core kernels with the row-block ones
// (emu/simt_forward.cc, simt_backward.cc); TestCUDACoreKernelsConformOnHost,
// TestMMAKernelsOnHost, TestDecodeKernelsOnHost and TestHopperKernelsOnHost
// send problems to emu/simt.cc, mma.cc, decode.cc and hopper.cc with the
// Params newParams builds and the launch shapes of shapes.go, and hold the
// results to the conformance suite's bounds. Nothing there measures speed
// or the tensor core's own rounding.
//
// The tensor-core forward is one kernel template over an operand type
// (mma.cuh: BF16, FP16, TF32), which gives the storage element, the k of
// one mma and how score accumulators become the A operand of P·V. Conversion
// kernels first write Q, K and V once into scratch copies of the operand
// type with rows padded to the compiled head dimension (zeros past D), so
// rows are 16-byte aligned; for TF32, V is written transposed with its keys
// permuted inside groups of 8, because ldmatrix cannot transpose 32-bit
// elements and one mma's C fragment holds the key columns the next mma's A
// fragment wants in another order (mma.cuh explains the permutation). Each
// block then owns 128 query rows (64 at D = 256; 4 warps, two m16 tiles of
// 16 rows per warp, so every K and V fragment read from shared memory feeds
// two mma) and walks key tiles of 64 (32 for TF32 above D = 64): tiles are
// copied into shared memory by cp.async (K and V double buffered),
// fragments are read with ldmatrix, S = Q·Kᵀ stays in mma accumulators, the
// online softmax works on those registers (the causal mask only on tiles
// that cross a row's last visible key; the rescale of O skipped once a row's
// maximum stops changing), and P goes from the accumulators into the A
// operand of O += P·V. Key tiles past the block's last visible key are
// skipped under the causal mask.
//
// The tensor-core backward (BF16, FP16) rounds dO to the operand type and
// computes D = rowsum(dO∘O) from the rounded values in one coalesced pass
// (a warp per row), converts Q, K, V and dO to 16 bits, then runs two
// kernels. dK/dV: one block per 64
// keys (16 per warp) loops over query tiles of 64 from the first query that
// sees its keys, computing Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ transposed, so that Pᵀ
// and dSᵀ go from accumulators straight into the A operands of dV += Pᵀ·dO
// and dK += dSᵀ·Q. dQ: one block per 64 queries loops over key tiles,
// recomputing S and dP for dQ += dS·K. Every output element is written by
// one thread in a fixed order, so results are bit-identical from run to
// run. Adding dQ with atomics from the dK/dV kernel instead, as
// FlashAttention 2 does, measured slower here (144 against 189 TFLOP/s at
// D = 128, N = 8192) and was dropped.
//
// The Hopper family keeps every wgmma operand K-major with the 128-byte
// swizzle. Instead of arranging tiles while loading them, its conversion
// kernels write Q, K and V once into scratch memory as "tile images": for
// each tile of rows, the exact bytes that tile must have in shared memory
// (128-byte panels along K, 16-byte chunks XOR-swizzled by row), zero-padded
// to whole tiles. V for P·V, which needs its other index contiguous, is
// written transposed the same way (for TF32 with keys permuted in groups
// of 8 as in the mma.sync family); the backward's products that sum over
// rows (dV, dK, dQ) read their 16-bit B operands from the row images
// MN-major (wgmma transposes them), and only TF32, which wgmma cannot
// transpose, gets transposed images of Q, K and dO there. One
// thread then brings a whole tile in with one bulk asynchronous copy
// (cp.async.bulk) that completes on an mbarrier, and wgmma reads it through
// a descriptor. Forward: blocks of two warpgroups (64 query rows each),
// key tiles of 128 (64 for TF32 and D = 256) in two stages with full and
// empty mbarriers; S = Q·Kᵀ with both operands in shared memory, the online
// softmax on the accumulators, O += P·V with P from registers. The plain
// BF16 and FP16 forward at padded D = 64 and 128, and TF32's at 128, is
// warp-specialized instead (fwd_wgmma_ws.cuh): a producer warpgroup issues
// the copies and gives its registers to two consumer warpgroups (three at
// D = 64; setmaxnreg), each of which issues the next S = Q·Kᵀ with the last tile's P·V and runs
// its softmax while P·V runs. Each consumer warpgroup converts its rows of
// the caller's float32 Q into its part of the Q tile itself, all its loads
// in flight at once, so that no Q image is written and read back; with two
// consumers (D = 128, and _ws2 at 64) the grid is persistent, a block per
// SM taking items (a head's ws_rows query rows) from a counter in global
// memory, zeroed before each launch, while the producer streams K and V
// tiles across item boundaries, which hides the next item's first copies
// behind the last one's tiles. The persistent kernels also make the K and
// Vᵀ images themselves, with the producer warpgroup's three idle warps:
// tasks of 16 KB of float32 rows taken from a second counter, staged by
// bulk copies (each warp into staging areas of its own, so that one
// warp's fence and release overlap the others' converting; TF32, with two
// areas, converts each task with the three warps together), converted
// and published with a count per head and key tile that the producer
// waits for before copying the tile (KVConverter;
// kernelParams.KSrc, VSrc; where D is a multiple of 4, K and V are
// 16-byte aligned and it measured faster, which short D = 128 problems did
// not (wgmmaFwdOwnKVPays); else the two conversion passes run before the
// launch, which then asks for no staging areas: shared memory left
// unasked is the SM's L1). At 16 bits and padded D = 64, where the
// exponentials and sums of the softmax bound the loop rather than the
// tensor cores, P's row sums are a second product beside P·V, P times a
// 1 KB tile of ones (ws_sums_on_tc): they are then the sums of the
// rounded P that P·V multiplies.
// Backward: the
// same two deterministic kernels as the mma.sync family (dK and dV per 128
// keys, dQ per 128 queries), each GEMM a wgmma (WithDeterministic(false):
// plain BF16/FP16 problems at padded D 64 and 128 take one dK/dV kernel
// that also adds dQ's part of its keys into a zeroed float32 accumulator
// in the scratch, one bulk reduction per warpgroup and step from shared
// memory, five products instead of seven, dQ's last bits varying from run
// to run; a last pass writes dQ from the accumulator); every thread
// arrives on the empty barriers, because an mbarrier arrive releases only
// the arriving thread's reads (racecheck flags the LSE and D reads
// otherwise). The copying thread refills the stages of step i − 1 right
// after issuing step i's first products rather than at the end of step
// i − 1, where its warpgroup would wait for the other one every step.
// TF32 at D = 128 streams steps of 32 rows and single-buffers Qᵀ and dOᵀ
// so that two warpgroups fit shared memory (158 against 101 TFLOP/s with
// one), and keeps the late refill, since its next step needs those tiles
// at once.
// The BF16/FP16 backward of a call without lengths writes dO's image in
// the pass that computes D = rowsum(dO∘O) (a warp per image row), so dO
// is read once, not twice. Its plain and fused dK/dV kernels read their
// block of the caller's float32 K and V themselves, each warpgroup
// converting its 64 rows into shared memory as the forward does Q, and
// (but for the fused kernel) write those tiles into the K and V images
// that the dQ kernel reads after them: no conversion pass for K and V
// (kernelParams.KSrc, VSrc).
//
// The Hopper kernels compute the attention variants of kernels.Params
// (csrc/variants.cuh mirrors kernels.Mask and ModifyScore). Each attention
// kernel comes twice: the plain one, tuned, for problems with none of them
// (the causal mask is plain), which traps if launched on one, and a _var
// one that the launchers pick for any other problem, so that the variants
// add nothing to the plain kernels' loops (csrc/sm90_variants.cuh).
// Grouped-query attention: K and V are imaged once per key head, which
// every query head of its group reads; the dK/dV grid runs over key heads,
// each block summing the gradients of its group's query heads in its
// registers, one head after the other in a fixed order, its (head, query
// step) pairs one sequence through the copy pipeline, so results stay
// deterministic without atomics. The _var grids start their longest
// blocks first (groups of 4 heads, tile-major: block_order), which keeps
// the few long dK/dV blocks of grouped-query attention off the end of the
// kernel. Masks (lengths, causal, windows): the forward and dQ walk the
// key tiles from the block's first row's first key to its last real row's
// last, the dK/dV kernel the query steps from its first key's first row
// to its last real key's last, and only tiles where some row misses some
// key are masked element by element. Padding
// rows and rows that see no key get O = 0, LSE = +inf and dQ = 0, padding
// keys and keys no row sees dK = dV = 0; a block with nothing to compute
// writes those zeros and returns before any barrier or copy, and with
// lengths the conversions image each sequence only up to its length
// rounded up to a block, the tiles the kernels read. Score modifiers
// (softcap, ALiBi) act on the scaled score before the mask, in the
// softmax's log2 units; the softcap's tanh is the hardware tanh.approx for
// BF16 and FP16 operands (its 2⁻¹¹ error is within what their rounding
// already costs) and the library's tanhf for TF32. The backward recomputes
// P from the modified score and multiplies dS by the softcap's derivative
// 1 − tanh² before dQ and dK. In the _var kernels the element-wise work on
// a tile is compiled six times and picked per tile: masked and unmasked,
// without modifiers, with them, and with them and the softcap (ALiBi needs
// no copy of its own: a slope of 0 leaves scores as they are; its bias is
// one FFMA per score), and the epilogues stage their rows in shared memory
// to store whole rows.
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
//     the saved LSE; dQ in a separate pass per query tile. Deterministic, like
//     the tensor-core backward.
//
// Head dimensions are compiled for 32, 64, 128 and 256; any other D up to 256
// is padded with zero columns inside the kernel (D = 8, 40, 96, 200 work).
// The CUDA-core kernels are correct rather than fast; they load tiles
// synchronously and compute with scalar FMAs.
//
// # Decoding
//
// A forward with few query rows per key head (a decode step) runs on the
// split-KV kernels of csrc/decode.cuh, a PTX module of its own
// (decode_sm80.ptx), on every device:
//   - One warp is one unit: (key head, a tile of the rows of its group,
//     key split). Keys and values stored in bf16 or fp16 (a cache's format
//     at BF16 and FP16) run on tensor cores, 16 rows to a unit; float32
//     and float64 run on CUDA cores, exactly, one row or eight to a unit.
//   - It reads the keys and values in place, dense or through a block
//     table (kernels.Pages), three or two chunks of 16 keys ahead; dense
//     rows aligned to 16 bytes, the common case, are copied from per-lane
//     pointers made once per unit (DenseLane).
//   - It writes o and the LSE, or with several splits partial results
//     that a merge kernel (a block per 32 columns of a row) combines
//     through their log-sum-exp.
//   - decodeSplits (decode.go, a pure function with a table test) picks
//     the splits from the units and the device's multiprocessors;
//     BenchmarkDecodeSplitCountsGPU times the choices around it.
//
// Every paged forward of the backend runs there; a backward refuses
// pages. Backend.NewCacheStore keeps a key/value cache's rows in device
// memory (kernels.CacheStore): a step uploads its new rows, one kernel
// writes them into the store, and the units attend. Cache formats follow
// the precision (bf16 for BF16, fp16 for FP16, float32 otherwise). The
// decode benchmark is Backend.DecodeKernelTime beside Backend.ReadCeiling
// (a pure read of device memory, over a few GiB for the sustained rate and
// over a step's own bytes for the floor of a step that size).
//
// # Kernel arguments: Params
//
// Every attention kernel (forward, dK/dV, dQ of each family, D = rowsum(dO∘O)
// and the Hopper statistics) takes one argument, struct Params of
// csrc/params.cuh, by value (__grid_constant__, so it is read in place):
// the pointers of both directions (q, k, v, o, lse, dout, delta, dq, dk, dv
// and the Hopper backward's transposed images and padded statistics), batch,
// head and row strides of q, k, v, o, dout, dq, dk and dv, the sizes b, h,
// nq, nk, dim, the causal flag and the scale. Every field is 8 bytes, so the
// Go mirror kernelParams (params.go, uint64 for pointers) has the same
// layout without padding rules; TestParamsMirror parses the C header and
// compares field names, order and types on the CPU, and static_asserts pin
// the size in C. newParams builds it, the one place that does, from
// kernels.Params and the named tensors of a launch; gorgonia.org/cu copies
// 8 bytes per argument, so launch_gpu.go passes it with cuLaunchKernel's
// parameter buffer. A new mask or score modifier is one field on each side.
// The element-wise conversions keep short argument lists: they see flat
// dense matrices and nothing of the attention problem.
//
// # Kernel selection
//
// choose (select.go) is one pure function from the device (Capability:
// compute capability and opt-in shared memory), the family asked for, the
// precision, the element type, the head dimension and the direction to the
// family (CUDA cores, mma.sync, wgmma), the padded head dimension and the
// tile shape, or the error a call gets. The backend loads the kernels of
// every choice when it opens (registry_gpu.go) and asks choose again on
// every call; TestChoose covers the table, with each fallback, on the CPU.
//
// Measurements come first where they exist: a FamilyAuto backend on a GPU
// model with a tuning table in tuned/ (TuneTable, one JSON file per model,
// matched by device name and compute capability; or the table given with
// WithTuneTable) takes, for TF32, BF16 and FP16 calls without a bias or
// dropout, the kernel the table timed fastest for that precision, padded
// head dimension, causal mask and direction at the timed length nearest
// the call's query count (chooseTuned); everything else, and every GPU
// without a table, keeps choose's heuristic. The candidates are the two
// families' kernels and, for the Hopper forward where its plain kernel is
// the warp-specialized one, the row-block kernel (128 query rows, no
// producer warpgroup) and at D = 64 the warp-specialized kernel with two
// consumer warpgroups (128 rows) beside it: at D = 64 the default block
// takes 192 rows, which pads a sequence of 512 or 1024 queries by an
// eighth; and each persistent kernel's form that takes its K and Vᵀ
// images from the conversion passes even where wgmmaFwdOwnKVPays would
// have it convert them (candidate.passes, "-passes"). Tune (the flashtune
// command) times every candidate on the
// device at several lengths, for every kind of call where two of them
// differ, and writes the table with every time that decided. Committed:
// the H100's (tuned/h100.json, 2026-12-07, thirty-eighth session). It
// takes the two-consumer forward at BF16/FP16 D = 64 for N ≤ 2048 and
// causal N ≤ 4096 (the causal N = 2048 forward 13.5 % faster in the
// thirty-fifth session's run), which the heuristic of every FamilyAuto
// backend makes a rule (wgmmaWS2Pays), so that the table and the heuristic
// now differ only within noise (tuned/README.md). The H200 has no table:
// it runs the heuristic, that rule included, untimed on it.
// The Go files follow csrc/: fwd_simt_gpu.go, bwd_simt_gpu.go,
// fwd_mma_gpu.go, bwd_mma_gpu.go, fwd_wgmma_gpu.go and bwd_wgmma_gpu.go
// launch one family and direction each, convert_gpu.go the conversions, and
// shapes.go repeats the C side's tile shapes and shared-memory layouts.
//
// # Speed
//
// bench/RESULTS.md holds the measurements (H200, bench/gpu_side_by_side.py:
// this package's KernelTime beside PyTorch's SDPA in one command), and
// NOTES.md what was tried and what to try next.
//
// # Generated files and the staleness check
//
// ptx/flash_sm80.ptx (from csrc/flash.cu) and ptx/flash_sm90a.ptx (from
// csrc/hopper.cu) are generated by gen.sh (nvcc -O3 -std=c++17 --ptx,
// -arch=compute_80 and compute_90a; LINEINFO=1 adds -lineinfo for
// profiling), each with a "Code generated ... DO NOT EDIT." header, and
// embedded into the tagged build; the loader loads compute_80 on every
// device, and compute_90a beside it on 9.0 for the Hopper family, and the
// driver compiles the PTX when the modules load. kernels.manifest records
// the sha256 of gen.sh, of every file under csrc/ and of each PTX file.
// TestGeneratedKernelsUpToDate, a plain CPU test in the default build,
// fails when any of them differs, so changing a .cu file without
// regenerating breaks `go test ./cudakernels`.
//
// To regenerate, run `go generate ./cudakernels` where nvcc exists. The
// committed files come from nvcc 12.4 on the development machine, which has
// no GPU: nvcc-debian.sh installs that compiler from Debian's packages.
// devpack.sh builds the tagged test binaries on the development machine and
// packs them for the GPU machine, where devrun.sh tests the PTX under ptx/
// (through FLASHATTN_KERNEL_DIR, which the tests pass to WithKernelDir):
// every conformance suite, the other GPU tests and compute-sanitizer on
// small cases, in parallel.
//
// # Tests
//
// The tagged tests skip when no device is present, and a family's subtests
// skip on a device that cannot run it. They run the shared conformance
// suite (kernels/conformance) in every precision and, for the tensor-core
// precisions, in each kernel family (TestConformanceFP32, TF32, BF16, FP16),
// head dimensions 32 to 256 and Nq ≠ Nk likewise (TestHeadDims), the
// float32-level cancellation of one-key rows (TestLowPrecisionOneKey), the
// errors past D = 256, the
// copy pipeline's bit-identical results and device-state checks, device
// memory over 100 forward and backward calls and after Close
// (TestDeviceMemoryStable), and out-of-memory, too-large and missing-device
// errors after which the backend keeps working (TestErrorsOnDevice).
// Package op checks the float64 GPU path's gradients against finite
// differences through whole graphs (TestGPUFiniteDifferences).
// devrun.sh runs them all against freshly generated PTX, with
// compute-sanitizer memcheck and racecheck on small cases.
package cudakernels
