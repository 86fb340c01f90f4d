// Params is the one argument of every attention kernel (forward, backward,
// D = rowsum(dO∘O) and the Hopper statistics): the problem, the mask and every
// tensor of both directions. A new attention variant (another mask, a bias, a
// layout) adds fields here and to the Go mirror (params.go's kernelParams),
// not to a dozen argument lists.
//
// Every field is 8 bytes (a pointer, a long long or a double), so the struct
// has no padding and the Go mirror, written with uint64, int64 and float64 in
// the same order, has the same layout; TestParamsMirror (params_test.go)
// parses this file and compares, and the static_asserts below pin the sizes.
// Kernels take it by value: the launcher (launch_gpu.go) passes its bytes as
// the kernel's parameter buffer (CU_LAUNCH_PARAM_BUFFER_POINTER).
//
// Tensors are as the kernel reads them: the float32 or float64 tensors of the
// caller for the CUDA-core kernels, the converted copies (rows padded to the
// compiled head dimension) or tile images for the tensor-core ones. Strides
// are in elements. The CUDA-core kernels address every tensor through its
// batch, head and row strides; the tensor-core kernels address their outputs
// (o, dq, dk, dv) through theirs and their converted operands densely, as the
// conversions wrote them. lse and delta are [b, h, nq], dense.
#pragma once

namespace flash {

struct Params {
  // Forward: q, k, v in; o and lse (natural log) out.
  const void* q;
  const void* k;
  const void* v;
  void* o;
  void* lse;
  // Backward: dout and lse in (with q, k, v, o), delta = rowsum(dO∘O)
  // written by dot_do_o, gradients out.
  const void* dout;
  void* delta;
  void* dq;
  void* dk;
  void* dv;
  // The Hopper backward's extra inputs: transposed images of Q, K and dO,
  // and the LSE in log2 units and D padded to whole blocks (prep_stats).
  const void* q_t;
  const void* k_t;
  const void* dout_t;
  void* lse_log2;
  void* delta_pad;

  long long q_batch_stride, q_head_stride, q_row_stride;
  long long k_batch_stride, k_head_stride, k_row_stride;
  long long v_batch_stride, v_head_stride, v_row_stride;
  long long o_batch_stride, o_head_stride, o_row_stride;
  long long dout_batch_stride, dout_head_stride, dout_row_stride;
  long long dq_batch_stride, dq_head_stride, dq_row_stride;
  long long dk_batch_stride, dk_head_stride, dk_row_stride;
  long long dv_batch_stride, dv_head_stride, dv_row_stride;

  // Sizes: b batches of h heads, nq queries, nk keys, dim columns (the
  // compiled head dimension DP ≥ dim is a template parameter).
  long long b, h, nq, nk, dim;
  // Mask: bottom-right aligned causal when nonzero (common.cuh).
  long long causal;
  // Softmax scale applied to Q·Kᵀ.
  double scale;

  // The attention variants of kernels.Params (variants.cuh reads them);
  // zeros and nulls are plain attention. A launch computes the (batch,
  // head) pairs pair0 … pair0 + b·h − 1 of its call, whose batch entries
  // have `heads` query heads each: pair = batch·heads + head, from which
  // the lengths, the ALiBi slope and the dropout counter are found.
  long long pair0, heads;
  // Grouped-query attention: query pair bh of the launch reads key pair
  // bh / kv_group of k, v, dk and dv (1: a key head per query head). A
  // launch starts on a group boundary, so that holds from its first pair.
  long long kv_group;
  // How far before and after its aligned position a row sees (the window;
  // the causal mask is right = 0), −1 where unbounded.
  long long mask_left, mask_right;
  // Per-sequence lengths: int [batch entries of the call], or null (all
  // nq rows, all nk keys real).
  const void* q_lens;
  const void* k_lens;
  // ALiBi slopes, double [heads], or null; the softcap, 0 when off.
  const void* alibi;
  double softcap;
  // The gradient of the LSE, [b, h, nq] dense like lse, or null:
  // dot_do_o then writes D − dLSE.
  const void* dlse;
  // Dropout (kernels.Dropout, philox.cuh): entries whose Philox word is
  // below dropout_threshold (a uint32; 0 is off) are dropped, the others
  // scaled by dropout_scale = 1/(1−p); the 64-bit seed and the run's
  // offset (its low 32 bits) key and place the counter.
  long long dropout_threshold, dropout_seed, dropout_offset;
  double dropout_scale;
  // The additive bias (kernels.Bias), [Bb, Hb, nq, nk] of the whole call
  // in the kernels' element type, or null: query pair (batch b, head h)
  // reads the slice at b·bias_batch_stride + h·bias_head_stride (0 for a
  // broadcast dimension), rows nk apart. dbias, when not null, receives
  // its gradient (dbias_1tile): dS summed over the pairs of each slice.
  const void* bias;
  void* dbias;
  long long bias_batch_stride, bias_head_stride;

