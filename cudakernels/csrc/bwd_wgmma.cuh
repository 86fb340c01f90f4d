// Backward pass for Hopper (sm_90a): warpgroup MMA on tile images brought
// in by bulk copies, fp32 accumulation, float32 gradients out. The same
// algorithm as bwd_mma.cuh (two deterministic kernels, P recomputed from
// the saved LSE, P and dS rounded to the operand type before they
// multiply), on the sm90.cuh layout.
//
// The conversions write each input in tiles of 64 rows (kBwdTile), padded
// with zeros to whole multiples of kBwdPad rows: row images of Q, K, V and
// dO (to_image_rows), the K-major operands of the products that sum over
// D. The products that sum over rows (dV, dK, dQ) read B with the rows as
// K: 16-bit operands take it from the same row images, MN-major (wgmma's
// transpose), while TF32, which wgmma cannot transpose, takes transposed
// images Qᵀ, Kᵀ and dOᵀ (to_image_vt, [DP, 64] per 64 rows, the rows
// permuted in groups of 8 like the forward's Vᵀ): bwd_t_images. Without
// lengths, one pass writes both images of each of Q, K and dO
// (to_image_rows_vt), so each is read once. prep_stats
// writes the LSE in log2 units and D, padded with +inf and 0, so that
// padded queries get P = 0.
//
// Both kernels take two warpgroups per block (64 rows each) and stream the
// other side in steps of STEP rows, double buffered: 64 rows, or for TF32
// at DP = 128, where that would not fit shared memory, 32 (half of each
// image tile), and in dkdv_colblock Qᵀ and dOᵀ single buffered (bwd_tstages:
// loaded once both warpgroups are done with the previous step, they are
// needed only after that step's Sᵀ, dPᵀ and softmax):
//   dkdv_colblock  one block per kBwdBlock keys loops over query steps:
//                  Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (both operands in shared
//                  memory), then dV += Pᵀ·dO and dK += dSᵀ·Q with Pᵀ and dSᵀ
//                  from registers and dO and Q (or dOᵀ and Qᵀ) as B
//                  operands.
//   dq_rowblock    one block per kBwdBlock queries loops over key steps:
//                  S = Q·Kᵀ, dP = dO·Vᵀ, dQ += dS·K (K, or the Kᵀ image).
//   dkdv_colblock with kDQ (the fused backward, plain 16-bit problems at
//                  DP 64 and 128, WithDeterministic(false) on the host):
//                  also dQ's part of its keys, in place of dq_rowblock
//                  and its second S and dP. Each warpgroup stores its dSᵀ
//                  fragments into a shared tile [kBwdBlock keys, STEP
//                  queries] (one 128-byte swizzled row per key), and after
//                  a block barrier each computes scale·dS·K for the step's
//                  queries and half of the columns, with dS and K both
//                  MN-major (the transpose bits of wgmma: the tile and the
//                  K image as they are), stores it into shared memory and
//                  adds it into p.dq_accum, zeroed by the host, with one
//                  bulk reduction a warpgroup (reduce_dq): the sums'
//                  order, and dQ's last bits, vary from run to run. Two
//                  tiles alternate by step, so one barrier per step orders
//                  every reuse; two steps' staging alternate too.
//                  dq_from_accum then writes dq from p.dq_accum.
//
// One thread issues the copies: the block's fixed tiles once, then the
// streamed tiles into two stages with full/empty mbarriers as in the
// forward (dkdv_colblock also reads each stage's LSE and D with plain
// loads, which the empty barrier orders before the next copy only because
// every thread arrives on it). Where every streamed operand has two stages
// (all but TF32 at DP = 128: bwd_early_refill), that thread refills the
// stages of step it − 1 with step it + 1 right after issuing step it's
// first two products, while they run. Refilling them at the end of step
// it − 1 instead made its warpgroup wait there, every step, for the other
// warpgroup to finish the step and then for the copies to be issued, with
// the tensor cores idle (figures in NOTES.md, "The backward after Params,
// timed"). With one transposed stage, step it + 1 needs its transposed
// tiles right after its softmax, so they are still loaded as soon as step
// it is done.
//
// Variants (variants.cuh; plain and _var kernels as sm90_variants.cuh
// says):
//   - Grouped-query attention: K, V (and Kᵀ) are imaged once per key head.
//     dq_rowblock reads its query head's kv_pair. A dkdv_colblock block
//     owns keys of one key head (the grid runs over key heads) and sums dK
//     and dV over the kv_group query heads of its group, in its registers,
//     head after head in a fixed order: deterministic, without atomics or
//     a reduction pass. Its steps over (head, query step) form one flat
//     sequence through the stages and barriers, so the pipeline, the early
//     refill included, crosses head boundaries as it crosses steps; each
//     step brings its own head's Q, dO, Qᵀ, dOᵀ, LSE and D.
//   - Masks (SeqMask): dq walks key steps as the forward walks key tiles,
//     dkdv the query steps from its first key's query_lo to its last real
//     key's query_hi. A step is masked element by element only where some
//     of its rows miss some of its keys (dkdv: for the whole block, from
//     the corner rows and keys, since every key's rows are contiguous).
//     Padding rows (lq ≤ i < nq) get LSE +inf and D 0 from prep_stats,
//     hence P = 0, and the mask; padding keys and keys no row sees are
//     masked in every step (or walk none), so they get dK = dV = 0, rows
//     that see no key dQ = 0.
//   - Score modifiers: P is recomputed from the modified score as the
//     forward computed it, and dS = P∘(dP − D) is multiplied by the
//     softcap's derivative dsoft before dQ and dK (dsoft rides on P: dq
//     keeps P·dsoft where P was; dkdv packs Pᵀ into its fragments first,
//     one fragment at a time, then multiplies, so that P and dsoft are
//     never both held whole). The group's heads share the softcap; each
//     brings its own ALiBi slope.
//   - The additive bias and dropout (kFull, the _full kernels, 16-bit
//     operands): P is recomputed with the bias (fp32, staged in shared
//     memory by every thread with cp.async: bias tiles are read per score,
//     and their rows start anywhere, which bulk copies do not allow), dV
//     takes Pᵀ∘Z and dS = P∘(Z∘dP/(1−p) − D), dV's factor 1/(1−p) applied
//     in float32 as the forward does to O; the keep bits come from the
//     same Philox words as in every other kernel (keep_bits_dkdv,
//     drop_by_row). dS is exactly 0 at every pair a row does not see
//     (zero_unseen). dQ's block holds two bias tiles [128 queries, 64
//     keys], the next step's copied while this one computes, behind one
//     barrier per step; dK/dV's, [64 queries, 128 keys], fits once (two
//     would pass the 227 KB a block may have at DP = 128), refilled between
//     a barrier after this step's softmax and one before the next step's.
//     Both tiles are stored with their 8-key groups swizzled by the row
//     instead of padded (DqBiasSwizzle, DkdvBiasSwizzle): padding would not
//     fit either, and the swizzle keeps every read free of bank conflicts.
//   dbias_tile     one block per 128 queries × 64 keys of a bias slice loops
//                  over the query pairs that read the slice (batch entries,
//                  then heads, in order): S = Q·Kᵀ and dP = dO·Vᵀ from the
//                  same images, dS summed in registers, written once (no
//                  atomics: deterministic). Each pair's four tiles are one
//                  stage of two, refilled early as in dq_rowblock; the
//                  slice's bias tile is copied once.
//
// FP32 on tensor cores (E = mma::TF32x3, 3xTF32; the plain pair at DP =
// 64): bwd_wide's shape (steps of 32 rows, one transposed stage; every
// image twice as wide, hi and lo parts), the statistics in natural units
// (prep_stats' kNatural, as the forward's scores), Sᵀ = K·Qᵀ and S = Q·Kᵀ
// by split_scores in the order of the forward's products, so that P =
// exp(S − LSE) meets the very scores the LSE came from (two score errors
// that do not cancel made dV miss the FP32 bound when a CUDA-core backward
// followed a 3xTF32 forward: NOTES), P and dS split in registers, and
// dV, dK and dQ summed step by step apart before they join their
// accumulators (sm90.cuh's step_product).
#pragma once
#include "common.cuh"
#include "round.cuh"
#include "sm90.cuh"
#include "sm90_variants.cuh"

