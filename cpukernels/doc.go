// Package cpukernels is the pure-Go attention backend: a FlashAttention-2
// style forward and a recomputing backward, parallel over goroutines, with
// their inner loops in package internal/simd (assembly on amd64, portable Go
// elsewhere or with the noasm build tag).
//
// # Forward
//
// One work unit is a block of Br query rows of one (batch, head). It loops
// over tiles of two blocks of Bc keys (up to four for fewer rows): S =
// (scale·Q_i)·K_jᵀ through a GEMM per key block on Kᵀ
// transposed once per call, then the online softmax updates the running row
// maximum m and row sum l, rescales the output accumulator (the unit's
// rows of O themselves) by exp(m_old − m_new) and adds P·V_j. The loop covers only the keys some row of the unit
// sees, from the first row's kernels.Mask.KeyRange start to the last
// row's end (a causal mask ends it early, a window also starts it late,
// inside a block if need be). Under a window bounded on the left, whose
// rows each see a band of keys that moves with the row, the unit runs in
// panels of 16 rows, each over its own band, so that the GEMMs compute 15
// rather than Br − 1 keys per row that the row does not see. At the end
// O = acc / l and LSE = m + log l; a row that sees no key by the mask gets
// O = 0, LSE = +Inf.
//
// Units are handed out dynamically, longest first where a causal mask
// makes them uneven: heads in bands of about 64 units, and within a band
// the row blocks from the last (forwardUnit); the backward's key chunks
// chunk-major, every head's first (longest) chunk before any second one
// (backwardUnit). The order never changes a result.
//
// # Decoding
//
// A problem with at most 64 query rows per key head (H/Hkv · Nq, a decode
// step's few new tokens) and no bias or dropout takes the decode path
// (decode.go) instead. One work unit is a (key head, key split): it holds
// every query row of the key head's group at once and, for each block of
// its keys, takes the scores and P·V of all those rows in one product
// each, on K and V where they lie, so each cached key and value row is read
// from memory once per call, not once per query head. The scores are
// S = Q·Kᵀ by simd.GemmNT32 for a group below 16 rows where it has a vector
// path (float32 on AVX-512), which vectorises along the keys, else
// Sᵀ = K·Qᵀ by the GEMM on the group's rows transposed; the two give the
// same bits, those the backward recomputes. The keys are split into
// kernels.SplitKV(p, 64) ranges, a function of the problem alone (never of
// Workers or the machine, so results stay bit-identical everywhere), so
// that one long sequence keeps every core busy; each split writes partial
// outputs and LSEs in float64, merged per row by kernels.MergePartials in
// split order. Paged keys (kernels.Params.Pages) are read in place, a
// page's run of rows at a time; a paged problem outside the decode path (a
// long prompt) gathers its keys into dense K and V once and runs the tiled
// forward.
//
// # Variants
//
// Grouped-query attention indexes K and V by the query head's key head
// (kernels.Params.KVHead) and never copies them. Per-sequence lengths
// shorten the work, not only the masks: a forward unit computes only its
// real rows and its loop ends at the last real key its rows see, a backward
// key block only its real keys, and query blocks past a sequence's last
// real row are never visited. The softcap and ALiBi
// change the visible scores of a tile between the GEMM and the online
// softmax; the softcap's tanh is, for float32, simd.Softcap32 (an odd
// polynomial near 0, 1 − 2/(1 + exp(2|s|/c)) further out, in float32 with
// AVX-512), and for float64 1 − 2/(1 + exp(2s/c)) through the vectorised
// exponential (an overflow to +Inf gives exactly 1). Dropout's
// forward draws each row's 16-bit Philox draws (kernels.Dropout.RowWords) and
// applies the mask with a vector comparison and a zero-masked product
// (simd.DropScale32); the backward, which reads the mask by keys, draws
// the words eight rows at a time and transposes them in registers
// (simd.TransposeBits32), so that each key's rows take the same vector
// comparison. In the
// backward a work unit is a chunk of one key head's blocks, and it loops
// over the query heads of its group, so dK and dV of the group sum in one
// accumulator in head order (deterministic, no atomics). Only the query
// blocks that see a key block (kernels.Mask.QueryRange) are visited. With
// a softcap the backward cannot fold −LSE into the score GEMM, because
// tanh comes between: it subtracts LSE per score after the cap and
// multiplies dS by 1 − tanh².
//
// An additive bias (kernels.Params.Bias) is read where the caller keeps it,
// never copied whole: without a softcap a tile's bias is where the scores'
// GEMM starts (the forward copies its rows in, the backward transposes it
// into its key-major Sᵀ tile, as the bias is stored by rows), and with one
// the visible entries are added after the softcap and ALiBi. The backward
// gathers dS = P∘(dP − D) of a tile in a Bc×Br scratch tile that it writes
// into dBias by rows: the first query head of a slice stores (and writes 0
// where none of its tiles reach), later ones add. dBias of a bias broadcast over the
// batch or the heads sums over key heads that would be separate work
// units; those key heads are then one unit (keyGroups in backward.go), so
// that every element of dBias is summed by one goroutine in one order:
// deterministic, with no atomics and no Nq×Nk scratch, at the cost of
// fewer parallel units (down to the key chunks alone for a bias shared by
// every head).
//
// # NaN and infinities
//
// The results follow the rules of the kernels package doc. The running
// maximum skips NaN scores, whose exponentials then make l, and so O and
// LSE, NaN. While a row has no finite maximum (its scores so far are −Inf
// or NaN, or one is +Inf) online softmax has no finite shift, and the row
// is kept apart: a NaN makes l NaN, +Inf poisons acc and l, and scores
// that stay −Inf end as acc = l = 0, O = 0·∞ = NaN, LSE = −Inf.
//
// A tile cut by a mask (causal or window) holds probabilities of exactly 0
// for the pairs the mask hides, and a blocked product would still turn
// 0·Inf or 0·NaN from a hidden operand into NaN. So a cut tile with a
// non-finite operand runs its products row by row over the visible pairs.
// Whether a block of V (forward) or of Q and dO (backward) is finite is
// found once per call under a window, which cuts most tiles; under a causal
// mask alone, which cuts about one tile per row of tiles, when a cut tile
// asks; without a mask, which cuts none, never, so that plain attention
// pays for no scan. K is scanned per key block when a cut tile asks.
// Finite inputs, the normal case, never take the row-by-row path.
//
// # Backward
//
// D_i = rowsum(dO∘O) first, packed with (scale·Q)ᵀ and dOᵀ per query block.
// Then one work unit is a chunk of key blocks of one (batch, head): for each
// key block it adds up dK_j and dV_j in place in the outputs and loops over
// the query blocks that can see it, recomputing P = exp(S − LSE) and
//
//	dV_j += Pᵀ·dO_i,  dP = dO_i·V_jᵀ,  dS = P∘(dP − D_i),
//	dK_j += scale·dSᵀ·Q_i,  dQ_i += scale·dS·K_j.
//
// It works on transposed tiles (Sᵀ, Pᵀ, dSᵀ, one row per key) so that every
// product is a row-major GEMM without per-tile transposes, accumulates dQᵀ,
// and folds −LSE and −D into the score GEMMs as one extra inner dimension.
// Under a window bounded on the left, a tile that the masks cut (a Br×Bc
// tile whose keys each see a band of rows that moves with the key) runs
// by panels of 16: Sᵀ, dPᵀ, dV and dK by panels of keys, each over the
// rows its keys see, and dQᵀ by panels of rows, each over the keys its rows
// see, so that the GEMMs compute at most 15 hidden rows per key (keys per
// row) rather than up to Br − 1 (Bc − 1). The bits do not change: a GEMM sums
// an element's products from zero in inner order and adds C after, and
// what a panel leaves out of an inner sum are exact zeros at its ends (the
// masked P and dS, against finite operands: tiles with a non-finite one
// take the row-by-row path).
//
// dQ_i receives contributions from every chunk. To stay deterministic without
// atomics, each chunk adds into its own dQᵀ buffer and the buffers are summed
// in chunk order at the end. The number of chunks depends only on the
// problem's shape (never on the number of goroutines), so results are
// bit-identical from run to run and across machines with the same assembly
// path. It is at most maxKeyChunks, so the extra memory is at most
// maxKeyChunks copies of dQ: O(N), never O(Nq·Nk).
//
// # Memory
//
// Per call: one transposed copy of K (forward); transposed copies of Q and
// dO, each with one extra row, and up to maxKeyChunks dQᵀ buffers
// (backward); per worker, a few tiles of at most Br×2Bc and Bc×(D+1)
// elements. A bias and its gradient are the caller's: the kernels add no
// buffer of their size. Every packed block is stored with its actual number of rows or
// keys as its stride, never padded to Br or Bc, so the total is a bounded
// multiple of the data (under twice the bytes of all nine tensors, plus the
// tiles) for any shape, however many heads of short sequences. Nothing of
// size Nq×Nk is allocated. These per-call buffers are recycled from call to
// call through a sync.Pool (workspace.go), so a training loop that calls
// the kernels on the same shapes neither faults in fresh pages nor feeds
// the collector tens of megabytes per step; the pool holds nothing that no
// call has used since the last two collections.
//
// Before allocating, Forward and Backward ask internal/hostmem whether that
// memory can still exist (the Go memory limit, the cgroup limit,
// MemAvailable), and return an error wrapping kernels.ErrOutOfMemory if it
// cannot, instead of letting the runtime end the process. This is a
// pre-check, not a guarantee: memory taken by others meanwhile can still
// make an allocation fail.
package cpukernels
