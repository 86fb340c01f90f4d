// Package ring is sequence-parallel attention, ring attention: R ranks
// (devices, or goroutines) each hold a block of one sequence; the key and
// value blocks travel around the ring while every rank attends its own
// queries to the block it holds, and the partial results merge exactly
// through their log-sum-exp. No rank ever holds more than O(N/R) of the
// sequence, and no Nq×Nk buffer exists anywhere, forward or backward.
//
// # Algorithm
//
// Forward, on rank r, for steps s = 0 … R−1: the rank holds the K and V
// of rank (r − s) mod R. It starts sending that block on to rank r+1 (and
// receiving the next from rank r−1) on its own goroutine, then computes,
// through a kernels.Backend, the output O_s and log-sum-exp L_s of its
// queries against the block, and merges them into its running result:
//
//	L = logaddexp(L_acc, L_s),   O = e^(L_acc−L)·O_acc + e^(L_s−L)·O_s
//
// in float64, starting from (O, L) = (0, −Inf). A part of LSE −Inf has no
// weight and is left out rather than multiplied by 0 (see merge). It then
// waits for the transfer, which the compute has hidden if the link is fast
// enough. The result is exact attention over the whole sequence, and the
// global LSE of each row, kept for the backward.
//
// Backward, recomputing: K and V go around the ring once more, and with
// them their gradient accumulators dK and dV. At step s the rank computes,
// with the backend's own backward given the global O and LSE, the exact
// share of its queries in the gradients of the block it holds: the
// kernels recompute P = exp(S − LSE) block by block, and D = rowsum(dO∘O)
// from the global O, so that dQ += its part and dK, dV of the block get
// their part. The rank adds dQ locally and adds its dK, dV contribution to
// the sums that arrive for that block from rank r−1, then passes them on.
// One transfer per step, started before the step's compute, carries the
// next block's K and V and the previous block's dK and dV sums; after the
// last step one more transfer brings every rank its own, complete, dK and
// dV. Sums run in a fixed order around the ring: results are deterministic.
//
// # Shapes
//
// Rank r holds Len = Layout.Len(r) positions of the sequence, in its local
// order (its chunks concatenated):
//
//	q, o, dq, do  [B, H, Len, D]
//	k, v, dk, dv  [B, Hkv, Len, D]   Hkv dividing H (grouped-query attention)
//	lse           [B, H, Len]
//
// Forward and Backward take and return them as flat slices of float32 or
// float64; Attention builds a Gorgonia node of them. Layout.Split and
// Layout.Unsplit move [B, H, N, D] tensors to and from the ranks' shares.
// Lengths may differ between ranks (Contiguous and ZigZag when R does not
// divide N, or any FromChunks layout).
//
// # Layouts and the causal mask
//
// A Layout cuts the global sequence [0, N) into chunks and gives each rank
// some of them. Contiguous gives rank r the r-th of R consecutive chunks.
// Under a causal mask that leaves rank 0 almost idle and the last rank with
// most of the work, so ZigZag is the one to use there: it cuts N into 2R
// chunks and gives rank r chunks r and 2R−1−r, an early one that sees few
// keys and a late one that sees many, so every rank does the same work.
// ForMask picks ZigZag under the causal mask and Contiguous otherwise,
// the default the benchmark uses and the one to use; Forward, Backward and
// Attention take whatever layout they are given.
//
// The causal mask is over global positions: query i sees key j iff j ≤ i.
// The ring computes it chunk pair by chunk pair: chunks are disjoint
// ranges, so a key chunk wholly before the query chunk is unmasked, one
// wholly after it is skipped (no kernel call, no work), and only a chunk
// against itself, where Nq = Nk and the kernels' bottom-right aligned mask
// is the global one, runs with kernels.Params.Causal. Every query sees at
// least its own position, so no row of the whole problem is without keys;
// a block whose rows all see nothing is never computed, so it merges as
// empty by construction, and the kernels' +Inf LSE of rows without keys
// never reaches the merge. A +Inf or NaN that the inputs cause propagates
// as in naive attention.
//
// # What travels
//
// A forward step sends the held block's K and V: 2·B·Hkv·Len·D elements
// (Len the block owner's length), 2·4·B·Hkv·(N/R)·D bytes in float32 for
// an even split. A backward step sends that and the previous block's dK,
// dV sums, twice as much; its first step sends K, V only, its last step
// and the final transfer dK, dV only. Per call a rank sends R−1 blocks in
// the forward and 2R−1 in the backward, plus a 32-byte handshake each
// (below). Ring.Stats records the bytes and the compute time of each step.
//
// # Transport
//
// The algorithm knows the ring only through Transport: Rank, Size,
// SendRecv (send parts to rank+1, receive parts from rank−1, matched in
// call order, returning when both are done) and Fail. LocalRing is the
// plain-Go transport, goroutines and channels in one process, used by the
// tests and the benchmark; NCCL (below) implements the same interface.
// Each transfer runs on its own goroutine so that it overlaps the compute.
//
// # Errors and timeouts
//
// Nothing waits forever. Each transfer has a deadline, Ring.Timeout
// (DefaultTimeout when 0); a transfer that misses it fails with an error
// wrapping ErrTimeout. A rank that fails for any reason, bad input
// (op.ErrInvalidInput), a backend error or a timeout, calls Fail, and every
// other rank's pending and later transfers return at once with an error
// wrapping ErrAborted that names the rank and its reason; every rank's
// Forward, Backward or machine run then returns an error. A failed ring
// stays failed: build a new one (LocalRing) before trying again. Each call
// starts with a handshake, one small transfer, in which every rank checks
// that its predecessor describes the same problem (shapes, dtype, scale,
// mask, layout); a mismatch is an error wrapping op.ErrInvalidInput.
//
// # In a Gorgonia graph
//
// Each rank builds its own graph over its own block and calls Attention
// with its Ring and op.Attention's options (op.WithCausal, op.WithScale,
// op.WithSoftcap and the backend options; the variants that need global
// positions, and the BNHD layout, are refused). The node is differentiable
// under gorgonia.Grad (TapeMachine) and the LispMachine. Running the ranks'
// machines at the same time, one goroutine each, computes exact attention
// over the whole sequence, forward and backward. Every rank's graph must
// hold the same ring nodes in the same order, since transfers are matched
// in order; a graph must not be run by two machines at once. Build the
// ranks' graphs one after the other and run only their machines
// concurrently: gorgonia.Grad is not safe for concurrent use (it shares
// package-level constant nodes between graphs, and the race detector sees
// it).
//
// # NCCL (build tag flashgpu)
//
// In a build with the tag flashgpu, NCCL is a Transport over NCCL, which
// it loads at run time with dlopen (LibNCCL, libnccl.so.2; a missing
// library or entry point is an error wrapping ErrNoNCCL that names it),
// declaring the few entry points it calls. NCCLRing makes the ranks of one
// process driving several GPUs, each on its own locked OS thread; NewNCCL
// joins one rank of a ring of processes, with the NCCL id shared by
// ShareNCCLID (a file every process sees) or any bootstrap of one's own
// (NewNCCLID). Each transfer exchanges a small header first, so that a
// size mismatch is an error rather than a hang, then stages the host
// parts in device buffers and runs ncclSend and ncclRecv as one group on
// the transport's own stream, polling it so that a timeout or a failed
// ring aborts the communicator instead of blocking. TestNCCLRing with one
// rank sending to itself (RING_NCCL_DEVICES="0") passed on an H200
// (2026-12-01, libnccl.so.2 of the machine's /usr/lib/x86_64-linux-gnu):
// the library loads, initialises and completes a ring's forward and
// backward against the float64 reference, and again on 2026-12-02 after
// NCCL and DeviceRing came to share one device thread (context, stream,
// staging buffers). Two ranks ("0,1") have not run: no two-GPU machine
// was lent.
//
// # One GPU, several ranks (build tag flashgpu)
//
// DeviceRing makes R ranks share one CUDA device, each with its own OS
// thread, stream and device buffers: a transfer uploads the sender's parts
// on its stream, copies them device to device into the receiver's buffer
// on the receiver's stream and downloads them there, so that the GPU
// backends, the merges and every transfer's copies run as on a ring of
// devices. It is how the GPU path is tested and timed without several
// GPUs. TestDeviceRing (R = 1 … 4, causal zig-zag and not, grouped heads,
// odd lengths) passed on an H200 on 2026-12-02: float64 within 1e-10 of
// naive attention on the whole sequence, BF16 within twice the error of
// the same backend on the whole sequence at once.
//
// Blocks live in host memory on every transport, as the backends take
// host slices: with a GPU backend each block is uploaded for each kernel
// call. On the H200 that upload, not the kernels, is most of a step:
// BenchmarkDeviceRing measured 20–25 ms for a 16k × 16k forward step alone
// (BF16, H = 16, D = 128), of which the kernels' share at their measured
// rate is about 5 ms. Keeping blocks on the device between steps is what
// a multi-GPU ring needs next (bench/RESULTS.md has the figures).
package ring