namespace flash {
namespace sm90 {

constexpr int kBwdTile = 64;  // rows of every image tile, and of a warpgroup's share of a block
constexpr int kBwdPad = 128;  // images and statistics are padded to a multiple of this many rows
// bwd_padded is n rows padded to a multiple of kBwdPad: a head's rows in
// the backward's images and statistics.
__host__ __device__ constexpr long long bwd_padded(long long n) { return (n + kBwdPad - 1) / kBwdPad * kBwdPad; }

constexpr int kBwdWarpgroups = 2;
constexpr int kBwdThreads = 128 * kBwdWarpgroups;
constexpr int kBwdBlock = kBwdTile * kBwdWarpgroups;  // keys per dK/dV block, queries per dQ block

// bwd_step and bwd_tstages: streamed rows per step and stages of Qᵀ and dOᵀ
// for operand type E and DP (see above). select.go repeats them
// (wgmmaBwdShape).
template <typename E, int DP> __host__ __device__ constexpr bool bwd_wide() {
  return (sizeof(typename E::Storage) == 4 && DP > 64) || E::kParts > 1;
}
template <typename E, int DP> __host__ __device__ constexpr int bwd_step() { return bwd_wide<E, DP>() ? 32 : 64; }
// bwd_t_images reports whether the products that sum over rows (dV, dK,
// dQ) read transposed images Qᵀ, dOᵀ and Kᵀ: for TF32 only, which wgmma
// cannot transpose. 16-bit operands read the row images MN-major instead
// (gemm_rs_rows), so they have no transposed conversions, copies or stages.
// select.go repeats it (wgmmaBwdTImages).
template <typename E> __host__ __device__ constexpr bool bwd_t_images() { return sizeof(typename E::Storage) == 4; }
template <typename E, int DP> __host__ __device__ constexpr int bwd_tstages() {
  return !bwd_t_images<E>() ? 0 : bwd_wide<E, DP>() ? 1 : 2;
}
// bwd_dq_ops is the streamed operands of a dq_rowblock stage: K and V, and
// Kᵀ where bwd_t_images.
template <typename E> __host__ __device__ constexpr int bwd_dq_ops() { return bwd_t_images<E>() ? 3 : 2; }
// bwd_early_refill: the stages of step it − 1 are refilled while step it's
// first products run (see above), in both kernels.
template <typename E, int DP> __host__ __device__ constexpr bool bwd_early_refill() { return !bwd_wide<E, DP>(); }
// bwd_rows_bytes is the size of ROWS rows of an image of E at DP columns
// (both parts of a split type).
template <typename E, int DP, int ROWS> __host__ __device__ constexpr int bwd_rows_bytes() {
  return ROWS * DP * E::kParts * static_cast<int>(sizeof(typename E::Storage));
}
// Shared memory of dkdv_colblock: alignment slack, K and V, two stages of
// Q and dO steps, bwd_tstages of Qᵀ and dOᵀ, two stages of the steps' LSE
// and D, (kBias: the _full kernel) the bias tile, seven mbarriers.
// select.go repeats both layouts (wgmmaBwdSmem).
// kDQ (the fused kernel, bwd_dq_fused) adds two dS tiles and the dQ
// staging (bwd_dq_stage_bytes).
//
// bwd_dq_part_bytes is one warpgroup's part of a step's dQ, [kBwdTile
// queries, DP/2 columns] of float32; the staging holds two steps' parts
// of both warpgroups (reduce_dq).
template <int DP> __host__ __device__ constexpr int bwd_dq_part_bytes() { return kBwdTile * DP / 2 * 4; }
template <int DP> __host__ __device__ constexpr int bwd_dq_stage_bytes() {
  return 2 * kBwdWarpgroups * bwd_dq_part_bytes<DP>();
}
template <typename E, int DP, bool kBias = false, bool kDQ = false>
__host__ __device__ constexpr int bwd_dkdv_smem_bytes() {
  constexpr int kStep = bwd_step<E, DP>();
  return 1024 + 2 * bwd_rows_bytes<E, DP, kBwdBlock>() + 2 * (2 + bwd_tstages<E, DP>()) * bwd_rows_bytes<E, DP, kStep>() +
         (kDQ ? 2 * kBwdBlock * kStep * 2 + bwd_dq_stage_bytes<DP>() : 0) + 4 * kStep * 4 +
         (kBias ? kStep * kBwdBlock * 4 : 0) + 7 * 8;
}
// bwd_dq_fused reports whether the fused backward (dkdv_colblock with kDQ:
// dQ's sums too, by bulk reductions into p.dq_accum) is built for E at DP:
// plain problems of 16-bit operands at DP 64 and 128. select.go repeats
// it (wgmmaBwdFusedBuilt).
template <typename E, int DP> __host__ __device__ constexpr bool bwd_dq_fused() {
  return sizeof(typename E::Storage) == 2 && (DP == 64 || DP == 128);
}
// Shared memory of dq_rowblock: slack, Q and dO, two stages of K, V and
// (bwd_t_images) Kᵀ steps, (kBias) two bias tiles, five mbarriers.
template <typename E, int DP, bool kBias = false> __host__ __device__ constexpr int bwd_dq_smem_bytes() {
  constexpr int kStep = bwd_step<E, DP>();
  return 1024 + 2 * bwd_rows_bytes<E, DP, kBwdBlock>() + 2 * bwd_dq_ops<E>() * bwd_rows_bytes<E, DP, kStep>() +
         (kBias ? 2 * kBwdBlock * kStep * 4 : 0) + 5 * 8;
}

// Shared memory of dbias_tile: slack, two stages of Q and dO (kBwdBlock
// rows) and K and V (kBwdTile rows), the bias tile [kBwdBlock, kBwdTile]
// (fp32, DqBiasSwizzle), four mbarriers. select.go repeats it
// (wgmmaDbiasSmem).
template <typename E, int DP> __host__ __device__ constexpr int bwd_dbias_smem_bytes() {
  return 1024 + 2 * (2 * bwd_rows_bytes<E, DP, kBwdBlock>() + 2 * bwd_rows_bytes<E, DP, kBwdTile>()) +
         kBwdBlock * kBwdTile * 4 + 4 * 8;
}

// The _full kernels' bias tiles are fp32 rows of whole steps or blocks,
// with no padding (DkdvBiasSwizzle and DqBiasSwizzle place their 8-key
// groups). Both swizzles keep groups of 4 keys together, as the 16-byte
// copies need.
//
// DkdvBiasSwizzle: dK/dV's tile [STEP queries, kBwdBlock keys]. A load of
// probs_dkdv takes, in lane (g, t), key 16·warp + g (+ 8) of query
// 2t (+1) + 8j: rows 2t apart, one column group per t. XOR-ing the key's
// 8-key group with bits 1–2 of the row (t) puts the four t's in four
// different groups of banks: 32 banks for 32 lanes.
struct DkdvBiasSwizzle {
  __device__ __forceinline__ static int col(int r, int c) { return c ^ (((r >> 1) & 3) << 3); }
};
// DqBiasSwizzle: dQ's tile [kBwdBlock queries, STEP keys] (STEP = 64). A
// load of probs_dq takes, in lane (g, t), the pair of keys 8j + 2t of row
// 16·warp + g (+ 8): eight rows a row stride apart. XOR-ing the key's
// group with the row's low three bits (g) spreads them so that every bank
// serves two of the 64 words, the least an 8-byte load of 32 lanes takes.
struct DqBiasSwizzle {
  __device__ __forceinline__ static int col(int r, int c) { return c ^ ((r & 7) << 3); }
};

// dot_do_o_image is D = rowsum(dO∘O) − dLSE of mma::dot_do_o_round<R,
// false> and dO's row image of to_image_rows<E> (tiles of kBwdTile rows)
// in one pass: dO, the float32 [bh, nq, dim] at dout, is read once
// instead of twice. p is the backward's own (its dout the image, rows
// p.dout_row_stride columns apart, n_pad rows a head: a multiple of
// kBwdTile; o, delta and dlse as dot_do_o_round reads them); the
// 16-bit types only (E::kParts == 1, without transposed images), at a
// padded dimension that is a multiple of 64 (whole 128-byte panels),
// and for calls without lengths, whose image holds every row.
//
// A group of lanes per image row: the whole warp, or at a padded
// dimension of 64 half of it (a warp on 64 columns left half its lanes
// idle and the pass no faster than the two it replaces). Lane l of a
// group of g takes the columns 4l + 4gk, as dot_do_o_round's aligned path
// does at g = 32, and the group sums by a butterfly within it: at g = 16
// that is dot_do_o_round's butterfly less the step that added the idle
// lanes' zeros, so D keeps its bits either way (but for the sign of a
// zero sum). Each lane stores its four columns' 8 bytes at their swizzled
// place (a 16-byte chunk holds two lanes' halves). Padding rows
// (nq ≤ i < n_pad) are zero in the image and have no D (prep_stats pads
// it). Any grid; blockDim.x a multiple of 32.
template <typename E, typename R>
__device__ void dot_do_o_image(const Params& p, const float* __restrict__ dout, long long n_pad) {
  static_assert(E::kParts == 1 && !bwd_t_images<E>(), "dot_do_o_image writes the 16-bit types' row image alone");
  const int dim = static_cast<int>(p.dim), dp = static_cast<int>(p.dout_row_stride);
  const int group = dp <= 64 ? 16 : 32, lane = threadIdx.x % group;
  const long long rows = p.b * p.h * n_pad;
  const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / group;
  if ((row - row % (32 / group)) >= rows) return;  // whole warps: every lane of a live warp shuffles below
  const bool in_image = row < rows;
  const unsigned bh = static_cast<unsigned>(row / n_pad), i = static_cast<unsigned>(row % n_pad);
  const bool in_rows = in_image && i < p.nq;
  const float* x = dout + (static_cast<long long>(bh) * p.nq + i) * dim;
  const float* o =
      head_of(static_cast<const float*>(p.o), bh, p.h, p.o_batch_stride, p.o_head_stride) + i * p.o_row_stride;
  const bool real = in_rows && i < seq_mask(p, bh).lq;
  const bool vec = dim % 4 == 0 && (reinterpret_cast<uintptr_t>(dout) | reinterpret_cast<uintptr_t>(o)) % 16 == 0;
  // Image row i of head bh: tile i / kBwdTile, row r within it; 16-byte
  // chunk c (columns 8c …) of 64-column panel c / 8 sits at chunk
  // (c mod 8) ^ (r mod 8) of the panel's row, as to_image_rows writes it.
  const int r = static_cast<int>(i % kBwdTile);
  uint2* y = reinterpret_cast<uint2*>(const_cast<void*>(p.dout)) +
             2 * (static_cast<long long>(bh) * n_pad * (dp / 8) + static_cast<long long>(i - r) * (dp / 8));
  float acc = 0.f;
  for (int c = 4 * lane; in_image && c < dp; c += 4 * group) {
    float f[4] = {0.f, 0.f, 0.f, 0.f};
    if (in_rows) {
      if (vec && c < dim) {
        const float4 v = *reinterpret_cast<const float4*>(x + c);
        f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) f[e] = c + e < dim ? x[c + e] : 0.f;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) f[e] = R::round(f[e]);
      if (real && c < dim) {
        if (vec) {
          const float4 w = __ldg(reinterpret_cast<const float4*>(o + c));
          acc = mma::do_o_fma<R>(f[0], w.x, acc);
          acc = mma::do_o_fma<R>(f[1], w.y, acc);
          acc = mma::do_o_fma<R>(f[2], w.z, acc);
          acc = mma::do_o_fma<R>(f[3], w.w, acc);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (c + e < dim) acc = mma::do_o_fma<R>(f[e], __ldg(o + c + e), acc);
        }
      }
    }
    const int chunk = c / 8, panel = chunk / 8;
    const int at = (panel * kBwdTile + r) * 8 + ((chunk % 8) ^ (r % 8));
    y[2 * at + (c / 4) % 2] = make_uint2(E::pack(f[0], f[1]), E::pack(f[2], f[3]));
  }
  for (int off = group / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0 && in_rows) {
    const long long d = static_cast<long long>(bh) * p.nq + i;
    if (real && p.dlse != nullptr) acc -= static_cast<const float*>(p.dlse)[d];
    static_cast<float*>(p.delta)[d] = real ? acc : 0.f;
  }
}

// prep_stats writes p.lse_log2[bh, i] = log2e·lse[bh, i] and
// p.delta_pad[bh, i] = delta[bh, i] for the real rows i < lq of head bh,
// +inf and 0 for its padding rows and up to nq rounded up to kBwdPad, so
// that padding rows get P = 0 and dS = 0 whatever their inputs; grid-stride.
// kVar (the _var kernels' statistics) stops at lq rounded up to kBwdPad:
// the _var kernels read no row past it (a dQ block of padding rows loads
// nothing, and dK/dV blocks step over real rows only). kNatural (the
// split type's kernels, which take scores in natural units) writes the LSE
// as it is, not in log2 units.
template <bool kVar, bool kNatural = false>
__device__ void prep_stats(const Params& p) {
  const float* __restrict__ lse = static_cast<const float*>(p.lse);
  const float* __restrict__ delta = static_cast<const float*>(p.delta);
  float* __restrict__ lse2 = static_cast<float*>(p.lse_log2);
  float* __restrict__ dpad = static_cast<float*>(p.delta_pad);
  const long long nq = p.nq, nq_pad = bwd_padded(nq);
  const long long n = p.b * p.h * nq_pad, stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const long long bh = i / nq_pad, r = i % nq_pad, lq = seq_mask(p, bh).lq;
    if constexpr (kVar) {
      if (r >= bwd_padded(lq)) continue;
    }
    const bool real = r < lq;
    lse2[i] = real ? (kNatural ? lse[bh * nq + r] : lse[bh * nq + r] * kLog2e) : Math<float>::inf();
    dpad[i] = real ? delta[bh * nq + r] : 0.f;
  }
}

// aligned_smem is the dynamic shared buffer rounded up to 1024 bytes, the
// alignment of the 128-byte swizzle.
__device__ __forceinline__ unsigned char* aligned_smem() {
  return smem + ((1024u - (smem_addr(smem) & 1023u)) & 1023u);
}

// store_warp_rows writes scale·c, a warp's accumulators for rows row0 +
// (g, g+8) of an [n, dim] matrix y with row stride ld, skipping rows ≥ n and
// columns ≥ dim: the epilogue of the plain dQ kernels and of the split
// type's three at DP = 128 (the plain dK/dV kernels go through shared
// memory, store_wg_rows; see dkdv_body and dq_body).
//
// kPairs (the plain dQ kernels of one-part types) writes a thread's two
// columns 2t, 2t + 1 with one 8-byte store where every row's pairs are
// 8-byte aligned: a warp's store then fills whole 32-byte sectors (4 lanes
// × 8 bytes of each of 8 rows) with half the instructions of 4-byte
// stores, which write half sectors. It took 0.2–2.6 % off the TF32
// backward (H100, 2026-12-06). The split type keeps 4-byte stores: with
// pairs, ncu put dk_colblock 2.4 % and dq_split_rowblock 3.0 % slower at
// DP = 128, and its DP = 64 backward moved by −0.7 to +0.8 %.
template <int DP, bool kPairs = false>
__device__ __forceinline__ void store_warp_rows(float* y, const float (&c)[DP / 8][4], long long row0, long long n,
                                                long long dim, long long ld, float scale) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  [[maybe_unused]] const bool pairs =
      (reinterpret_cast<unsigned long long>(y) & 7) == 0 && ld % 2 == 0 && dim % 2 == 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long row = row0 + g + 8 * h;
    if (row >= n) continue;
    float* yr = y + row * ld;
#pragma unroll
    for (int j = 0; j < DP / 8; ++j) {
      const int col = j * 8 + 2 * t;
      if constexpr (kPairs) {
        const float a = c[j][2 * h] * scale, b = c[j][2 * h + 1] * scale;
        if (pairs) {
          if (col >= dim) continue;
#ifdef FLASH_EMU
          *reinterpret_cast<float2*>(yr + col) = float2{a, b};
#else  // asm: nvcc may split a float2 store beside the scalar ones below (store_wg_rows' note)
          asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(yr + col), "f"(a), "f"(b) : "memory");
#endif
        } else {
          if (col < dim) yr[col] = a;
          if (col + 1 < dim) yr[col + 1] = b;
        }
      } else {  // the split type's kernels: their SASS as before kPairs
        if (col < dim) yr[col] = c[j][2 * h] * scale;
        if (col + 1 < dim) yr[col + 1] = c[j][2 * h + 1] * scale;
      }
    }
  }
}

// gemm_ss sets c = A·Bᵀ over DP: A a 64-row K-major image at a, B a
// STEP-row one at b (both shared addresses); a split type's three
// products by split_ss.
template <typename E, int DP, int STEP>
__device__ __forceinline__ void gemm_ss(float (&c)[STEP / 8][4], uint32_t a, uint32_t b) {
  const uint64_t da = desc_sw128(a), db = desc_sw128(b);
  if constexpr (E::kParts > 1) {
    split_ss<E, STEP, DP / E::kK, false>(reinterpret_cast<float(&)[STEP / 2]>(c), da, kBwdTile, db, STEP);
  } else {
#pragma unroll
    for (int kc = 0; kc < DP / E::kK; ++kc)
      Wgmma<E, STEP>::ss(reinterpret_cast<float(&)[STEP / 2]>(c), da + (k_slice_offset(kc, kBwdTile) >> 4),
                         db + (k_slice_offset(kc, STEP) >> 4), kc > 0);
  }
}

// gemm_rs adds A·B to c: A the STEP-column operand in registers (its
// columns are rows of B), B either the STEP-row image at rows, read
// MN-major (16-bit operands: k-slice kk is 16 rows, two 8-row groups of
// 128 bytes, into each of its panels of 64 columns, STEP rows apart), or,
// where bwd_t_images, the transposed [DP, STEP] image at transposed
// ([DP, 2·STEP] for a split type, whose A fragments are the hi ones and
// then the lo ones: split_rs).
template <typename E, int DP, int STEP>
__device__ __forceinline__ void gemm_rs(float (&c)[DP / 8][4], const uint32_t (&a)[mma::frag_count<E, STEP>()][4],
                                        uint32_t rows, uint32_t transposed) {
  if constexpr (bwd_t_images<E>()) {
    rs_product<E, DP, STEP / E::kK>(reinterpret_cast<float(&)[DP / 2]>(c), a, desc_sw128(transposed), DP);
  } else {
    static_assert(STEP == kBwdTile, "a 16-bit step is one whole image tile");
#pragma unroll
    for (int kk = 0; kk < STEP / E::kK; ++kk)
      WgmmaRsMN<E, DP>::rs(reinterpret_cast<float(&)[DP / 2]>(c), a[kk],
                           desc_mn_sw128(rows + kk * E::kK * 128, STEP * 128));
  }
}

// two_products issues c1 = A1·B1ᵀ and c2 = A2·B2ᵀ (gemm_ss) as two wgmma
// groups, calls meanwhile() while they run and waits for the first: the
// caller works on c1 while c2 computes, then waits for it with wgmma_wait.
// For a split type c1 is the scores (split_scores, kALoFirst: A is Q),
// its small products folded in once it has landed.
template <typename E, int DP, int STEP, bool kALoFirst, typename F>
__device__ __forceinline__ void two_products(float (&c1)[STEP / 8][4], float (&c2)[STEP / 8][4], uint32_t a1,
                                             uint32_t b1, uint32_t a2, uint32_t b2, F&& meanwhile) {
  [[maybe_unused]] float small[STEP / 8][4];
  wgmma_fence();
  if constexpr (E::kParts > 1) {
    split_scores<E, STEP, DP / E::kK, kALoFirst>(reinterpret_cast<float(&)[STEP / 2]>(c1),
                                                 reinterpret_cast<float(&)[STEP / 2]>(small), desc_sw128(a1),
                                                 kBwdTile, desc_sw128(b1), STEP);
  } else {
    gemm_ss<E, DP, STEP>(c1, a1, b1);
  }
  wgmma_commit();
  gemm_ss<E, DP, STEP>(c2, a2, b2);
  wgmma_commit();
  meanwhile();
  wgmma_wait<1>();
  if constexpr (E::kParts > 1) {
    static_assert(!halved_big<DP / E::kK>(), "two chains need big_rest");
    add_small(c1, small);
  }
}

template <typename E, int N>
__device__ __forceinline__ void to_frags(uint32_t (&a)[mma::frag_count<E, N * 8>()][4], const float (&s)[N][4]) {
#pragma unroll
  for (int kk = 0; kk < N * 8 / E::kK; ++kk) mma::put_frag<E>(a, s, kk);
}