  // Decoding (decode.cuh). Paged keys (kernels.Pages): with page_size > 0,
  // k and v are pools [pages, h / kv_group, page_size, dim] and key j of
  // batch entry b is row j mod page_size of page
  // block_table[b·table_stride + j / page_size] (int); dense otherwise.
  const void* block_table;
  long long table_stride, page_size;
  // Key splits per unit of the split-KV forward, and where units write
  // their partial outputs [rows, splits, dim] and (lse, seen) pairs
  // [rows, splits, 2] when splits > 1 (rows: every key head's group rows).
  long long splits;
  void* part_o;
  void* part_lse;
  // The key/value cache's append: new rows k_new and v_new
  // ([b, h / kv_group, nq, dim], dense) go to rows dest_rows[n] (long long
  // element offsets into k and v, −1: not appended).
  const void* k_new;
  const void* v_new;
  const void* dest_rows;
  // The persistent forward's counters (fwd_wgmma_ws.cuh), ints zero at
  // launch: the item counter, from which blocks take their items after the
  // first, and with k_src the K/V conversion's task counter and a count
  // per (head, key tile) of its tasks done.
  void* work_counter;
  // The float32 K and V as the caller passed them (dense
  // [b · h / kv_group, nk, dim]), for the kernels that make the images k
  // and v themselves, in place of the conversion passes: the plain 16-bit
  // dK/dV kernels (bwd_wgmma.cuh's dkdv_body), which convert their own
  // block of keys and, but for the fused kernel, write it into the images
  // for the dQ kernel; and the persistent warp-specialized forward
  // (fwd_wgmma_ws.cuh's KVConverter: dim a multiple of 4, 16-byte aligned;
  // p.work_counter then holds its counters too). Null for every other
  // kernel, and for those two where the host converted K and V.
  const void* k_src;
  const void* v_src;
  // The fused Hopper backward's dQ sums (bwd_wgmma.cuh's reduce_dq):
  // float32 [b, h, nq padded to 128, dim padded to DP] in the order the
  // accumulators hold them, zero at launch; dq_from_accum then writes dq.
  // Null for every other kernel.
  void* dq_accum;
};

static_assert(sizeof(Params) == 77 * 8, "Params: every field is 8 bytes; update params.go's kernelParams too");
static_assert(__builtin_offsetof(Params, q_batch_stride) == 15 * 8, "Params: pointers come first");
static_assert(__builtin_offsetof(Params, b) == 39 * 8, "Params: strides before sizes");
static_assert(__builtin_offsetof(Params, scale) == 45 * 8, "Params: scale ends the plain problem");

// head_of returns the address of head bh = batch·h + head of a tensor with
// the given batch and head strides (in elements of T). bh and h fit 32 bits
// (bh < the grid's 2³¹ blocks): a 32-bit division is a few instructions, a
// 64-bit one a subroutine whose registers spilled in the mma.sync forward.
template <typename T>
__device__ __forceinline__ T* head_of(T* base, long long bh, long long h, long long batch_stride,
                                      long long head_stride) {
  const unsigned b = static_cast<unsigned>(bh) / static_cast<unsigned>(h);
  const unsigned hd = static_cast<unsigned>(bh) - b * static_cast<unsigned>(h);
  return base + b * batch_stride + hd * head_stride;
}

}  // namespace flash
