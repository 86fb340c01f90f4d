// Package op is the public face of this module: Attention, a Gorgonia op for
// exact fused attention, softmax(scale·Q·Kᵀ + mask)·V, that never builds the
// Nq×Nk score matrix, forward or backward.
//
// # Shapes
//
//	q       [B, H, Nq, D]
//	k, v    [B, Hkv, Nk, D]   Hkv dividing H
//	result  [B, H, Nq, D]
//
// Nq and Nk may differ (cross-attention; decoding with Nq = 1). All three
// inputs share one dtype, Float32 or Float64. Every dimension must be at
// least 1: Nk = 0 is rejected rather than given a meaning, since a softmax
// over no keys is undefined.
//
// # Masking
//
// WithCausal(true) applies a bottom-right aligned causal mask, as in
// FlashAttention ≥ 2.1: query i sees key j if and only if j ≤ i + (Nk − Nq).
// With Nq > Nk the first Nq − Nk query rows see no key; their output and
// their gradient are 0, never NaN.
//
// # Variants
//
// Grouped-query and multi-query attention need no option: k and v with Hkv
// heads, Hkv dividing H, serve query head h from key head h/(H/Hkv), without
// repeating K or V; their gradients have k's shape, summed over each group.
// The options below compose with each other, with WithCausal, with both
// dtypes and with both machines:
//
//   - WithWindow(left, right): row i sees keys j with a − left ≤ j ≤
//     a + right, a = i + Nk − Nq (the causal mask's alignment); −1 leaves a
//     side unbounded. Rows left without keys give 0, as above.
//   - WithSoftcap(c): scores become c·tanh(s/c) after the scale; 0 is off.
//   - WithALiBi(slopes): one slope per query head; scores lose
//     slopes[h]·|a − j| after the softcap.
//   - WithLayout(BNHD): q, k, v and the output in [B, N, H, D], copied to
//     and from the kernels' [B, H, N, D] by the op.
//   - AttentionLSE returns the log-sum-exp of every row beside the output,
//     both differentiable (the LSE's gradient on the CPU only, for now).
//   - WithDropout(p, seed): attention dropout for training; run r of the
//     node draws mask r of the seed's sequence (fresh every step,
//     reproducible from the seed), and its backward draws it again.
//   - WithLengths(qLens, kLens): integer vector nodes [B] read at every
//     run. Rows i ≥ qLens[b] and keys j ≥ kLens[b] are padding: output 0,
//     gradients 0 whatever the incoming gradient holds there; the kernels
//     skip padded blocks. With lengths, a = i + kLens[b] − qLens[b], per
//     sequence, for the causal mask, the window and ALiBi alike.
//   - WithBias(bias): an additive bias node [Bb, Hb, Nq, Nk] (Bb 1 or B,
//     Hb 1 or H, broadcast over a 1; in either layout), differentiable:
//     its gradient dS is summed over the broadcast dimensions, 0 at masked
//     and padding pairs, and bit-identical from run to run. It is the one
//     Nq×Nk input, read in place; dBias is the one Nq×Nk result.
//
// The order is: s = scale·q·k, softcap, − ALiBi, + bias, masks (causal,
// window), softmax over the visible keys. A masked key stays masked
// whatever its bias; a −Inf bias removes a key like a mask would, but a
// row whose visible keys all have −Inf gets NaN, as naive attention does,
// not the zeros of a row without keys. The kernels package documentation
// (Variants) gives the exact semantics. They run on the CPU backend; on the
// GPU, what each precision computes is in the README's table (the CUDA
// cores, FP32 and float64, compute them all, with the CPU's dropout mask
// bit for bit). A GPU run of a node that uses one its kernels
// do not compute fails with an error wrapping cudakernels.ErrUnsupported,
// never with another problem's result.
//
// # Saved state and memory
//
// The forward keeps the per-row log-sum-exp LSE = m + log l ([B, H, Nq]) for
// the backward, in state shared by the op and its backward nodes (package
// autograd). The backward recomputes the attention probabilities block by
// block from Q, K, V, O, dO and LSE. Memory is O(N) in the sequence length:
// see bench/RESULTS.md for the measured figures. A bias is the exception
// the user chose: it is Nq×Nk, and so is its gradient, which the backward
// allocates (on the TapeMachine that is the only such buffer; the
// LispMachine adds the gradient into the bias node's own, a second one).
//
// On the GPU (or any backend implementing kernels.Resident) the forward of a
// node whose gradient has been built with gorgonia.Grad also keeps its device
// copies of Q, K, V, O and LSE (O(N) device memory), so the backward uploads
// only dO. The backward releases them when done, so a training step ends
// holding no device memory for attention; a forward that runs again releases
// its previous copies; Release(g) frees them on demand (say after a step that
// failed between forward and backward); CloseGPU frees everything; and the
// garbage collector releases what a dropped graph still held. A graph run
// only forward keeps nothing. Under the LispMachine the backward uploads its
// inputs again.
//
// # Generation: the key/value cache
//
// A model generates one token at a time. NewKVCache makes a cache for B
// sequences of up to capacity tokens (one per attention layer), and an
// Attention node built WithKVCache(cache) takes k and v as the new tokens
// only: each run appends them and attends q, the new rows, to everything
// cached, so the prompt goes through once (a prefill graph of T = the
// longest prompt, with WithLengths(qLens, nil) for prompts of different
// lengths) and each further token through a graph of T = 1, instead of
// the whole context again per token:
//
//	cache, err := op.NewKVCache(B, Hkv, D, capacity, tensor.Float32)
//	defer cache.Close()
//	out, err := op.Attention(q, k, v, op.WithCausal(true), op.WithKVCache(cache))
//
// With WithCausal(true) new row i of sequence b, which holds L_b tokens
// after the append, sees keys j ≤ L_b − qLens[b] + i: step for step, the
// rows full causal attention over the sequence gives (float64 within 1e-10;
// float32 within twice a naive float32 computation's error). Windows,
// softcap, ALiBi and grouped heads align the same way. cache.Len(b) is
// sequence b's length, Reset empties all sequences and ResetSequence(b)
// one, so that a finished sequence's slot takes a new prompt while the
// others go on. A run that would pass the capacity is an error that
// appends nothing; a run that fails otherwise undoes its append.
//
// A dense cache holds B·Hkv·capacity·D elements for K and as many for V
// from the start (Bytes). CachePageSize(n) pages it instead: sequences
// take pages of n tokens from one pool as they grow (a block table each,
// kernels.Params.Pages), the pool grows on demand, and a reset hands
// pages back, so sequences of very different lengths hold the pages of
// their tokens rather than B × capacity. The CPU reads the pages in place.
//
// A decode step has few query rows per key head, where the kernels' usual
// parallelism over query blocks would leave the cores idle: the CPU
// backend then splits the cached keys (kernels.SplitKV, a function of the
// problem alone, so results never depend on the machine) and merges the
// splits' partial results through their log-sum-exp
// (kernels.MergePartials), reading every cached key and value once per
// step for all the query heads that share it. A step is memory bound: it
// reads the cache, 2·Hkv·L·D elements per sequence of L tokens per layer;
// bench/RESULTS.md has the bandwidth it reaches.
//
// By default the cache lives in host memory, for an op on the CPU.
// CacheDevice(GPU) puts it in the GPU's memory, for ops on the GPU (a
// binary without the flashgpu tag, or a machine without a device, gets an
// error wrapping ErrNoGPU):
//   - Format: the op's precision decides it: bf16 for BF16, fp16 for
//     FP16, float32 for FP32 and TF32, float64 for Float64 tensors.
//   - Allocation: at the first run, on that op's backend. Ops of another
//     backend (another precision) are refused after that.
//   - Kernels: every step, the prefill included, runs on the GPU's
//     split-KV decoding kernels (package cudakernels).
//   - A step moves q, k and v of its new tokens to the device and o and
//     the LSE back: (B·H + 2·B·Hkv)·T·D elements up and B·H·T·(D+1)
//     down. Beside them go 8 bytes per new row for its place, 4 bytes per
//     sequence per length vector (the cache's lengths always, the new
//     rows' with WithLengths), 8 per query head with ALiBi and, when
//     paged, 4 bytes per page of the longest sequence, per sequence. The
//     cache never moves. (cudakernels' TestCacheStoreGPU counts the
//     copies against this formula.)
//
// A host cache with a GPU op, and a GPU cache with a CPU op, are errors
// wrapping ErrInvalidInput. A cached node is
// inference only: differentiating through it (gorgonia.Grad, the
// LispMachine's backward) is an error. Key lengths, dropout, a bias, a
// nil or closed cache and a cache of another batch, head count, head
// dimension or dtype than k and v are errors wrapping ErrInvalidInput.
//
// # Differentiation
//
// The node works with gorgonia.Grad and a TapeMachine (SymDiff) and with a
// LispMachine (DoDiff). Second derivatives are not supported. A graph holding
// the op must not be run by two machines at once, since the saved LSE
// belongs to the node.
//
// # Errors
//
// Attention checks its inputs while the graph is built and returns an error
// wrapping ErrInvalidInput for a nil node, nodes of different graphs (or
// only constants, which belong to none), a rank other than 4, mismatched B
// or D, k's head count not dividing q's, k and v of different shapes, mixed
// or non-float dtypes, a zero dimension, a scale that is NaN, infinite, or
// not representable in the inputs' dtype (float32 overflows past 3.4e38 and
// flushes below 1.4e-45), a window bound below −1, a negative, NaN or
// infinite softcap, ALiBi slopes that are not H finite numbers, or a bias
// that is nil, not of rank 4, not of q's dtype or graph, or of a shape that
// does not broadcast to [B, H, Nq, Nk].
// Constant inputs (gorgonia.NewConstant) are accepted and receive no
// gradient. Each run checks again that the values bound to q, k and v have
// the shapes and dtype the node was built for (the bias's too): a value
// reshaped in place, or bound with another shape, is an error wrapping
// ErrInvalidInput, never reinterpreted.
//
// # Devices and backends
//
// Where the op runs is chosen when Attention builds the node, first match
// wins:
//
//  1. WithBackend(b): any kernels.Backend, owned (and closed) by the caller.
//  2. WithDevice(CPU or GPU), else the environment variable FLASHATTN_DEVICE
//     ("cpu" or "gpu", any case). Unset or empty means CPU: the pure-Go
//     backend (package cpukernels), which needs no cgo and no device.
//
// GPU means CUDA device 0 through package cudakernels, in a binary built
// with the tag flashgpu. Its float32 arithmetic is WithPrecision, else
// FLASHATTN_PRECISION ("fp32", "tf32", "bf16" or "fp16"), default FP32; float64
// tensors always compute in float64, and the CPU ignores the precision.
// Without the tag, asking for the GPU returns an error wrapping ErrNoGPU
// that names the tag; with it and no device, an error wrapping both
// ErrNoGPU and cudakernels.ErrNoDevice. Unknown values of the variables are
// errors wrapping ErrInvalidInput. Nothing panics.
//
// The GPU backend is opened on first use and shared by every node of the
// process that asks for the same precision. CloseGPU closes it and frees all
// its device memory; nodes built before then fail when run, and later ones
// open a fresh backend. Each run of the node copies Q, K and V to the device
// and O back (and dO, dQ, dK, dV for the backward) on two streams, in
// chunks of heads so that copies overlap the kernels: from and to the
// tensors' own memory where the driver has it registered (a tensor's
// backing array seen in an earlier run), else through page-locked staging
// (see cudakernels/doc.go and bench/RESULTS.md).
//
// Errors from the GPU (out of device memory wrapping
// cudakernels.ErrOutOfMemory, an unsupported head dimension wrapping
// cudakernels.ErrUnsupported) come back from the machine's RunAll; the
// process and the backend keep working. Gorgonia v0.9.18's machines return
// an op's error inside an error type without Unwrap, which hides it from
// errors.Is; Cause recovers it:
//
//	if err := m.RunAll(); errors.Is(op.Cause(err), cudakernels.ErrOutOfMemory) { ... }
package op