// copy_rows starts the bulk copies of rows [r0, r0 + ROWS) of head bh of a
// row image (rows_pad rows per head, tiles of kBwdTile) into a ROWS-row
// image at dst: one copy per 128-byte panel, since a tile keeps each
// panel's rows together. r0 and ROWS must not cross a tile unless ROWS
// covers whole tiles.
template <typename E, int DP, int ROWS>
__device__ __forceinline__ void copy_rows(uint32_t dst, const typename E::Storage* img, long long bh,
                                          long long rows_pad, long long r0, uint32_t bar) {
  constexpr int kW = DP * E::kParts;  // image columns
  const unsigned char* src = reinterpret_cast<const unsigned char*>(img + (bh * rows_pad + r0) * kW);
  if constexpr (ROWS % kBwdTile == 0) {
    bulk_copy(dst, src, bwd_rows_bytes<E, DP, ROWS>(), bar);
  } else {
    static_assert(kBwdTile % ROWS == 0, "a partial step stays inside one tile");
    constexpr int kPanels = kW * static_cast<int>(sizeof(typename E::Storage)) / 128;
    const int within = static_cast<int>(r0 % kBwdTile);
    src -= within * kW * static_cast<long long>(sizeof(typename E::Storage));  // the tile's start
#pragma unroll
    for (int p = 0; p < kPanels; ++p)
      bulk_copy(dst + p * ROWS * 128, src + (p * kBwdTile + within) * 128, ROWS * 128, bar);
  }
}

// copy_transposed starts the bulk copy of columns [r0, r0 + ROWS) of head
// bh of a transposed image (one [DP, kBwdTile] image per tile of rows) into
// a [DP, ROWS] image at dst. ROWS columns are whole 128-byte panels,
// which lie one after the other. A split type's tile is [DP, 2·kBwdTile],
// the hi panels and then the lo ones, and so is the copy: [DP, 2·ROWS].
template <typename E, int DP, int ROWS>
__device__ __forceinline__ void copy_transposed(uint32_t dst, const typename E::Storage* img, long long bh,
                                                long long rows_pad, long long r0, uint32_t bar) {
  constexpr int kEs = static_cast<int>(sizeof(typename E::Storage));
  static_assert(ROWS * kEs % 128 == 0, "whole panels");
  const long long tile0 = r0 / kBwdTile * kBwdTile;
  const unsigned char* src = reinterpret_cast<const unsigned char*>(img + (bh * rows_pad + tile0) * DP * E::kParts);
  if constexpr (E::kParts == 1) {
    bulk_copy(dst, src + (r0 - tile0) * kEs / 128 * DP * 128, bwd_rows_bytes<E, DP, ROWS>(), bar);
  } else {
    constexpr int kPartBytes = bwd_rows_bytes<E, DP, ROWS>() / E::kParts;
#pragma unroll
    for (int part = 0; part < E::kParts; ++part)
      bulk_copy(dst + part * kPartBytes, src + ((r0 - tile0) + part * kBwdTile) * kEs / 128 * DP * 128, kPartBytes,
                bar);
  }
}

// store_ds_tile writes a warp's dSᵀ fragments (df: A fragments of keys
// row, row + 8 and STEP queries, already rounded to the operand type) into
// the dS tile at tile: one 128-byte row per key of the block, its STEP =
// 64 queries in 16-byte chunks swizzled by the row (the MN-major layout of
// desc_mn_sw128, queries the M index of dQ's product), then fences them for
// the async proxy.
template <int KK>
__device__ __forceinline__ void store_ds_tile(uint32_t tile, const uint32_t (&df)[KK][4], int row, int t) {
#pragma unroll
  for (int kk = 0; kk < KK; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = row + 8 * (e & 1), col = 16 * kk + 8 * (e >> 1) + 2 * t;
      const uint32_t at = tile + r * 128 + ((((col >> 3) ^ (r & 7)) & 7) << 4) + (col & 7) * 2;
#ifdef FLASH_EMU
      std::memcpy(::emu::shared_at(at), &df[kk][e], 4);
#else
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(df[kk][e]) : "memory");
#endif
    }
  fence_proxy_async();
}

// reduce_dq computes, for the step's 64 queries from q0 of head bh, the
// block's part of dQ in warpgroup wg's half of the columns, scale·dS·K
// summed over the block's kBwdBlock keys (dS from the tile, K from sK, both
// MN-major), stores it into the warpgroup's part of the staging at part
// and has the warpgroup's first thread add that part into p.dq_accum with
// one bulk reduction (cp.reduce.async.bulk, 16 KB at DP = 128, which the
// L2 takes in whole lines). Waits for every product of the step: leaving
// the dQ product in flight into the next step, to wait for it under that
// step's Sᵀ, makes ptxas 12.4 serialize every wgmma of the kernel (C7514:
// an accumulator read after a wait for a group issued in the previous
// iteration), so overlapping dQ's hand-off across steps needs a warp of
// its own (NOTES, fortieth session).
//
// p.dq_accum holds the sums in the order of the accumulators (the
// fragment order): for each head, each step of 64 queries, each
// warpgroup, warp and n8 tile j, the 32 lanes' four floats one after the
// other. The stores are then 512 contiguous bytes a warp, free of bank
// conflicts, and a part is one contiguous run for one bulk reduction;
// dq_from_accum puts the sums where dq wants them. Adding into dq itself
// took one red.global.add per pair of floats (16 a thread and step at DP =
// 128) or, row by row, 128 bulk reductions a step, which ran 5–35 %
// slower than the reductions (NOTES, twenty-fifth session).
template <typename E, int DP>
__device__ __forceinline__ void reduce_dq(const Params& p, uint32_t ds_tile, uint32_t sK, long long bh, long long q0,
                                          int wg, int warp, int t_lane, uint32_t part) {
  constexpr int kN = DP / 2;  // columns per warpgroup
  constexpr int kTileBytes = bwd_rows_bytes<E, DP, kBwdTile>();
  float acc[kN / 8][4];
  // sK holds the block's keys as copy_rows lands them: tiles of kBwdTile
  // keys, each tile its panels one after the other (kBwdTile rows of 128
  // bytes each). Warpgroup wg's columns: a panel of its own at DP = 128,
  // half the one panel's rows at DP = 64. So 16 keys from key 16kk are
  // rows 16kk mod kBwdTile of that panel in tile 16kk / kBwdTile: at DP =
  // 128 the second tile is not where the first tile's panel 0 ends (the
  // first device run, 2026-12-05, summed keys 64-127 from panel 1 of the
  // first tile and got dQ wrong at DP = 128 alone).
  const uint32_t b0 = sK + (DP == 128 ? wg * kBwdTile * 128 : wg * kN * 2);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kBwdBlock / 16; ++kk) {
    const uint32_t keys = b0 + (16 * kk / kBwdTile) * kTileBytes + (16 * kk % kBwdTile) * 128;
    WgmmaMN<E, kN>::ss(reinterpret_cast<float(&)[kN / 2]>(acc), desc_mn_sw128(ds_tile + kk * 2048, 0),
                       desc_mn_sw128(keys, kBwdTile * 128), kk > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  const float scale = static_cast<float>(p.scale);
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    const uint32_t at = part + ((warp * (kN / 8) + j) * 32 + t_lane) * 16;
    const float x = acc[j][0] * scale, y = acc[j][1] * scale, z = acc[j][2] * scale, w = acc[j][3] * scale;
#ifdef FLASH_EMU
    const float v4[4] = {x, y, z, w};
    std::memcpy(::emu::shared_at(at), v4, 16);
#else
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "f"(x), "f"(y), "f"(z), "f"(w) : "memory");
#endif
  }
  fence_proxy_async();
  wg_bar(wg);  // the part is whole, and visible to the bulk reduction
  if (threadIdx.x % 128 == 0) {
    constexpr int kPart = bwd_dq_part_bytes<DP>();
    float* dst = static_cast<float*>(p.dq_accum) + (bh * bwd_padded(p.nq) + q0) * DP + wg * (kPart / 4);
    bulk_reduce_add(dst, part, kPart);
    bulk_commit();
  }
}

// dq_from_accum writes dq from the fused backward's sums (p.dq_accum, in
// reduce_dq's fragment order, already scaled): a block of kDqAccumThreads
// per 64 queries of a head, each thread four sums at a time, the reads
// 512 contiguous bytes a warp and the writes 32 bytes a row (a warp's
// n8 tile: 8 rows of 8 columns, twice).
constexpr int kDqAccumThreads = 256;
template <int DP>
__device__ void dq_from_accum(const Params& p) {
  constexpr int kN = DP / 2, kTiles = kN / 8;  // columns and n8 tiles per warpgroup
  constexpr int kPerThread = kBwdTile * DP / 4 / kDqAccumThreads;
  static_assert(kPerThread * kDqAccumThreads * 4 == kBwdTile * DP, "a block takes a whole step");
  const unsigned steps = static_cast<unsigned>(bwd_padded(p.nq) / kBwdTile);
  const unsigned bh = blockIdx.x / steps, step = blockIdx.x - bh * steps;
  const float4* src = reinterpret_cast<const float4*>(static_cast<const float*>(p.dq_accum) +
                                                      static_cast<long long>(blockIdx.x) * kBwdTile * DP);
  float* dq = head_of(static_cast<float*>(p.dq), bh, p.h, p.dq_batch_stride, p.dq_head_stride);
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int f = static_cast<int>(threadIdx.x) + i * kDqAccumThreads;  // float4 of the step
    const int lane = f % 32, j = f / 32 % kTiles, warp = f / (32 * kTiles) % 4, wg = f / (32 * kTiles * 4);
    const float4 a = src[f];
    const long long col = wg * kN + 8 * j + 2 * (lane % 4);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long row = static_cast<long long>(step) * kBwdTile + warp * 16 + lane / 4 + 8 * h;
      if (row >= p.nq) continue;
      float* dr = dq + row * p.dq_row_stride;
      const float x = h == 0 ? a.x : a.z, y = h == 0 ? a.y : a.w;
      if (col + 1 < p.dim && (reinterpret_cast<uintptr_t>(dr + col) & 7) == 0) {
        *reinterpret_cast<float2*>(dr + col) = make_float2(x, y);
      } else {
        if (col < p.dim) dr[col] = x;
        if (col + 1 < p.dim) dr[col + 1] = y;
      }
    }
  }
}

// dkdv_body is dkdv_colblock for key head kvh of mask mk (the mask of its
// group's batch entry).
template <typename E, int DP, bool kVar, bool kFull, bool kBias, bool kDQ = false>
__device__ __forceinline__ void dkdv_body(const Params& p, long long kvh, long long kblk, const SeqMask& mk) {
  static_assert(kVar || !kFull, "the _full kernels compute the _var variants too");
  static_assert(!kDQ || (!kVar && bwd_dq_fused<E, DP>()), "the fused dQ is built for plain 16-bit problems");
  static_assert(kFull || !kBias, "the bias tile belongs to the _full kernel");
  static_assert(E::kParts == 1 || !kVar, "the split type computes plain problems");
  using S = typename E::Storage;
  const long long nq = p.nq, nk = p.nk;
  const S* __restrict__ q = static_cast<const S*>(p.q);
  [[maybe_unused]] const S* __restrict__ qt = static_cast<const S*>(p.q_t);
  [[maybe_unused]] const S* __restrict__ k = static_cast<const S*>(p.k);
  [[maybe_unused]] const S* __restrict__ v = static_cast<const S*>(p.v);
  const S* __restrict__ dout = static_cast<const S*>(p.dout);
  [[maybe_unused]] const S* __restrict__ dot = static_cast<const S*>(p.dout_t);
  const float* __restrict__ lse2 = static_cast<const float*>(p.lse_log2);
  const float* __restrict__ dpad = static_cast<const float*>(p.delta_pad);
  constexpr int STEP = bwd_step<E, DP>(), TST = bwd_tstages<E, DP>();
  constexpr int kTS = TST > 0 ? TST : 1;  // step i's transposed stage is i mod kTS
  constexpr int kFixed = bwd_rows_bytes<E, DP, kBwdBlock>();  // K or V
  constexpr int kStep = bwd_rows_bytes<E, DP, STEP>();        // one streamed operand
  constexpr int kStats = STEP * 4;
  constexpr int kNS = STEP / 8;  // n8 tiles of Sᵀ per warp: queries
  constexpr int kND = DP / 8;    // n8 tiles of dK and dV per warp
  static_assert(!kDQ || STEP == kBwdTile, "reduce_dq stages and adds steps of kBwdTile queries");

  unsigned char* const sm = aligned_smem();
  const uint32_t base = smem_addr(sm);
  // K and V, then stages of [Q, dO], stages of [Qᵀ, dOᵀ] (bwd_tstages:
  // none for 16-bit operands), (kDQ) two dS tiles and the dQ staging, LSE and D per stage, (kBias) the bias
  // tile, then the mbarriers
  // kv_full, full[2] (Q, dO, LSE, D), tfull[2] (Qᵀ, dOᵀ) and empty[2] (one
  // phase per step, both kinds of stage).
  constexpr int kDsBytes = kDQ ? kBwdBlock * STEP * 2 : 0;  // [block keys, STEP queries] of 16-bit dS
  const uint32_t sK = base, sV = sK + kFixed, sStage = sV + kFixed, sTStage = sStage + 4 * kStep;
  [[maybe_unused]] const uint32_t sDS = sTStage + 2 * TST * kStep;
  constexpr int kDqStage = kDQ ? bwd_dq_stage_bytes<DP>() : 0;
  [[maybe_unused]] const uint32_t sDQ = sDS + 2 * kDsBytes;  // kDQ: the dQ staging
  const int stats_off = 2 * kFixed + (4 + 2 * TST) * kStep + 2 * kDsBytes + kDqStage,
            bias_off = stats_off + 4 * kStats;
  constexpr int kBiasLd = kBwdBlock;  // floats per row of the bias tile
  const uint32_t bars = base + bias_off + (kBias ? STEP * kBiasLd * 4 : 0);
  const uint32_t kv_full = bars;
  auto full = [&](int s) { return bars + 8 + 8 * s; };
  auto tfull = [&](int s) { return bars + 24 + 8 * s; };
  auto empty = [&](int s) { return bars + 40 + 8 * s; };

  const long long nq_pad = bwd_padded(nq);
  const long long nk_pad = bwd_padded(nk);
  const long long blocks = (nk + kBwdBlock - 1) / kBwdBlock;
  const long long k0 = (kVar ? kblk : blockIdx.x % blocks) * kBwdBlock;  // _var: block_order's key block
  const int wg = warp_uniform(threadIdx.x / 128), warp = warp_uniform(threadIdx.x / 32 % 4), lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  // Block skipping: the rows that see the block's real keys run from the
  // first key's first (plain: 0 unless causal) to its last real key's last;
  // per query head, query steps it0 … it0 + n_per − 1. A block of padding
  // keys sees none and only writes dK = dV = 0.
  int it0 = 0, n_per = 0;
  if (k0 < mk.lk) {
    const long long q_lo = mk.query_lo(k0), q_hi = mk.query_hi((k0 + kBwdBlock < mk.lk ? k0 + kBwdBlock : mk.lk) - 1);
    it0 = static_cast<int>(q_lo / STEP);
    if (q_hi > q_lo) n_per = static_cast<int>((q_hi + STEP - 1) / STEP) - it0;
  }
  // Grouped-query attention: the block sums the gradients of the kv_group
  // query heads that read its key head, kvh·kv_group + r for r = 0, 1, …
  // in that order, in its registers (deterministic: no atomics). The steps
  // of all of them form one sequence i = r·n_per + (it − it0) through the
  // stages and barriers.
  const int group = kVar ? static_cast<int>(p.kv_group) : 1;
  const int n_steps = group * n_per;
  const long long bh0 = kVar ? kvh * group : kvh;  // the group's first query head
  // The last key of the block the outputs hold (keys past nk are image
  // padding, never stored).
  const long long k_last = (k0 + kBwdBlock < nk ? k0 + kBwdBlock : nk) - 1;
  if constexpr (kVar) {
    // No key is seen: dK = dV = 0, before any barrier or copy (the images
    // of padding keys are not even written).
    if (n_steps <= 0) {
      zero_key_grads<kBwdThreads>(p, kvh, k0, k_last + 1);
      return;
    }
  }

  if (threadIdx.x == 0) {
    mbar_init(kv_full, 1);
    for (int s = 0; s < 2; ++s) mbar_init(full(s), 1), mbar_init(tfull(s), 1), mbar_init(empty(s), kBwdThreads);
    mbar_fence_init();
  }
  __syncthreads();
  // head_step splits step i into its query head and query step.
  auto head_step = [&](int i, long long& bh, long long& r0) {
    int r = 0;
    if constexpr (kVar) r = i / n_per;
    bh = bh0 + r;
    r0 = static_cast<long long>(it0 + i - r * n_per) * STEP;
  };
  // Step i goes to stage i mod 2 and transposed stage i mod kTS.
  auto load_step = [&](int i) {
    long long bh, r0;
    head_step(i, bh, r0);
    const int stage = i % 2;
    const uint32_t st = sStage + stage * 2 * kStep, bar = full(stage);
    mbar_arrive_expect_tx(bar, 2 * kStep + 2 * kStats);
    copy_rows<E, DP, STEP>(st, q, bh, nq_pad, r0, bar);
    copy_rows<E, DP, STEP>(st + kStep, dout, bh, nq_pad, r0, bar);
    bulk_copy(base + stats_off + stage * kStats, lse2 + bh * nq_pad + r0, kStats, bar);
    bulk_copy(base + stats_off + (2 + stage) * kStats, dpad + bh * nq_pad + r0, kStats, bar);
  };
  auto load_transposed = [&](int i) {
    long long bh, r0;
    head_step(i, bh, r0);
    const int ts = i % kTS;
    const uint32_t st = sTStage + ts * 2 * kStep, bar = tfull(ts);
    mbar_arrive_expect_tx(bar, 2 * kStep);
    copy_transposed<E, DP, STEP>(st, qt, bh, nq_pad, r0, bar);
    copy_transposed<E, DP, STEP>(st + kStep, dot, bh, nq_pad, r0, bar);
  };
  // kOwnKV: the plain 16-bit kernels convert their block of the caller's
  // float32 K and V themselves (p.k_src, p.v_src), each warpgroup its own
  // tile of each, and but for the fused kernel write the tiles into the
  // images p.k and p.v, which the dQ kernel reads after them. The block
  // reads its K and V once, so this takes the two conversion passes off
  // the backward (about 62 µs each at B·N = 16k, hidden 2048, H100):
  // their float32 reads happen here, and the image writes stay. The other
  // kernels' K and V images are written by those passes; TF32's dQ reads
  // a transposed image of K, which the pass writes beside the rows.
  constexpr bool kOwnKV = !kVar && !bwd_t_images<E>();
  if (threadIdx.x == 0) {
    if constexpr (!kOwnKV) {
      mbar_arrive_expect_tx(kv_full, 2 * kFixed);
      copy_rows<E, DP, kBwdBlock>(sK, k, kvh, nk_pad, k0, kv_full);
      copy_rows<E, DP, kBwdBlock>(sV, v, kvh, nk_pad, k0, kv_full);
    }
    for (int s = 0; s < 2 && s < n_steps; ++s) load_step(s);
    for (int s = 0; s < TST && s < n_steps; ++s) load_transposed(s);
  }
  constexpr int kWgBytes = bwd_rows_bytes<E, DP, kBwdTile>();
  if constexpr (kOwnKV) {
    const int tid = threadIdx.x % 128;
    const long long r0 = k0 + wg * kBwdTile;
    WgRows<E, DP> kr, vr;  // both tiles' loads in flight at once
    kr.load(static_cast<const float*>(p.k_src) + kvh * nk * p.dim, p.dim, r0, nk, p.dim, tid);
    vr.load(static_cast<const float*>(p.v_src) + kvh * nk * p.dim, p.dim, r0, nk, p.dim, tid);
    kr.store(sK + wg * kWgBytes, tid);
    vr.store(sV + wg * kWgBytes, tid);
    if constexpr (!kDQ) {
      // The images' tile of these rows (padding rows past nk included:
      // the last block's zeros).
      const long long at = (kvh * nk_pad + r0) * DP;
      kr.store_global(static_cast<S*>(const_cast<void*>(p.k)) + at, tid);
      vr.store_global(static_cast<S*>(const_cast<void*>(p.v)) + at, tid);
    }
    fence_proxy_async();
    wg_bar(wg);
  }
  // kBias: step i's bias (its head's slice, queries × the block's keys),
  // copied by every thread; has_bias is uniform over the grid.
  [[maybe_unused]] float* const bias_tile = reinterpret_cast<float*>(sm + bias_off);
  [[maybe_unused]] const bool has_bias = kBias && p.bias != nullptr;
  auto load_bias = [&](int i) {
    long long bh_i, r0;
    head_step(i, bh_i, r0);
    const float* bias = bias_rows<float>(p, bh_i);
    mma::cp_bias_tile<STEP, kBwdBlock, kBiasLd, kBwdThreads, DkdvBiasSwizzle>(bias_tile, bias, r0, mk.lq, k0, nk,
                                                                             mma::bias_tile_aligned(bias, nk));
    mma::cp_async_commit();
  };
  if constexpr (kBias) {
    if (has_bias) load_bias(0);
  }

  const float scale_log2 = score_unit<E::kExact>(p.scale);  // the split type: natural units
  const float scale = static_cast<float>(p.scale);
  float acc_dk[kND][4], acc_dv[kND][4];
#pragma unroll
  for (int n = 0; n < kND; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[n][e] = acc_dv[n][e] = 0.f;
  // This thread's keys: rows g and g+8 of its warp's 16, and the queries
  // that see each, qlo ≤ i < qhi (32 bits: kernels.MaxElements).
  const long long key0 = k0 + wg * kBwdTile + warp * 16 + g;
  int qlo[2], qhi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    qlo[h] = static_cast<int>(mk.query_lo(key0 + 8 * h));
    qhi[h] = static_cast<int>(mk.query_hi(key0 + 8 * h));
  }
  // The modifiers: one choice for the whole group (the softcap is the
  // problem's; the ALiBi slope, read per query head below, may be 0 for
  // some heads, which leaves their scores as they are).
  const bool mod = kVar && (p.softcap != 0.0 || p.alibi != nullptr);
  Mods md{};
  [[maybe_unused]] Extras ex{};
  [[maybe_unused]] uint32_t zbits = 0u;
  // kBias: this thread's first score in the bias tile (query 2t, key
  // key0 − k0 through DkdvBiasSwizzle) and its second key's offset from it.
  [[maybe_unused]] const int bias_key = wg * kBwdTile + warp * 16 + g;
  [[maybe_unused]] const float* const sb =
      bias_tile + 2 * t * kBiasLd + DkdvBiasSwizzle::col(2 * t, bias_key);
  [[maybe_unused]] const int sb_h1 = DkdvBiasSwizzle::col(2 * t, bias_key + 8) - DkdvBiasSwizzle::col(2 * t, bias_key);
  if constexpr (!kOwnKV) mbar_wait(kv_full, 0);

  int it = it0;           // the query step of step i …
  long long bh = bh0;     // … and its query head (kVar)
  for (int i = 0; i < n_steps; ++i) {
    if constexpr (!kVar) it = it0 + i;
    const int stage = i & 1, ts = i % kTS;
    const unsigned parity = (i >> 1) & 1;
    const long long q0 = static_cast<long long>(it) * STEP;
    const uint32_t st = sStage + stage * 2 * kStep, tst = sTStage + ts * 2 * kStep;
    const float* lt = reinterpret_cast<const float*>(sm + stats_off + stage * kStats);
    const float* dt = reinterpret_cast<const float*>(sm + stats_off + (2 + stage) * kStats);
    if constexpr (kVar) {
      if (mod && it == it0) md = mods_of(score_mod<float>(p, bh, mk), scale);  // a new query head: its ALiBi slope
      if (kFull && it == it0) ex = extras_of(p, bh);
    }
    mbar_wait(full(stage), parity);

    // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, two groups: the softmax of the first runs
    // while the second computes. Element e of tile j is key key0 + 8·(e/2),
    // query q0 + 8j + 2t + e%2.
    float s[kNS][4], dp[kNS][4];
    two_products<E, DP, STEP, false>(s, dp, sK + wg * kWgBytes, st, sV + wg * kWgBytes, st + kStep, [&] {
      if constexpr (bwd_early_refill<E, DP>()) {
        static_assert(TST == 2 || TST == 0, "the early refill needs two transposed stages or none");
        if (threadIdx.x == 0 && i > 0 && i + 1 < n_steps) {
          mbar_wait(empty((i - 1) & 1), ((i - 1) >> 1) & 1);  // every thread is done with step i − 1
          load_step(i + 1);
          if constexpr (TST > 0) load_transposed(i + 1);
        }
      }
    });
    // Only steps where some row misses some of the block's keys need the
    // mask: every row of [q0, q_last] sees every key of [k0, k_last] when
    // the last row's first key is at most k0 and the first row's last key
    // at least k_last (plain: every row's first key is 0).
    const long long q_last = (q0 + STEP < nq ? q0 + STEP : nq) - 1;
    const bool masked = !(k_last < mk.key_hi(q0) && (!kVar || mk.key_lo(q_last) <= k0));
    uint32_t pf[mma::frag_count<E, STEP>()][4];
    AlibiRow<1> ar[2];  // each key's ALiBi bias over the step (a − j of query q0 + 2t: column offset 0)
    if constexpr (!kVar) {
      with_mask(masked, [&](auto kMasked) {
        probs_dkdv<E, false, false, kMasked, false>(s, pf, scale_log2, lt, static_cast<int>(q0), t, qlo, qhi, md, ar);
      });
    } else {
      // A key whose queries cross its diagonal in this step takes the
      // masked copy (AlibiRow).
      bool uniform = true;
      if (md.slope_l2 != 0.f) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
          uniform &= ar[h].set(offset_of(q0, md.shift, key0 + 8 * h) + 2 * t, STEP - 7, md.slope_l2);
      }
      if constexpr (kFull) {
        if (ex.drop.on()) zbits = keep_bits_dkdv<kNS>(ex, q0, key0, lane);  // the warp together, before the dispatch
        if (kBias && has_bias) {
          mma::cp_async_wait<0>();
          __syncthreads();  // step i's bias has landed for every thread
        }
      }
      with_variant_of<kFull>(masked || !uniform, mod, md.capped, [&](auto kMasked, auto kMod, auto kCap) {
        probs_dkdv<E, true, kMod, kMasked, kCap, kNS, const float*, kFull, kBiasLd>(
            s, pf, scale_log2, lt, static_cast<int>(q0), t, qlo, qhi, md, ar, kBias && has_bias ? sb : nullptr,
            kFull && ex.drop.on(), zbits, sb_h1);
      });
      if constexpr (kBias) {
        if (has_bias && i + 1 < n_steps) {
          __syncthreads();  // every thread is done with step i's bias
          load_bias(i + 1);
        }
      }
    }
    if constexpr (TST > 0) mbar_wait(tfull(ts), (i / kTS) & 1);
    // dV += Pᵀ·dO (kFull: (Pᵀ∘Z)·dO); after it dPᵀ has landed.
    step_product<E, DP, 1>(acc_dv, [&](auto& c) { gemm_rs<E, DP, STEP>(c, pf, st + kStep, tst + kStep); });
    if constexpr (kFull) {
      if (ex.drop.on()) drop_by_bits(dp, zbits, ex.drop_scale());
    }
    ds_by_col(dp, s, dt, t);  // with kMod, s holds Pᵀ·dsoft: dSᵀ·dsoft
    if constexpr (kFull) zero_unseen(dp, q0, t, qlo, qhi);
    uint32_t df[mma::frag_count<E, STEP>()][4];
    to_frags<E>(df, dp);
    [[maybe_unused]] const uint32_t ds_tile = sDS + (i & 1) * kDsBytes;
    if constexpr (kDQ) store_ds_tile(ds_tile, df, wg * kBwdTile + warp * 16 + g, t);
    if constexpr (kDQ) {
      wgmma_fence();
      gemm_rs<E, DP, STEP>(acc_dk, df, st, tst);  // dK += dSᵀ·Q
      wgmma_commit();
      // dQ's part of the block's keys: both warpgroups' dSᵀ must be in the
      // tile. The tiles alternate by step: a warpgroup overwrites this one
      // at step i + 2, after the barrier of step i + 1, which the other
      // passes only once its product of step i is done.
      // The staging's part of step i − 2, which this step rewrites, must
      // have been read: its warpgroup's first thread waits for its bulk
      // reductions but the last one (step i − 1's) before the barrier.
      if (threadIdx.x % 128 == 0) bulk_wait_read<1>();
      __syncthreads();
      reduce_dq<E, DP>(p, ds_tile, sK, kvh, q0, wg, warp, lane,
                       sDQ + ((i & 1) * kBwdWarpgroups + wg) * bwd_dq_part_bytes<DP>());
    } else {
      step_product<E, DP, 0>(acc_dk, [&](auto& c) { gemm_rs<E, DP, STEP>(c, df, st, tst); });  // dK += dSᵀ·Q
    }

    // Every thread arrives (an arrive releases only its own reads); once
    // all have, step i + 2 goes to this stage and step i + TST to this
    // transposed stage.
    mbar_arrive(empty(stage));
    if constexpr (!bwd_early_refill<E, DP>()) {
      if (threadIdx.x == 0 && i + TST < n_steps) {
        mbar_wait(empty(stage), parity);
        if (i + 2 < n_steps) load_step(i + 2);
        load_transposed(i + TST);
      }
    }
    if constexpr (kVar) {
      if (++it == it0 + n_per) it = it0, ++bh;
    }
  }

  // dK and dV of key head kvh: k-like tensors have p.h / p.kv_group heads
  // per batch entry (their strides are per key head).
  const long long kv_heads = kVar ? p.h / p.kv_group : p.h;
  // Through the warpgroup's K and V tiles (store_wg_rows), which its
  // products are done reading: whole rows, 512 contiguous bytes a warp
  // store. The plain kernels stored straight from the accumulators until
  // 2026-12-06 (store_warp_rows: 4-byte stores touching 8 rows each),
  // which PC sampling put at 18 % of the BF16 D128 dK/dV kernel's samples
  // at N = 2k; through shared memory the kernel takes 13 % less there
  // (ncu, H100; cudakernels/NOTES.md, thirtieth session).
  float* dk = head_of(static_cast<float*>(p.dk), kvh, kv_heads, p.dk_batch_stride, p.dk_head_stride);
  float* dv = head_of(static_cast<float*>(p.dv), kvh, kv_heads, p.dv_batch_stride, p.dv_head_stride);
  // The fused kernel's last reduce_dq reads both warpgroups' K tiles:
  // neither may overwrite its own before the other is done. Its bulk
  // reductions complete before the block leaves the staging.
  if constexpr (kDQ) {
    if (threadIdx.x % 128 == 0) bulk_wait_done();
    __syncthreads();
  }
  // dV's dropout factor, here rather than in Pᵀ∘Z (probs_dkdv).
  const Dropout drop = dropout_of(p);
  const float dv_scale = kFull && drop.on() ? static_cast<float>(drop.scale) : 1.f;
  const float sk[2] = {scale, scale}, sv[2] = {dv_scale, dv_scale};
  store_wg_rows<DP, kWgBytes>(dk, p.dk_row_stride, k0 + wg * kBwdTile, nk, p.dim, sK + wg * kWgBytes, acc_dk, sk, wg,
                              rows_vec(dk, p.dk_row_stride, p.dim));
  store_wg_rows<DP, kWgBytes>(dv, p.dv_row_stride, k0 + wg * kBwdTile, nk, p.dim, sV + wg * kWgBytes, acc_dv, sv, wg,
                              rows_vec(dv, p.dv_row_stride, p.dim));
}

// dv_colblock is the first kernel of the split type's backward at DP =
// 128 (mma::TF32x3 with fwd_q_lo_regs' forward), where K and V with their
// lo parts (128 KB) beside the streamed Q, dO, Qᵀ and dOᵀ fit no shape of
// dkdv_colblock: dV alone, which needs only P. One block of two
// warpgroups per kBwdTile keys of head bh (plain problems: a key head is
// a query head) holds K's row image (64 KB) and streams query steps of
// kDvStep rows of Q's row image, of dOᵀ's transposed image and of the LSE
// (natural units, prep_stats' kNatural) into two stages, one a
// warpgroup: warpgroup w takes steps w, w + 2, …, so that one's softmax
// runs while the other's products keep the tensor cores busy (a lone
// warpgroup left them idle 60 % of the time, NOTES). Each step: Sᵀ = K·Qᵀ
// by split_scores_t, in the forward's order of products, so that P =
// exp(S − LSE) meets the forward's scores; then dV += Pᵀ·dO, each step's
// sum apart (step_product). Each warpgroup sums its own steps; the second
// hands its sums to the first through its stage's memory at the end, so
// dV = (Σ even steps) + (Σ odd steps), in a fixed order. Thread 0 copies
// K and the first two steps; each warpgroup's first thread refills its
// own stage once its threads are done with it (full and empty mbarriers,
// as dkdv_colblock's).
constexpr int kSplitThreads = 128;  // a block of the split dK and dQ kernels: one warpgroup
constexpr int kDvGroups = 2;
constexpr int kDvThreads = kDvGroups * 128;
constexpr int kDvStep = 32;
// bwd_dv_smem_bytes: alignment slack, K, two stages of [Q, dOᵀ] steps, two
// of the steps' LSE, five mbarriers. shapes.go repeats it (wgmmaBwdDVSmem).
template <typename E, int DP> __host__ __device__ constexpr int bwd_dv_smem_bytes() {
  return 1024 + bwd_rows_bytes<E, DP, kBwdTile>() + 4 * bwd_rows_bytes<E, DP, kDvStep>() + 2 * kDvStep * 4 + 5 * 8;
}

// split_query_steps returns how many query steps of kDvStep rows see
// keys k0 … k_last of a plain problem (every row's first key is 0), steps
// it0 … it0 + n − 1, and sets it0: the steps of dv_colblock and
// dk_colblock.
__device__ __forceinline__ int split_query_steps(const SeqMask& mk, long long k0, long long k_last, int& it0) {
  it0 = static_cast<int>(mk.query_lo(k0) / kDvStep);
  const long long q_hi = mk.query_hi(k_last);
  return q_hi > it0 * static_cast<long long>(kDvStep) ? static_cast<int>((q_hi + kDvStep - 1) / kDvStep) - it0 : 0;
}

// split_scores_t issues Sᵀ = K·Qᵀ for a step of kDvStep queries in the
// split dV and dK kernels (K the block's 64-row image at k_desc, the step's
// Q image at q_step), small products into small and the big ones'
// second chain into rest (big_rest), in the order of the D = 128
// forward's products (split_scores_rs: Q_hi·K_lo, then Q_lo·K_hi, which
// are K_lo·Q_hi, then K_hi·Q_lo here: kALoFirst), so that P = exp(S −
// LSE), once add_small and add_rest have folded them in, meets the very
// scores the forward's LSE came from.
template <typename E, int DP>
__device__ __forceinline__ void split_scores_t(float (&s)[kDvStep / 8][4], float (&small)[kDvStep / 8][4],
                                               float (&rest)[kDvStep / 8][4], uint64_t k_desc, uint32_t q_step) {
  split_scores<E, kDvStep, DP / E::kK, true>(reinterpret_cast<float(&)[kDvStep / 2]>(s),
                                             reinterpret_cast<float(&)[kDvStep / 2]>(small), k_desc, kBwdTile,
                                             desc_sw128(q_step), kDvStep);
  big_rest<E, kDvStep, DP / E::kK>(rest, k_desc, kBwdTile, desc_sw128(q_step), kDvStep);
}

// SplitStageBars are the mbarriers of the split dK and dQ kernels' one
// stage, from address bars on: fixed (the block's own rows, once), then
// full and empty for each half of the stage, a (the operands of the
// scores and dP, with the statistics in dK) and b (the transposed image
// of the gradient's product). Each half completes one phase a step, so a
// step's parity is its index's low bit in all four.
struct SplitStageBars {
  uint32_t fixed, full_a, empty_a, full_b, empty_b;
  __device__ explicit SplitStageBars(uint32_t bars)
      : fixed(bars), full_a(bars + 8), empty_a(bars + 16), full_b(bars + 24), empty_b(bars + 32) {}
  // init, by one thread before the block's first barrier.
  __device__ void init() const {
    mbar_init(fixed, 1);
    mbar_init(full_a, 1);
    mbar_init(empty_a, kSplitThreads);
    mbar_init(full_b, 1);
    mbar_init(empty_b, kSplitThreads);
    mbar_fence_init();
  }
};

// release_half ends a step's use of a stage half: every thread arrives on
// its empty mbarrier, and once all have (parity: this step's phase),
// thread 0 refills the half with the next step's copy if there is one
// (more).
template <typename F>
__device__ __forceinline__ void release_half(uint32_t empty, unsigned parity, bool more, F&& refill) {
  mbar_arrive(empty);
  if (threadIdx.x == 0 && more) {
    mbar_wait(empty, parity);
    refill();
  }
}

// split_grad_step ends a step of the split dK and dQ kernels: acc +=
// dS·B for the step's dS (dSᵀ for dK) in ds, as A fragments, and B the
// step's transposed image at shared address b (Qᵀ for dK, Kᵀ for dQ);
// then it releases the stage's half b (release_half with its empty
// mbarrier, and refill the next step's copy into it).
template <typename E, int DP, typename F>
__device__ __forceinline__ void split_grad_step(float (&acc)[DP / 8][4], const float (&ds)[kDvStep / 8][4], uint32_t b,
                                                uint32_t empty, unsigned parity, bool more, F&& refill) {
  uint32_t df[mma::frag_count<E, kDvStep>()][4];
  to_frags<E>(df, ds);
  step_product<E, DP, 0>(acc, [&](auto& c) {
    rs_product<E, DP, kDvStep / E::kK>(reinterpret_cast<float(&)[DP / 2]>(c), df, desc_sw128(b), DP);
  });
  release_half(empty, parity, more, refill);
}

template <typename E, int DP>
__device__ void dv_colblock(const Params& p) {
  static_assert(E::kParts > 1 && DP == 128, "the split type's dV kernel at DP = 128");
  static_assert(kDvGroups == 2, "a stage for each warpgroup");
  require_launch(kDvThreads, bwd_dv_smem_bytes<E, DP>());
  require_plain(p);
  using S = typename E::Storage;
  const S* __restrict__ q = static_cast<const S*>(p.q);
  const S* __restrict__ k = static_cast<const S*>(p.k);
  const S* __restrict__ dot = static_cast<const S*>(p.dout_t);
  const float* __restrict__ lse = static_cast<const float*>(p.lse_log2);  // natural units here
  constexpr int kStep = bwd_rows_bytes<E, DP, kDvStep>();  // one streamed operand of a step
  constexpr int kNS = kDvStep / 8;                         // n8 tiles of Sᵀ per warp: queries
  constexpr int kND = DP / 8;                              // n8 tiles of dV per warp
  const long long nq = p.nq, nk = p.nk;
  const long long nq_pad = bwd_padded(nq);
  const long long nk_pad = bwd_padded(nk);
  const long long blocks = (nk + kBwdTile - 1) / kBwdTile;
  const long long bh = blockIdx.x / blocks, k0 = blockIdx.x % blocks * kBwdTile;
  const SeqMask mk = seq_mask(p, bh);
  // wg: the warpgroup, whose steps are wg, wg + 2, … in stage wg; warp:
  // the warp in it.
  const int wg = threadIdx.x / 128, tw = threadIdx.x % 128;
  const int warp = tw / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  // Shared memory: K, the stages [Q, dOᵀ] 0 and 1, the LSE of stages 0 and
  // 1, then the mbarriers k_full, full[2] and empty[2].
  unsigned char* const sm = aligned_smem();
  const uint32_t sK = smem_addr(sm), sStage = sK + bwd_rows_bytes<E, DP, kBwdTile>();
  const int lse_off = bwd_rows_bytes<E, DP, kBwdTile>() + 4 * kStep;
  const uint32_t bars = sK + lse_off + 2 * kDvStep * 4, k_full = bars;
  auto full = [&](int s) { return bars + 8 + 8 * s; };
  auto empty = [&](int s) { return bars + 24 + 8 * s; };

  // The query steps whose rows see the block's keys (every row's first
  // key is 0 in a plain problem).
  const long long k_last = (k0 + kBwdTile < nk ? k0 + kBwdTile : nk) - 1;
  int it0;
  const int n_steps = split_query_steps(mk, k0, k_last, it0);
  if (threadIdx.x == 0) {
    mbar_init(k_full, 1);
    for (int s = 0; s < 2; ++s) mbar_init(full(s), 1), mbar_init(empty(s), kDvThreads / kDvGroups);
    mbar_fence_init();
  }
  __syncthreads();
  auto load_step = [&](int i) {
    const long long r0 = static_cast<long long>(it0 + i) * kDvStep;
    const int stage = i % 2;
    const uint32_t st = sStage + stage * 2 * kStep, bar = full(stage);
    mbar_arrive_expect_tx(bar, 2 * kStep + kDvStep * 4);
    copy_rows<E, DP, kDvStep>(st, q, bh, nq_pad, r0, bar);
    copy_transposed<E, DP, kDvStep>(st + kStep, dot, bh, nq_pad, r0, bar);
    bulk_copy(sK + lse_off + stage * kDvStep * 4, lse + bh * nq_pad + r0, kDvStep * 4, bar);
  };
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(k_full, bwd_rows_bytes<E, DP, kBwdTile>());
    copy_rows<E, DP, kBwdTile>(sK, k, bh, nk_pad, k0, k_full);
    for (int s = 0; s < 2 && s < n_steps; ++s) load_step(s);
  }

  const float scale = score_unit<E::kExact>(p.scale);  // natural units
  float acc_dv[kND][4];
#pragma unroll
  for (int n = 0; n < kND; ++n) acc_dv[n][0] = acc_dv[n][1] = acc_dv[n][2] = acc_dv[n][3] = 0.f;
  // This thread's keys (rows g and g + 8 of its warp's 16) and the first
  // query that sees each (qhi unused in a plain problem).
  const long long key0 = k0 + warp * 16 + g;
  int qlo[2], qhi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    qlo[h] = static_cast<int>(mk.query_lo(key0 + 8 * h));
    qhi[h] = static_cast<int>(mk.query_hi(key0 + 8 * h));
  }
  const uint64_t k_desc = desc_sw128(sK);
  mbar_wait(k_full, 0);

  for (int i = wg; i < n_steps; i += kDvGroups) {
    const int stage = wg;
    const unsigned parity = (i >> 1) & 1;
    const long long q0 = static_cast<long long>(it0 + i) * kDvStep;
    const uint32_t st = sStage + stage * 2 * kStep;
    const float* lt = reinterpret_cast<const float*>(sm + lse_off + stage * kDvStep * 4);
    mbar_wait(full(stage), parity);

    // Sᵀ = K·Qᵀ: element e of tile j is key key0 + 8·(e/2), query q0 +
    // 8j + 2t + e%2.
    float s[kNS][4], small[kNS][4], rest[kNS][4];
    wgmma_fence();
    split_scores_t<E, DP>(s, small, rest, k_desc, st);
    wgmma_commit();
    wgmma_wait<0>();
    add_small(s, small);
    add_rest(s, rest);
    // Only steps where some row misses some of the block's keys need the
    // mask: plain, the step's first row must see the block's last key.
    const bool masked = !(k_last < mk.key_hi(q0));
    uint32_t pf[mma::frag_count<E, kDvStep>()][4];
    const Mods md{};
    const AlibiRow<1> ar[2];
    with_mask(masked, [&](auto kMasked) {
      probs_dkdv<E, false, false, kMasked, false>(s, pf, scale, lt, static_cast<int>(q0), t, qlo, qhi, md, ar);
    });
    // dV += Pᵀ·dO, dO from the dOᵀ image.
    step_product<E, DP, 0>(acc_dv, [&](auto& c) {
      rs_product<E, DP, kDvStep / E::kK>(reinterpret_cast<float(&)[DP / 2]>(c), pf, desc_sw128(st + kStep), DP);
    });

    // The warpgroup's threads arrive; once all have, its first thread
    // copies its next step, i + 2, into the stage.
    mbar_arrive(empty(stage));
    if (tw == 0 && i + 2 < n_steps) {
      mbar_wait(empty(stage), parity);
      load_step(i + 2);
    }
  }
  // The second warpgroup's sums go through its stage, idle now (its last
  // copy has landed and no other comes), thread by thread: element
  // (n, e) of thread tw at float (4n + e)·128 + tw, without bank
  // conflicts; the first adds them to its own (the same elements of the
  // same keys) and stores dV.
  float* const handoff = reinterpret_cast<float*>(sm + bwd_rows_bytes<E, DP, kBwdTile>() + 2 * kStep);
  static_assert(kND * 4 * 128 * 4 <= 2 * kStep, "the sums fit a stage");
  if (wg == 1) {
#pragma unroll
    for (int n = 0; n < kND; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) handoff[(4 * n + e) * 128 + tw] = acc_dv[n][e];
  }
  __syncthreads();
  if (wg == 0) {
#pragma unroll
    for (int n = 0; n < kND; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_dv[n][e] += handoff[(4 * n + e) * 128 + tw];
    store_warp_rows<DP>(head_of(static_cast<float*>(p.dv), bh, p.h, p.dv_batch_stride, p.dv_head_stride), acc_dv,
                        k0 + warp * 16, nk, p.dim, p.dv_row_stride, 1.f);
  }
}

// dk_colblock is the second kernel of the split type's backward at DP =
// 128: dK alone. One block of one warpgroup per kBwdTile keys of head bh
// holds K's and V's row images (128 KB) and streams, in one stage (two
// would pass the 227 KB a block may have), query steps of kDvStep rows of
// Q's and dO's row images, of Qᵀ's transposed image and of the LSE and D:
// Sᵀ = K·Qᵀ as dv_colblock takes it, dPᵀ = V·dOᵀ (split_ss), P by
// probs_dkdv, dSᵀ = Pᵀ∘(dPᵀ − D), dK += dSᵀ·Q from the Qᵀ image, each
// step's sum apart; dK is scaled once at the end. The stage is two halves
// with mbarriers of their own (SplitStageBars): [Q, dO, LSE, D], free
// once dSᵀ is formed, so that the next step's copy runs under this step's
// dK product, and [Qᵀ], free after that product, whose next copy runs
// under the next step's Sᵀ and dPᵀ.
// bwd_dk_smem_bytes: alignment slack, K and V, one stage of [Q, dO, Qᵀ],
// its LSE and D, five mbarriers. shapes.go repeats it (wgmmaBwdDKSmem).
template <typename E, int DP> __host__ __device__ constexpr int bwd_dk_smem_bytes() {
  return 1024 + 2 * bwd_rows_bytes<E, DP, kBwdTile>() + 3 * bwd_rows_bytes<E, DP, kDvStep>() + 2 * kDvStep * 4 + 5 * 8;
}

template <typename E, int DP>
__device__ void dk_colblock(const Params& p) {
  static_assert(E::kParts > 1 && DP == 128, "the split type's dK kernel at DP = 128");
  require_launch(kSplitThreads, bwd_dk_smem_bytes<E, DP>());
  require_plain(p);
  using S = typename E::Storage;
  const S* __restrict__ q = static_cast<const S*>(p.q);
  const S* __restrict__ qt = static_cast<const S*>(p.q_t);
  const S* __restrict__ k = static_cast<const S*>(p.k);
  const S* __restrict__ v = static_cast<const S*>(p.v);
  const S* __restrict__ dout = static_cast<const S*>(p.dout);
  const float* __restrict__ lse = static_cast<const float*>(p.lse_log2);  // natural units here
  const float* __restrict__ dpad = static_cast<const float*>(p.delta_pad);
  constexpr int kFixed = bwd_rows_bytes<E, DP, kBwdTile>();  // K or V
  constexpr int kStep = bwd_rows_bytes<E, DP, kDvStep>();    // one streamed operand of a step
  constexpr int kNS = kDvStep / 8;
  constexpr int kND = DP / 8;
  const long long nq = p.nq, nk = p.nk;
  const long long nq_pad = bwd_padded(nq);
  const long long nk_pad = bwd_padded(nk);
  const long long blocks = (nk + kBwdTile - 1) / kBwdTile;
  const long long bh = blockIdx.x / blocks, k0 = blockIdx.x % blocks * kBwdTile;
  const SeqMask mk = seq_mask(p, bh);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  // Shared memory: K, V, the stage [Q, dO, Qᵀ], its LSE and D, then the
  // mbarriers (SplitStageBars: fixed for K and V, a for Q, dO, LSE and D,
  // b for Qᵀ).
  unsigned char* const sm = aligned_smem();
  const uint32_t sK = smem_addr(sm), sV = sK + kFixed, st = sV + kFixed;
  const int stats_off = 2 * kFixed + 3 * kStep;
  const SplitStageBars bar(sK + stats_off + 2 * kDvStep * 4);
  const float* lt = reinterpret_cast<const float*>(sm + stats_off);
  const float* dt = lt + kDvStep;

  const long long k_last = (k0 + kBwdTile < nk ? k0 + kBwdTile : nk) - 1;
  int it0;
  const int n_steps = split_query_steps(mk, k0, k_last, it0);
  if (threadIdx.x == 0) bar.init();
  __syncthreads();
  auto load_a = [&](int i) {
    const long long r0 = static_cast<long long>(it0 + i) * kDvStep;
    mbar_arrive_expect_tx(bar.full_a, 2 * kStep + 2 * kDvStep * 4);
    copy_rows<E, DP, kDvStep>(st, q, bh, nq_pad, r0, bar.full_a);
    copy_rows<E, DP, kDvStep>(st + kStep, dout, bh, nq_pad, r0, bar.full_a);
    bulk_copy(sK + stats_off, lse + bh * nq_pad + r0, kDvStep * 4, bar.full_a);
    bulk_copy(sK + stats_off + kDvStep * 4, dpad + bh * nq_pad + r0, kDvStep * 4, bar.full_a);
  };
  auto load_b = [&](int i) {
    mbar_arrive_expect_tx(bar.full_b, kStep);
    copy_transposed<E, DP, kDvStep>(st + 2 * kStep, qt, bh, nq_pad, static_cast<long long>(it0 + i) * kDvStep,
                                    bar.full_b);
  };
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(bar.fixed, 2 * kFixed);
    copy_rows<E, DP, kBwdTile>(sK, k, bh, nk_pad, k0, bar.fixed);
    copy_rows<E, DP, kBwdTile>(sV, v, bh, nk_pad, k0, bar.fixed);
    if (n_steps > 0) load_a(0), load_b(0);
  }

  const float scale = score_unit<E::kExact>(p.scale);  // natural units
  float acc_dk[kND][4];
#pragma unroll
  for (int n = 0; n < kND; ++n) acc_dk[n][0] = acc_dk[n][1] = acc_dk[n][2] = acc_dk[n][3] = 0.f;
  const long long key0 = k0 + warp * 16 + g;
  int qlo[2], qhi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    qlo[h] = static_cast<int>(mk.query_lo(key0 + 8 * h));
    qhi[h] = static_cast<int>(mk.query_hi(key0 + 8 * h));
  }
  const uint64_t k_desc = desc_sw128(sK), v_desc = desc_sw128(sV);
  mbar_wait(bar.fixed, 0);

  for (int i = 0; i < n_steps; ++i) {
    const unsigned parity = i & 1;
    const long long q0 = static_cast<long long>(it0 + i) * kDvStep;
    mbar_wait(bar.full_a, parity);

    // Sᵀ = K·Qᵀ (as dv_colblock) and dPᵀ = V·dOᵀ, two groups; element e
    // of tile j is key key0 + 8·(e/2), query q0 + 8j + 2t + e%2.
    float s[kNS][4], small[kNS][4], rest[kNS][4], dp[kNS][4];
    wgmma_fence();
    split_scores_t<E, DP>(s, small, rest, k_desc, st);
    wgmma_commit();
    split_ss<E, kDvStep, DP / E::kK, false>(reinterpret_cast<float(&)[kDvStep / 2]>(dp), v_desc, kBwdTile,
                                            desc_sw128(st + kStep), kDvStep);
    wgmma_commit();
    wgmma_wait<1>();
    add_small(s, small);
    add_rest(s, rest);
    const bool masked = !(k_last < mk.key_hi(q0));
    uint32_t pf[mma::frag_count<E, kDvStep>()][4];  // Pᵀ's fragments, which dK does not take
    const Mods md{};
    const AlibiRow<1> ar[2];
    with_mask(masked, [&](auto kMasked) {
      probs_dkdv<E, false, false, kMasked, false>(s, pf, scale, lt, static_cast<int>(q0), t, qlo, qhi, md, ar);
    });
    wgmma_wait<0>();
    ds_by_col(dp, s, dt, t);  // dSᵀ
    // Q, dO and the statistics are done with: the next step's go in while
    // dK's product runs.
    release_half(bar.empty_a, parity, i + 1 < n_steps, [&] { load_a(i + 1); });
    // dK += dSᵀ·Q, Q from the Qᵀ image.
    mbar_wait(bar.full_b, parity);
    split_grad_step<E, DP>(acc_dk, dp, st + 2 * kStep, bar.empty_b, parity, i + 1 < n_steps,
                           [&] { load_b(i + 1); });
  }
  store_warp_rows<DP>(head_of(static_cast<float*>(p.dk), bh, p.h, p.dk_batch_stride, p.dk_head_stride), acc_dk,
                      k0 + warp * 16, nk, p.dim, p.dk_row_stride, static_cast<float>(p.scale));
}

// dq_split_rowblock is the third kernel of the split type's backward at
// DP = 128: dQ. One block of one warpgroup per kBwdTile queries of head bh
// holds Q's and dO's row images (128 KB) and streams, in one stage, key
// steps of kDvStep keys of K's and V's row images and of Kᵀ's transposed
// image (96 KB): S = Q·Kᵀ with the forward's order of products
// (split_scores with A = Q: Q_hi·K_lo, then Q_lo·K_hi, then Q_hi·K_hi)
// and dP = dO·Vᵀ in a second group, P = exp(S − LSE) by row, dS = P∘(dP −
// D), dQ += dS·K from the Kᵀ image, each step apart; dQ scaled at the end.
// The stage's halves, [K, V] and [Kᵀ], are refilled apart, as dk_colblock's.
// bwd_dq_split_smem_bytes: alignment slack, Q and dO, one stage of [K, V,
// Kᵀ], five mbarriers. shapes.go repeats it (wgmmaBwdDQSplitSmem).
template <typename E, int DP> __host__ __device__ constexpr int bwd_dq_split_smem_bytes() {
  return 1024 + 2 * bwd_rows_bytes<E, DP, kBwdTile>() + 3 * bwd_rows_bytes<E, DP, kDvStep>() + 5 * 8;
}

template <typename E, int DP>
__device__ void dq_split_rowblock(const Params& p) {
  static_assert(E::kParts > 1 && DP == 128, "the split type's dQ kernel at DP = 128");
  require_launch(kSplitThreads, bwd_dq_split_smem_bytes<E, DP>());
  require_plain(p);
  using S = typename E::Storage;
  const S* __restrict__ q = static_cast<const S*>(p.q);
  const S* __restrict__ k = static_cast<const S*>(p.k);
  const S* __restrict__ kt = static_cast<const S*>(p.k_t);
  const S* __restrict__ v = static_cast<const S*>(p.v);
  const S* __restrict__ dout = static_cast<const S*>(p.dout);
  const float* __restrict__ lse = static_cast<const float*>(p.lse_log2);  // natural units here
  const float* __restrict__ dpad = static_cast<const float*>(p.delta_pad);
  constexpr int kFixed = bwd_rows_bytes<E, DP, kBwdTile>();  // Q or dO
  constexpr int kStep = bwd_rows_bytes<E, DP, kDvStep>();    // one streamed operand of a step
  constexpr int kNS = kDvStep / 8;                         // n8 tiles of S per warp: keys
  constexpr int kND = DP / 8;
  const long long nq = p.nq, nk = p.nk;
  const long long nq_pad = bwd_padded(nq);
  const long long nk_pad = bwd_padded(nk);
  const long long blocks = (nq + kBwdTile - 1) / kBwdTile;
  const long long bh = blockIdx.x / blocks, q0 = blockIdx.x % blocks * kBwdTile;
  const SeqMask mk = seq_mask(p, bh);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  // Shared memory: Q, dO, the stage [K, V, Kᵀ], then the mbarriers
  // (SplitStageBars: fixed for Q and dO, a for K and V, b for Kᵀ).
  unsigned char* const sm = aligned_smem();
  const uint32_t sQ = smem_addr(sm), sdO = sQ + kFixed, st = sdO + kFixed;
  const SplitStageBars bar(st + 3 * kStep);

  // This thread's rows g and g + 8 of its warp's 16: the keys they see
  // (0 ≤ j < vis), their LSE and D (padded rows: +inf and 0).
  const long long row0 = q0 + warp * 16 + g;
  long long vis[2];
  float l2[2], dr[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    long long lo;
    row_keys(mk, row0 + 8 * h, lo, vis[h]);
    l2[h] = __ldg(lse + bh * nq_pad + row0 + 8 * h);
    dr[h] = __ldg(dpad + bh * nq_pad + row0 + 8 * h);
  }
  const long long vis_min = vis[0] < vis[1] ? vis[0] : vis[1];
  // Key steps 0 … n_it − 1: up to the last real row's last key.
  const long long kv_end = q0 < mk.lq ? mk.key_hi((q0 + kBwdTile < mk.lq ? q0 + kBwdTile : mk.lq) - 1) : 0;
  const int n_it = static_cast<int>((kv_end + kDvStep - 1) / kDvStep);

  if (threadIdx.x == 0) bar.init();
  __syncthreads();
  auto load_a = [&](int it) {
    const long long r0 = static_cast<long long>(it) * kDvStep;
    mbar_arrive_expect_tx(bar.full_a, 2 * kStep);
    copy_rows<E, DP, kDvStep>(st, k, bh, nk_pad, r0, bar.full_a);
    copy_rows<E, DP, kDvStep>(st + kStep, v, bh, nk_pad, r0, bar.full_a);
  };
  auto load_b = [&](int it) {
    mbar_arrive_expect_tx(bar.full_b, kStep);
    copy_transposed<E, DP, kDvStep>(st + 2 * kStep, kt, bh, nk_pad, static_cast<long long>(it) * kDvStep,
                                    bar.full_b);
  };
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(bar.fixed, 2 * kFixed);
    copy_rows<E, DP, kBwdTile>(sQ, q, bh, nq_pad, q0, bar.fixed);
    copy_rows<E, DP, kBwdTile>(sdO, dout, bh, nq_pad, q0, bar.fixed);
    if (n_it > 0) load_a(0), load_b(0);
  }

  const float scale = score_unit<E::kExact>(p.scale);  // natural units
  float acc[kND][4];
#pragma unroll
  for (int n = 0; n < kND; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  const uint64_t q_desc = desc_sw128(sQ), do_desc = desc_sw128(sdO);
  mbar_wait(bar.fixed, 0);

  for (int it = 0; it < n_it; ++it) {
    const unsigned parity = it & 1;
    const long long k0 = static_cast<long long>(it) * kDvStep;
    mbar_wait(bar.full_a, parity);

    // S = Q·Kᵀ and dP = dO·Vᵀ; element e of tile j is row row0 + 8·(e/2),
    // key k0 + 8j + 2t + e%2.
    float s[kNS][4], small[kNS][4], rest[kNS][4], dp[kNS][4];
    wgmma_fence();
    split_scores<E, kDvStep, DP / E::kK, false>(reinterpret_cast<float(&)[kDvStep / 2]>(s),
                                                reinterpret_cast<float(&)[kDvStep / 2]>(small), q_desc, kBwdTile,
                                                desc_sw128(st), kDvStep);
    big_rest<E, kDvStep, DP / E::kK>(rest, q_desc, kBwdTile, desc_sw128(st), kDvStep);
    wgmma_commit();
    split_ss<E, kDvStep, DP / E::kK, false>(reinterpret_cast<float(&)[kDvStep / 2]>(dp), do_desc, kBwdTile,
                                            desc_sw128(st + kStep), kDvStep);
    wgmma_commit();
    wgmma_wait<1>();
    add_small(s, small);
    add_rest(s, rest);
    probs_by_row<kNS, E::kExact>(s, scale, l2, k0 + kDvStep > vis_min, k0, t, vis);
    wgmma_wait<0>();
    // K and V are done with: the next step's go in while dQ's product runs.
    release_half(bar.empty_a, parity, it + 1 < n_it, [&] { load_a(it + 1); });
    ds_by_row(dp, s, dr);
    // dQ += dS·K, K from the Kᵀ image.
    mbar_wait(bar.full_b, parity);
    split_grad_step<E, DP>(acc, dp, st + 2 * kStep, bar.empty_b, parity, it + 1 < n_it, [&] { load_b(it + 1); });
  }
  store_warp_rows<DP>(head_of(static_cast<float*>(p.dq), bh, p.h, p.dq_batch_stride, p.dq_head_stride), acc,
                      q0 + warp * 16, nq, p.dim, p.dq_row_stride, static_cast<float>(p.scale));
}

// dkdv_colblock reads the images p.q, p.q_t, p.k, p.v, p.dout, p.dout_t and
// the padded statistics p.lse_log2, p.delta_pad; it writes p.dk and p.dv of
// the key head blockIdx.x / key blocks (_var: block_order's). kVar: the
// _var entry point (every variant; see sm90_variants.cuh); kFull with it:
// the _full one, which adds the bias and dropout, or with kBias false the
// _drop one, dropout without a bias (it traps on a bias).
template <typename E, int DP, bool kVar, bool kFull = false, bool kBias = kFull, bool kDQ = false>
__device__ void dkdv_colblock(const Params& p) {
  require_launch(kBwdThreads, bwd_dkdv_smem_bytes<E, DP, kBias, kDQ>());
  if constexpr (kFull && !kBias) {
    if (p.bias != nullptr) __trap();
  }
  if constexpr (!kVar) {
    const long long kvh = blockIdx.x / ((p.nk + kBwdBlock - 1) / kBwdBlock);
    require_plain(p);
    dkdv_body<E, DP, false, false, false, kDQ>(p, kvh, 0, seq_mask(p, kvh));
  } else {
    // Longest blocks first (block_order): under a causal mask (a right
    // bound) the first keys see the most rows; under a left bound alone,
    // the last.
    long long kvh, kblk;
    block_order(blockIdx.x, static_cast<unsigned>((p.nk + kBwdBlock - 1) / kBwdBlock),
                p.mask_right < 0 && p.mask_left >= 0, kvh, kblk);
    // A group lies in one batch entry, so its first head's mask is all's.
    dkdv_body<E, DP, true, kFull, kBias>(p, kvh, kblk, seq_mask(p, kvh * p.kv_group));
  }
}


// dq_body is dq_rowblock for query head bh of mask mk and score modifiers
// md (kVar only), and query block qblk (kVar only: block_order's; the plain
// kernel's is blockIdx.x mod the blocks per head).
template <typename E, int DP, bool kVar, bool kFull, bool kBias>
__device__ __forceinline__ void dq_body(const Params& p, long long bh, long long qblk, const SeqMask& mk,
                                        const Mods& md) {
  static_assert(kVar || !kFull, "the _full kernels compute the _var variants too");
  static_assert(kFull || !kBias, "the bias tiles belong to the _full kernel");
  static_assert(E::kParts == 1 || !kVar, "the split type computes plain problems");
  using S = typename E::Storage;
  const long long nq = p.nq, nk = p.nk;
  const S* __restrict__ q = static_cast<const S*>(p.q);
  const S* __restrict__ k = static_cast<const S*>(p.k);
  [[maybe_unused]] const S* __restrict__ kt = static_cast<const S*>(p.k_t);
  const S* __restrict__ v = static_cast<const S*>(p.v);
  const S* __restrict__ dout = static_cast<const S*>(p.dout);
  const float* __restrict__ lse2 = static_cast<const float*>(p.lse_log2);
  const float* __restrict__ dpad = static_cast<const float*>(p.delta_pad);
  constexpr int STEP = bwd_step<E, DP>();
  constexpr int kFixed = bwd_rows_bytes<E, DP, kBwdBlock>();  // Q or dO
  constexpr int kStep = bwd_rows_bytes<E, DP, STEP>();        // one streamed operand
  constexpr int kNS = STEP / 8;  // n8 tiles of S per warp: keys
  constexpr int kND = DP / 8;
  constexpr int kOps = bwd_dq_ops<E>();

  unsigned char* const sm = aligned_smem();
  const uint32_t base = smem_addr(sm);
  // Q and dO, then stages of [K, V, (bwd_t_images) Kᵀ], (kBias) two bias
  // tiles, then the mbarriers qd_full, full[2], empty[2].
  const uint32_t sQ = base, sdO = sQ + kFixed, sStage = sdO + kFixed;
  constexpr int kBiasTile = kBwdBlock * STEP;  // floats: [queries, keys]
  const uint32_t bars = sStage + 2 * kOps * kStep + (kBias ? 2 * kBiasTile * 4 : 0);
  const uint32_t qd_full = bars;
  auto full = [&](int s) { return bars + 8 + 8 * s; };
  auto empty = [&](int s) { return bars + 24 + 8 * s; };

  const long long nq_pad = bwd_padded(nq);
  const long long nk_pad = bwd_padded(nk);
  const long long blocks = (nq + kBwdBlock - 1) / kBwdBlock;
  const long long q0 = (kVar ? qblk : blockIdx.x % blocks) * kBwdBlock;
  const int wg = warp_uniform(threadIdx.x / 128), warp = warp_uniform(threadIdx.x / 32 % 4), lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  // Grouped-query attention: K, V and Kᵀ of the key head of bh's group.
  const long long kvh = kVar ? kv_pair(p, bh) : bh;
  if constexpr (kVar) {
    // No row sees a key (padding rows, or a window past every key): dQ = 0,
    // before any barrier, copy or statistic is read (the images and
    // statistics of padding rows are not even written).
    if (q0 >= mk.lq || mk.key_hi((q0 + kBwdBlock < mk.lq ? q0 + kBwdBlock : mk.lq) - 1) <= mk.key_lo(q0)) {
      zero_rows<kBwdThreads>(head_of(static_cast<float*>(p.dq), bh, p.h, p.dq_batch_stride, p.dq_head_stride), q0,
                             q0 + kBwdBlock < nq ? q0 + kBwdBlock : nq, p.dim, p.dq_row_stride);
      return;
    }
  }

  // This thread's rows g and g+8 of its warp's 16: keys they see (lo ≤ j <
  // vis; row_keys), LSE in log2 units and D (padded rows: +inf and 0, and
  // no key).
  const long long row0 = q0 + wg * kBwdTile + warp * 16 + g;
  long long vis[2], lo[2];
  float l2[2], dr[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long row = row0 + 8 * h;
    row_keys(mk, row, lo[h], vis[h]);
    // __ldg: read-only for the whole kernel, which nvcc cannot prove
    // when the pointers come from p (it did from __restrict__ arguments).
    l2[h] = __ldg(lse2 + bh * nq_pad + row);
    dr[h] = __ldg(dpad + bh * nq_pad + row);
  }
  const long long vis_min = vis[0] < vis[1] ? vis[0] : vis[1], lo_max = lo[0] > lo[1] ? lo[0] : lo[1];
  const int lo32[2] = {static_cast<int>(lo[0]), static_cast<int>(lo[1])};
  const int hi32[2] = {static_cast<int>(vis[0]), static_cast<int>(vis[1])};
  // Block skipping as in the forward: key steps t0 … t0 + n_it − 1, from
  // the first row's first key (plain: 0) to the last real row's last; a
  // block of padding rows runs none and writes dQ = 0.
  long long kv_begin = 0, kv_end = 0;
  if (q0 < mk.lq) {
    kv_begin = mk.key_lo(q0);
    kv_end = mk.key_hi((q0 + kBwdBlock < mk.lq ? q0 + kBwdBlock : mk.lq) - 1);
  }
  const int t0 = kVar ? static_cast<int>(kv_begin / STEP) : 0;
  const int n_it = static_cast<int>((kv_end + STEP - 1) / STEP) - t0;

  if (threadIdx.x == 0) {
    mbar_init(qd_full, 1);
    for (int s = 0; s < 2; ++s) mbar_init(full(s), 1), mbar_init(empty(s), kBwdThreads);
    mbar_fence_init();
  }
  __syncthreads();
  auto load_step = [&](int stage, int it) {
    const long long r0 = static_cast<long long>(t0 + it) * STEP;
    const uint32_t st = sStage + stage * kOps * kStep, bar = full(stage);
    mbar_arrive_expect_tx(bar, kOps * kStep);
    copy_rows<E, DP, STEP>(st, k, kvh, nk_pad, r0, bar);
    copy_rows<E, DP, STEP>(st + kStep, v, kvh, nk_pad, r0, bar);
    if constexpr (bwd_t_images<E>()) copy_transposed<E, DP, STEP>(st + 2 * kStep, kt, kvh, nk_pad, r0, bar);
  };
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(qd_full, 2 * kFixed);
    copy_rows<E, DP, kBwdBlock>(sQ, q, bh, nq_pad, q0, qd_full);
    copy_rows<E, DP, kBwdBlock>(sdO, dout, bh, nq_pad, q0, qd_full);
    for (int s = 0; s < 2 && s < n_it; ++s) load_step(s, s);
  }

  const float scale_log2 = score_unit<E::kExact>(p.scale);  // the split type: natural units
  const float scale = static_cast<float>(p.scale);
  float acc[kND][4];
#pragma unroll
  for (int n = 0; n < kND; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  constexpr int kWgBytes = bwd_rows_bytes<E, DP, kBwdTile>();
  // kBias: key step it's bias goes into tile it % 2, copied by every
  // thread one step ahead; has_bias is uniform over the grid.
  [[maybe_unused]] const Extras ex = kFull ? extras_of(p, bh) : Extras{};
  [[maybe_unused]] const bool has_bias = kBias && ex.bias != nullptr;
  [[maybe_unused]] float* const bias_tiles = reinterpret_cast<float*>(sm + (sStage + 2 * kOps * kStep - base));
  auto load_bias = [&](int it) {
    mma::cp_bias_tile<kBwdBlock, STEP, STEP, kBwdThreads, DqBiasSwizzle>(
        bias_tiles + (it & 1) * kBiasTile, ex.bias, q0, mk.lq, static_cast<long long>(t0 + it) * STEP, nk,
        mma::bias_tile_aligned(ex.bias, nk));
    mma::cp_async_commit();
  };
  if constexpr (kBias) {
    if (has_bias && n_it > 0) load_bias(0);
  }
  // kBias: this thread's first score in a bias tile (row row0 − q0, key
  // 2t; DqBiasSwizzle moves its 8-key groups by g, row_bias_pairs's jx).
  [[maybe_unused]] const int bias_row = wg * kBwdTile + warp * 16 + g;
  [[maybe_unused]] const long long rows[2] = {row0, row0 + 8};
  mbar_wait(qd_full, 0);

  for (int it = 0; it < n_it; ++it) {
    const int stage = it & 1;
    const unsigned parity = (it >> 1) & 1;
    const long long k0 = static_cast<long long>(t0 + it) * STEP;
    const uint32_t st = sStage + stage * kOps * kStep;
    if constexpr (kBias) {
      if (has_bias) {
        // This step's bias has landed for every thread, and every thread
        // is done with the last step's tile, which takes the next step's.
        mma::cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < n_it) load_bias(it + 1);
      }
    }
    mbar_wait(full(stage), parity);

    // S = Q·Kᵀ and dP = dO·Vᵀ; element e of tile j is row row0 + 8·(e/2),
    // key k0 + 8j + 2t + e%2. Keys outside a row's range (past nk too:
    // those were zero-filled) are masked where a step reaches them.
    float s[kNS][4], dp[kNS][4];
    two_products<E, DP, STEP, true>(s, dp, sQ + wg * kWgBytes, st, sdO + wg * kWgBytes, st + kStep, [&] {
      if constexpr (bwd_early_refill<E, DP>()) {
        if (threadIdx.x == 0 && it > 0 && it + 1 < n_it) {
          mbar_wait(empty((it - 1) & 1), ((it - 1) >> 1) & 1);  // every thread is done with step it − 1
          load_step((it - 1) & 1, it + 1);
        }
      }
    });
    if constexpr (!kVar) {
      probs_by_row<kNS, E::kExact>(s, scale_log2, l2, k0 + STEP > vis_min, k0, t, vis);
    } else {
      const bool masked = !(lo_max <= k0 && k0 + STEP <= vis_min);
      // Each row's ALiBi bias over the step (a − k0 − 2t: column offset 0);
      // a row crossing its diagonal takes the masked copy.
      AlibiRow<-1> ar[2];
      bool uniform = true;
      if (md.slope_l2 != 0.f) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
          uniform &= ar[h].set(offset_of(row0 + 8 * h, md.shift, k0) - 2 * t, STEP - 7, md.slope_l2);
      }
      [[maybe_unused]] const float* sb = nullptr;
      if constexpr (kBias) {
        if (has_bias) sb = bias_tiles + (it & 1) * kBiasTile + bias_row * STEP + 2 * t;
      }
      with_variant_of<kFull>(masked || !uniform, md.on, md.capped, [&](auto kMasked, auto kMod, auto kCap) {
        probs_dq<E, kMod, kMasked, kCap, kNS, kFull, true, STEP>(s, scale_log2, l2, static_cast<int>(k0), t, lo32, hi32,
                                                                 md, ar, sb, g);
      });
    }
    wgmma_wait<0>();
    if constexpr (kFull) {
      if (ex.drop.on()) drop_by_row(dp, ex, rows, k0, t, ex.drop_scale());
    }
    ds_by_row(dp, s, dr);  // with kMod, s holds P·dsoft: dS·dsoft
    if constexpr (kFull) zero_unseen(dp, k0, t, lo32, hi32);
    uint32_t df[mma::frag_count<E, STEP>()][4];
    to_frags<E>(df, dp);
    step_product<E, DP, 0>(acc, [&](auto& c) { gemm_rs<E, DP, STEP>(c, df, st, st + 2 * kStep); });  // dQ += dS·K

    mbar_arrive(empty(stage));  // every thread: an arrive releases only its own reads
    if constexpr (!bwd_early_refill<E, DP>()) {
      if (threadIdx.x == 0 && it + 2 < n_it) {
        mbar_wait(empty(stage), parity);
        load_step(stage, it + 2);
      }
    }
  }

  if constexpr (!kVar) {
    // Straight from the accumulators (store_warp_rows): through shared
    // memory as below, the BF16 D128 kernel took as long at N = 2k and 8 %
    // longer at N = 16k (ncu, H100, 2026-12-06), where dkdv_body's dK and
    // dV gained. The split type (FP32 at DP = 64) keeps 4-byte stores:
    // with pairs its D64 backward ranged −0.7 to +0.8 % (H100, 2026-12-06).
    store_warp_rows<DP, E::kParts == 1>(head_of(static_cast<float*>(p.dq), bh, p.h, p.dq_batch_stride, p.dq_head_stride),
                              acc, q0 + wg * kBwdTile + warp * 16, nq, p.dim, p.dq_row_stride,
                              static_cast<float>(p.scale));
  } else {
    // Through the warpgroup's Q tile (store_wg_rows), which its products
    // are done reading.
    float* dq = head_of(static_cast<float*>(p.dq), bh, p.h, p.dq_batch_stride, p.dq_head_stride);
    const float sq[2] = {scale, scale};
    store_wg_rows<DP, kWgBytes>(dq, p.dq_row_stride, q0 + wg * kBwdTile, nq, p.dim, sQ + wg * kWgBytes, acc, sq, wg,
                                rows_vec(dq, p.dq_row_stride, p.dim));
  }
}

// dq_rowblock reads the images p.q, p.k, p.k_t, p.v, p.dout and the padded
// statistics; it writes p.dq. kVar: the _var entry point (every variant;
// see sm90_variants.cuh); kFull with it: the _full one (the bias and
// dropout), or with kBias false the _drop one (dropout without a bias; it
// traps on a bias).
template <typename E, int DP, bool kVar, bool kFull = false, bool kBias = kFull>
__device__ void dq_rowblock(const Params& p) {
  require_launch(kBwdThreads, bwd_dq_smem_bytes<E, DP, kBias>());
  if constexpr (kFull && !kBias) {
    if (p.bias != nullptr) __trap();
  }
  if constexpr (!kVar) {
    const long long bh = blockIdx.x / ((p.nq + kBwdBlock - 1) / kBwdBlock);
    const SeqMask mk = seq_mask(p, bh);
    require_plain(p);
    dq_body<E, DP, false, false, false>(p, bh, 0, mk, Mods{});
  } else {
    // Longest blocks first (block_order), as in the forward.
    long long bh, qblk;
    block_order(blockIdx.x, static_cast<unsigned>((p.nq + kBwdBlock - 1) / kBwdBlock), p.mask_right >= 0, bh, qblk);
    const SeqMask mk = seq_mask(p, bh);
    dq_body<E, DP, true, kFull, kBias>(p, bh, qblk, mk, mods_of(score_mod<float>(p, bh, mk), static_cast<float>(p.scale)));
  }
}

// dbias_tile writes dBias for kBwdBlock queries × kBwdTile keys of one bias
// slice: the sum of dS = P∘(Z∘dP − D) (no softcap derivative: the bias is
// added after the softcap) over every query pair that reads the slice,
// batch entries then heads in order, and 0 where no pair sees the entry.
// It reads the images and padded statistics the dK/dV and dQ kernels read
// (p.q, p.dout, p.k, p.v, p.lse_log2, p.delta_pad). The host launches it
// only when the caller wants dBias, with the whole call in one launch
// (pair0 = 0), over slices × query blocks × key tiles.
template <typename E, int DP>
__device__ void dbias_tile(const Params& p) {
  using S = typename E::Storage;
  require_launch(kBwdThreads, bwd_dbias_smem_bytes<E, DP>());
  constexpr int BK = kBwdTile;  // keys per tile
  constexpr int kNS = BK / 8;   // n8 tiles of S per warp
  constexpr int kQBytes = bwd_rows_bytes<E, DP, kBwdBlock>(), kKBytes = bwd_rows_bytes<E, DP, BK>();
  constexpr int kStage = 2 * kQBytes + 2 * kKBytes;  // Q, dO, K, V
  constexpr int kWgBytes = bwd_rows_bytes<E, DP, kBwdTile>();
  const long long nq = p.nq, nk = p.nk;
  const S* __restrict__ q = static_cast<const S*>(p.q);
  const S* __restrict__ k = static_cast<const S*>(p.k);
  const S* __restrict__ v = static_cast<const S*>(p.v);
  const S* __restrict__ dout = static_cast<const S*>(p.dout);
  const float* __restrict__ lse2 = static_cast<const float*>(p.lse_log2);
  const float* __restrict__ dpad = static_cast<const float*>(p.delta_pad);
  const long long nq_pad = bwd_padded(nq);
  const long long nk_pad = bwd_padded(nk);

  unsigned char* const sm = aligned_smem();
  const uint32_t base = smem_addr(sm);
  // Two stages of [Q, dO, K, V], the bias tile, then the mbarriers full[2]
  // and empty[2].
  auto sQ = [&](int s) { return base + s * kStage; };
  float* const bias_tile = reinterpret_cast<float*>(sm + 2 * kStage);
  const uint32_t bars = base + 2 * kStage + kBwdBlock * BK * 4;
  auto full = [&](int s) { return bars + 8 * s; };
  auto empty = [&](int s) { return bars + 16 + 8 * s; };

  const long long q_tiles = (nq + kBwdBlock - 1) / kBwdBlock, k_tiles = (nk + BK - 1) / BK;
  const long long slice = blockIdx.x / (q_tiles * k_tiles);
  const long long q0 = blockIdx.x / k_tiles % q_tiles * kBwdBlock, k0 = blockIdx.x % k_tiles * BK;
  const int wg = warp_uniform(threadIdx.x / 128), warp = warp_uniform(threadIdx.x / 32 % 4), lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const long long row0 = q0 + wg * kBwdTile + warp * 16 + g;
  const long long rows[2] = {row0, row0 + 8};
  const BiasSlice bs = bias_slice(p, slice);
  const long long heads = bs.heads;
  const float scale_log2 = static_cast<float>(p.scale) * kLog2e;

  // The pairs that add to the tile, batch entries then heads in order:
  // entries whose masks leave the tile unseen add nothing. seen_from
  // returns the first such entry from b on (bs.b_hi: none left), advance
  // the pair after (b, h).
  auto seen_from = [&](long long b) {
    while (b < bs.b_hi && !seq_mask(p, b * heads).tile_seen(q0, kBwdBlock, k0, BK)) ++b;
    return b;
  };
  auto advance = [&](long long& b, long long& h) {
    if (++h == bs.h_hi) b = seen_from(b + 1), h = bs.h_lo;
  };
  // load_pair starts the bulk copies of pair (b, h)'s tiles into stage st.
  auto load_pair = [&](int st, long long b, long long h) {
    const long long bh = b * heads + h, kvh = kv_pair(p, bh);
    const uint32_t bar = full(st);
    mbar_arrive_expect_tx(bar, kStage);
    copy_rows<E, DP, kBwdBlock>(sQ(st), q, bh, nq_pad, q0, bar);
    copy_rows<E, DP, kBwdBlock>(sQ(st) + kQBytes, dout, bh, nq_pad, q0, bar);
    copy_rows<E, DP, BK>(sQ(st) + 2 * kQBytes, k, kvh, nk_pad, k0, bar);
    copy_rows<E, DP, BK>(sQ(st) + 2 * kQBytes + kKBytes, v, kvh, nk_pad, k0, bar);
  };

  if (threadIdx.x == 0) {
    for (int st = 0; st < 2; ++st) mbar_init(full(st), 1), mbar_init(empty(st), kBwdThreads);
    mbar_fence_init();
  }
  __syncthreads();
  long long b = seen_from(bs.b_lo), h = bs.h_lo;
  // Thread 0's cursor: the next pair to load. The first two go into the
  // two stages now; pair i + 1 goes into the stage of pair i − 1 while
  // pair i's products run.
  long long nb = b, nh = h;
  if (threadIdx.x == 0) {
    for (int st = 0; st < 2 && nb < bs.b_hi; ++st) {
      load_pair(st, nb, nh);
      advance(nb, nh);
    }
  }
  // Every pair that reads the slice adds the same bias tile: one copy
  // (zeros past nq and nk: those rows and keys are seen by no pair).
  const float* bias = static_cast<const float*>(p.bias) + bs.sb * p.bias_batch_stride + bs.sh * p.bias_head_stride;
  mma::cp_bias_tile<kBwdBlock, BK, BK, kBwdThreads, DqBiasSwizzle>(bias_tile, bias, q0, nq, k0, nk,
                                                                   mma::bias_tile_aligned(bias, nk));
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  __syncthreads();  // the bias tile has landed for every thread
  const float* sb = bias_tile + (wg * kBwdTile + warp * 16 + g) * BK + 2 * t;  // this thread's first score (DqBiasSwizzle: jx = g)

  float acc[kNS][4];
#pragma unroll
  for (int j = 0; j < kNS; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

  for (int i = 0; b < bs.b_hi; ++i) {
    const int stage = i & 1;
    const unsigned parity = (i >> 1) & 1;
    const long long bh = b * heads + h;
    const SeqMask mk = seq_mask(p, bh);
    int lo32[2], hi32[2];
    float l2[2], dr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      long long lo, hi;
      row_keys(mk, rows[r], lo, hi);
      lo32[r] = static_cast<int>(lo), hi32[r] = static_cast<int>(hi);
      l2[r] = __ldg(lse2 + bh * nq_pad + rows[r]);
      dr[r] = __ldg(dpad + bh * nq_pad + rows[r]);
    }
    const int lo_max = lo32[0] > lo32[1] ? lo32[0] : lo32[1], hi_min = hi32[0] < hi32[1] ? hi32[0] : hi32[1];
    const bool masked = k0 < lo_max || k0 + BK > hi_min;
    const Mods md = mods_of(score_mod<float>(p, bh, mk), static_cast<float>(p.scale));
    const Extras ex = extras_of(p, bh);
    mbar_wait(full(stage), parity);

    float s[kNS][4], dp[kNS][4];
    const uint32_t st = sQ(stage);
    two_products<E, DP, BK, true>(s, dp, st + wg * kWgBytes, st + 2 * kQBytes, st + kQBytes + wg * kWgBytes,
                            st + 2 * kQBytes + kKBytes, [&] {
                              if (threadIdx.x == 0 && i > 0 && nb < bs.b_hi) {
                                mbar_wait(empty((i - 1) & 1), ((i - 1) >> 1) & 1);  // every thread is done with pair i − 1
                                load_pair((i - 1) & 1, nb, nh);
                                advance(nb, nh);
                              }
                            });
    AlibiRow<-1> ar[2];
    bool uniform = true;
    if (md.slope_l2 != 0.f) {
#pragma unroll
      for (int r = 0; r < 2; ++r)
        uniform &= ar[r].set(offset_of(rows[r], md.shift, k0) - 2 * t, BK - 7, md.slope_l2);
    }
    with_variant_of<true>(masked || !uniform, md.on, md.capped, [&](auto kMasked, auto kMod, auto kCap) {
      probs_dq<E, kMod, kMasked, kCap, kNS, true, false, BK>(s, scale_log2, l2, static_cast<int>(k0), t, lo32, hi32,
                                                             md, ar, sb, g);
    });
    wgmma_wait<0>();
    mbar_arrive(empty(stage));  // every thread: this pair's tiles are read
    if (ex.drop.on()) drop_by_row(dp, ex, rows, k0, t, ex.drop_scale());
    ds_by_row(dp, s, dr);
    zero_unseen(dp, k0, t, lo32, hi32);
#pragma unroll
    for (int j = 0; j < kNS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] += dp[j][e];
    advance(b, h);
  }

  store_dbias(p, bs, acc, rows, k0, t);
}

}  // namespace sm90
}  // namespace flash
