// Backward pass for Hopper (sm_90a): warpgroup MMA on tile images brought
// in by bulk copies, fp32 accumulation, float32 gradients out. The same
// algorithm as bwd_mma.cuh (two deterministic kernels, P recomputed from
// the saved LSE, P and dS rounded to the operand type before they
// multiply), on the sm90.cuh layout.
//
// Every wgmma operand must be K-major, so the conversions write each input
// in the layout its products need, in tiles of 64 rows (kBwdTile), padded
// with zeros to whole multiples of kBwdPad rows: row images of Q, K, V and
// dO (to_image_rows), and transposed images Qᵀ, Kᵀ and dOᵀ (to_image_vt,
// [DP, 64] per 64 rows; for TF32 with the rows permuted in groups of 8
// like the forward's Vᵀ). prep_stats writes the LSE in log2 units and D,
// padded with +inf and 0, so that padded queries get P = 0.
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
//                  from registers and the transposed images dOᵀ and Qᵀ as B
//                  operands.
//   dq_rowblock    one block per kBwdBlock queries loops over key steps:
//                  S = Q·Kᵀ, dP = dO·Vᵀ, dQ += dS·K (Kᵀ image).
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
#pragma once
#include "common.cuh"
#include "sm90.cuh"

namespace flash {
namespace sm90 {

constexpr int kBwdTile = 64;  // rows of every image tile, and of a warpgroup's share of a block
constexpr int kBwdPad = 128;  // images and statistics are padded to a multiple of this many rows
constexpr float kLog2e = 1.4426950408889634f;

constexpr int kBwdWarpgroups = 2;
constexpr int kBwdThreads = 128 * kBwdWarpgroups;
constexpr int kBwdBlock = kBwdTile * kBwdWarpgroups;  // keys per dK/dV block, queries per dQ block

// bwd_step and bwd_tstages: streamed rows per step and stages of Qᵀ and dOᵀ
// for operand type E and DP (see above). select.go repeats them
// (wgmmaBwdShape).
template <typename E, int DP> __host__ __device__ constexpr bool bwd_wide() {
  return sizeof(typename E::Storage) == 4 && DP > 64;
}
template <typename E, int DP> __host__ __device__ constexpr int bwd_step() { return bwd_wide<E, DP>() ? 32 : 64; }
template <typename E, int DP> __host__ __device__ constexpr int bwd_tstages() { return bwd_wide<E, DP>() ? 1 : 2; }
// bwd_early_refill: the stages of step it − 1 are refilled while step it's
// first products run (see above), in both kernels.
template <typename E, int DP> __host__ __device__ constexpr bool bwd_early_refill() { return !bwd_wide<E, DP>(); }
// bwd_rows_bytes is the size of ROWS rows of an image of E at DP columns.
template <typename E, int DP, int ROWS> __host__ __device__ constexpr int bwd_rows_bytes() {
  return ROWS * DP * static_cast<int>(sizeof(typename E::Storage));
}
// Shared memory of dkdv_colblock: alignment slack, K and V, two stages of
// Q and dO steps, bwd_tstages of Qᵀ and dOᵀ, two stages of the steps' LSE
// and D, seven mbarriers. select.go repeats both layouts (wgmmaBwdSmem).
template <typename E, int DP> __host__ __device__ constexpr int bwd_dkdv_smem_bytes() {
  constexpr int kStep = bwd_step<E, DP>();
  return 1024 + 2 * bwd_rows_bytes<E, DP, kBwdBlock>() + 2 * (2 + bwd_tstages<E, DP>()) * bwd_rows_bytes<E, DP, kStep>() +
         4 * kStep * 4 + 7 * 8;
}
// Shared memory of dq_rowblock: slack, Q and dO, two stages of K, V and Kᵀ
// steps, five mbarriers.
template <typename E, int DP> __host__ __device__ constexpr int bwd_dq_smem_bytes() {
  return 1024 + 2 * bwd_rows_bytes<E, DP, kBwdBlock>() + 6 * bwd_rows_bytes<E, DP, bwd_step<E, DP>()>() + 5 * 8;
}

// prep_stats writes p.lse_log2[bh, i] = log2e·lse[bh, i] and
// p.delta_pad[bh, i] = delta[bh, i] for i < nq, +inf and 0 up to nq rounded
// up to kBwdPad; grid-stride.
__device__ void prep_stats(const Params& p) {
  const float* __restrict__ lse = static_cast<const float*>(p.lse);
  const float* __restrict__ delta = static_cast<const float*>(p.delta);
  float* __restrict__ lse2 = static_cast<float*>(p.lse_log2);
  float* __restrict__ dpad = static_cast<float*>(p.delta_pad);
  const long long nq = p.nq, nq_pad = (nq + kBwdPad - 1) / kBwdPad * kBwdPad;
  const long long n = p.b * p.h * nq_pad, stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const long long bh = i / nq_pad, r = i % nq_pad;
    lse2[i] = r < nq ? lse[bh * nq + r] * kLog2e : Math<float>::inf();
    dpad[i] = r < nq ? delta[bh * nq + r] : 0.f;
  }
}

// aligned_smem is the dynamic shared buffer rounded up to 1024 bytes, the
// alignment of the 128-byte swizzle.
__device__ __forceinline__ unsigned char* aligned_smem() {
  return smem + ((1024u - (smem_addr(smem) & 1023u)) & 1023u);
}

// store_warp_rows writes scale·c, a warp's accumulators for rows row0 +
// (g, g+8) of an [n, dim] matrix y with row stride ld, skipping rows ≥ n and
// columns ≥ dim.
template <int DP>
__device__ __forceinline__ void store_warp_rows(float* y, const float (&c)[DP / 8][4], long long row0, long long n,
                                                long long dim, long long ld, float scale) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long row = row0 + g + 8 * h;
    if (row >= n) continue;
    float* yr = y + row * ld;
#pragma unroll
    for (int j = 0; j < DP / 8; ++j) {
      const int col = j * 8 + 2 * t;
      if (col < dim) yr[col] = c[j][2 * h] * scale;
      if (col + 1 < dim) yr[col + 1] = c[j][2 * h + 1] * scale;
    }
  }
}

// gemm_ss sets c = A·Bᵀ over DP: A a 64-row K-major image at a, B a
// STEP-row one at b (both shared addresses).
template <typename E, int DP, int STEP>
__device__ __forceinline__ void gemm_ss(float (&c)[STEP / 8][4], uint32_t a, uint32_t b) {
  const uint64_t da = desc_sw128(a), db = desc_sw128(b);
#pragma unroll
  for (int kc = 0; kc < DP / E::kK; ++kc)
    Wgmma<E, STEP>::ss(reinterpret_cast<float(&)[STEP / 2]>(c), da + (k_slice_offset(kc, kBwdTile) >> 4),
                       db + (k_slice_offset(kc, STEP) >> 4), kc > 0);
}

// gemm_rs adds A·B to c: A the STEP-column operand in registers, B a
// transposed [DP, STEP] image at b.
template <typename E, int DP, int STEP>
__device__ __forceinline__ void gemm_rs(float (&c)[DP / 8][4], const uint32_t (&a)[STEP / E::kK][4], uint32_t b) {
  const uint64_t db = desc_sw128(b);
#pragma unroll
  for (int kk = 0; kk < STEP / E::kK; ++kk)
    Wgmma<E, DP>::rs(reinterpret_cast<float(&)[DP / 2]>(c), a[kk], db + (k_slice_offset(kk, DP) >> 4));
}

// two_products issues c1 = A1·B1ᵀ and c2 = A2·B2ᵀ (gemm_ss) as two wgmma
// groups, calls meanwhile() while they run and waits for the first: the
// caller works on c1 while c2 computes, then waits for it with wgmma_wait.
template <typename E, int DP, int STEP, typename F>
__device__ __forceinline__ void two_products(float (&c1)[STEP / 8][4], float (&c2)[STEP / 8][4], uint32_t a1,
                                             uint32_t b1, uint32_t a2, uint32_t b2, F&& meanwhile) {
  wgmma_fence();
  gemm_ss<E, DP, STEP>(c1, a1, b1);
  wgmma_commit();
  gemm_ss<E, DP, STEP>(c2, a2, b2);
  wgmma_commit();
  meanwhile();
  wgmma_wait<1>();
}

template <typename E, int N>
__device__ __forceinline__ void to_frags(uint32_t (&a)[N * 8 / E::kK][4], const float (&s)[N][4]) {
#pragma unroll
  for (int kk = 0; kk < N * 8 / E::kK; ++kk) E::p_frag(a[kk], s, kk);
}

// copy_rows starts the bulk copies of rows [r0, r0 + ROWS) of head bh of a
// row image (rows_pad rows per head, tiles of kBwdTile) into a ROWS-row
// image at dst: one copy per 128-byte panel, since a tile keeps each
// panel's rows together. r0 and ROWS must not cross a tile unless ROWS
// covers whole tiles.
template <typename E, int DP, int ROWS>
__device__ __forceinline__ void copy_rows(uint32_t dst, const typename E::Storage* img, long long bh,
                                          long long rows_pad, long long r0, uint32_t bar) {
  const unsigned char* src = reinterpret_cast<const unsigned char*>(img + (bh * rows_pad + r0) * DP);
  if constexpr (ROWS % kBwdTile == 0) {
    bulk_copy(dst, src, bwd_rows_bytes<E, DP, ROWS>(), bar);
  } else {
    static_assert(kBwdTile % ROWS == 0, "a partial step stays inside one tile");
    constexpr int kPanels = DP * static_cast<int>(sizeof(typename E::Storage)) / 128;
    const int within = static_cast<int>(r0 % kBwdTile);
    src -= within * DP * static_cast<long long>(sizeof(typename E::Storage));  // the tile's start
#pragma unroll
    for (int p = 0; p < kPanels; ++p)
      bulk_copy(dst + p * ROWS * 128, src + (p * kBwdTile + within) * 128, ROWS * 128, bar);
  }
}

// copy_transposed starts the bulk copy of columns [r0, r0 + ROWS) of head
// bh of a transposed image (one [DP, kBwdTile] image per tile of rows) into
// a [DP, ROWS] image at dst. ROWS columns are whole 128-byte panels,
// which lie one after the other.
template <typename E, int DP, int ROWS>
__device__ __forceinline__ void copy_transposed(uint32_t dst, const typename E::Storage* img, long long bh,
                                                long long rows_pad, long long r0, uint32_t bar) {
  constexpr int kEs = static_cast<int>(sizeof(typename E::Storage));
  static_assert(ROWS * kEs % 128 == 0, "whole panels");
  const long long tile0 = r0 / kBwdTile * kBwdTile;
  const unsigned char* src = reinterpret_cast<const unsigned char*>(img + (bh * rows_pad + tile0) * DP);
  bulk_copy(dst, src + (r0 - tile0) * kEs / 128 * DP * 128, bwd_rows_bytes<E, DP, ROWS>(), bar);
}

// dkdv_colblock reads the images p.q, p.q_t, p.k, p.v, p.dout, p.dout_t and
// the padded statistics p.lse_log2, p.delta_pad; it writes p.dk and p.dv.
template <typename E, int DP>
__device__ void dkdv_colblock(const Params& p) {
  using S = typename E::Storage;
  const long long nq = p.nq, nk = p.nk;
  const bool causal = p.causal != 0;
  const S* __restrict__ q = static_cast<const S*>(p.q);
  const S* __restrict__ qt = static_cast<const S*>(p.q_t);
  const S* __restrict__ k = static_cast<const S*>(p.k);
  const S* __restrict__ v = static_cast<const S*>(p.v);
  const S* __restrict__ dout = static_cast<const S*>(p.dout);
  const S* __restrict__ dot = static_cast<const S*>(p.dout_t);
  const float* __restrict__ lse2 = static_cast<const float*>(p.lse_log2);
  const float* __restrict__ dpad = static_cast<const float*>(p.delta_pad);
  constexpr int STEP = bwd_step<E, DP>(), TST = bwd_tstages<E, DP>();
  constexpr int kFixed = bwd_rows_bytes<E, DP, kBwdBlock>();  // K or V
  constexpr int kStep = bwd_rows_bytes<E, DP, STEP>();        // one streamed operand
  constexpr int kStats = STEP * 4;
  constexpr int kNS = STEP / 8;  // n8 tiles of Sᵀ per warp: queries
  constexpr int kND = DP / 8;    // n8 tiles of dK and dV per warp
  require_launch(kBwdThreads, bwd_dkdv_smem_bytes<E, DP>());

  unsigned char* const sm = aligned_smem();
  const uint32_t base = smem_addr(sm);
  // K and V, then stages of [Q, dO], stages of [Qᵀ, dOᵀ], LSE and D per
  // stage, then the mbarriers kv_full, full[2] (Q, dO, LSE, D), tfull[2]
  // (Qᵀ, dOᵀ) and empty[2] (one phase per step, both kinds of stage).
  const uint32_t sK = base, sV = sK + kFixed, sStage = sV + kFixed, sTStage = sStage + 4 * kStep;
  const int stats_off = 2 * kFixed + (4 + 2 * TST) * kStep;
  const uint32_t bars = base + stats_off + 4 * kStats;
  const uint32_t kv_full = bars;
  auto full = [&](int s) { return bars + 8 + 8 * s; };
  auto tfull = [&](int s) { return bars + 24 + 8 * s; };
  auto empty = [&](int s) { return bars + 40 + 8 * s; };

  const long long nq_pad = (nq + kBwdPad - 1) / kBwdPad * kBwdPad;
  const long long nk_pad = (nk + kBwdPad - 1) / kBwdPad * kBwdPad;
  const long long blocks = (nk + kBwdBlock - 1) / kBwdBlock;
  const long long bh = blockIdx.x / blocks, k0 = blockIdx.x % blocks * kBwdBlock;
  const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  // Causal block skipping: query steps before the first row that sees key
  // k0 contribute nothing.
  const int it0 = static_cast<int>(first_query_seeing(k0, nq, nk, causal) / STEP);
  const int n_it = static_cast<int>((nq + STEP - 1) / STEP);

  if (threadIdx.x == 0) {
    mbar_init(kv_full, 1);
    for (int s = 0; s < 2; ++s) mbar_init(full(s), 1), mbar_init(tfull(s), 1), mbar_init(empty(s), kBwdThreads);
    mbar_fence_init();
  }
  __syncthreads();
  // Step it goes to stage (it − it0) mod 2 and transposed stage
  // (it − it0) mod TST.
  auto load_step = [&](int it) {
    const long long r0 = static_cast<long long>(it) * STEP;
    const int stage = (it - it0) % 2;
    const uint32_t st = sStage + stage * 2 * kStep, bar = full(stage);
    mbar_arrive_expect_tx(bar, 2 * kStep + 2 * kStats);
    copy_rows<E, DP, STEP>(st, q, bh, nq_pad, r0, bar);
    copy_rows<E, DP, STEP>(st + kStep, dout, bh, nq_pad, r0, bar);
    bulk_copy(base + stats_off + stage * kStats, lse2 + bh * nq_pad + r0, kStats, bar);
    bulk_copy(base + stats_off + (2 + stage) * kStats, dpad + bh * nq_pad + r0, kStats, bar);
  };
  auto load_transposed = [&](int it) {
    const long long r0 = static_cast<long long>(it) * STEP;
    const int ts = (it - it0) % TST;
    const uint32_t st = sTStage + ts * 2 * kStep, bar = tfull(ts);
    mbar_arrive_expect_tx(bar, 2 * kStep);
    copy_transposed<E, DP, STEP>(st, qt, bh, nq_pad, r0, bar);
    copy_transposed<E, DP, STEP>(st + kStep, dot, bh, nq_pad, r0, bar);
  };
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(kv_full, 2 * kFixed);
    copy_rows<E, DP, kBwdBlock>(sK, k, bh, nk_pad, k0, kv_full);
    copy_rows<E, DP, kBwdBlock>(sV, v, bh, nk_pad, k0, kv_full);
    for (int s = 0; s < 2 && it0 + s < n_it; ++s) load_step(it0 + s);
    for (int s = 0; s < TST && it0 + s < n_it; ++s) load_transposed(it0 + s);
  }

  const float scale_log2 = static_cast<float>(p.scale) * kLog2e;
  float acc_dk[kND][4], acc_dv[kND][4];
#pragma unroll
  for (int n = 0; n < kND; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[n][e] = acc_dv[n][e] = 0.f;
  // This thread's keys: rows g and g+8 of its warp's 16.
  const long long key0 = k0 + wg * kBwdTile + warp * 16 + g;
  constexpr int kWgBytes = bwd_rows_bytes<E, DP, kBwdTile>();
  mbar_wait(kv_full, 0);

  for (int it = it0; it < n_it; ++it) {
    const int i = it - it0, stage = i & 1, ts = i % TST;
    const unsigned parity = (i >> 1) & 1;
    const long long q0 = static_cast<long long>(it) * STEP;
    const uint32_t st = sStage + stage * 2 * kStep, tst = sTStage + ts * 2 * kStep;
    const float* lt = reinterpret_cast<const float*>(sm + stats_off + stage * kStats);
    const float* dt = reinterpret_cast<const float*>(sm + stats_off + (2 + stage) * kStats);
    mbar_wait(full(stage), parity);

    // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, two groups: the softmax of the first runs
    // while the second computes. Element e of tile j is key key0 + 8·(e/2),
    // query q0 + 8j + 2t + e%2.
    float s[kNS][4], dp[kNS][4];
    two_products<E, DP, STEP>(s, dp, sK + wg * kWgBytes, st, sV + wg * kWgBytes, st + kStep, [&] {
      if constexpr (bwd_early_refill<E, DP>()) {
        static_assert(TST == 2, "the early refill needs two transposed stages");
        if (threadIdx.x == 0 && i > 0 && it + 1 < n_it) {
          mbar_wait(empty((i - 1) & 1), ((i - 1) >> 1) & 1);  // every thread is done with step it − 1
          load_step(it + 1);
          load_transposed(it + 1);
        }
      }
    });
    // Only steps where the first query misses some of the block's keys need
    // the causal mask.
    const bool masked = causal && visible_keys(q0, nq, nk, causal) < k0 + kBwdBlock;
    with_mask(masked, [&](auto kMasked) {
#pragma unroll
      for (int j = 0; j < kNS; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = 8 * j + 2 * t + (e & 1);
          float p = exp2f(s[j][e] * scale_log2 - lt[col]);
          if (kMasked && key0 + 8 * (e >> 1) >= visible_keys(q0 + col, nq, nk, true)) p = 0.f;
          s[j][e] = p;
        }
    });
    uint32_t pf[STEP / E::kK][4];
    to_frags<E>(pf, s);
    mbar_wait(tfull(ts), (i / TST) & 1);
    wgmma_fence();
    gemm_rs<E, DP, STEP>(acc_dv, pf, tst + kStep);  // dV += Pᵀ·dO
    wgmma_commit();
    wgmma_wait<1>();  // dPᵀ has landed
    ds_by_col(dp, s, dt, t);
    uint32_t df[STEP / E::kK][4];
    to_frags<E>(df, dp);
    wgmma_fence();
    gemm_rs<E, DP, STEP>(acc_dk, df, tst);  // dK += dSᵀ·Q
    wgmma_commit();
    wgmma_wait<0>();

    // Every thread arrives (an arrive releases only its own reads); once
    // all have, step it + 2 goes to this stage and step it + TST to this
    // transposed stage.
    mbar_arrive(empty(stage));
    if constexpr (!bwd_early_refill<E, DP>()) {
      if (threadIdx.x == 0 && it + TST < n_it) {
        mbar_wait(empty(stage), parity);
        if (it + 2 < n_it) load_step(it + 2);
        load_transposed(it + TST);
      }
    }
  }

  const long long warp_key = k0 + wg * kBwdTile + warp * 16;
  store_warp_rows<DP>(head_of(static_cast<float*>(p.dk), bh, p.h, p.dk_batch_stride, p.dk_head_stride), acc_dk,
                      warp_key, nk, p.dim, p.dk_row_stride, static_cast<float>(p.scale));
  store_warp_rows<DP>(head_of(static_cast<float*>(p.dv), bh, p.h, p.dv_batch_stride, p.dv_head_stride), acc_dv,
                      warp_key, nk, p.dim, p.dv_row_stride, 1.f);
}

// dq_rowblock reads the images p.q, p.k, p.k_t, p.v, p.dout and the padded
// statistics; it writes p.dq.
template <typename E, int DP>
__device__ void dq_rowblock(const Params& p) {
  using S = typename E::Storage;
  const long long nq = p.nq, nk = p.nk;
  const bool causal = p.causal != 0;
  const S* __restrict__ q = static_cast<const S*>(p.q);
  const S* __restrict__ k = static_cast<const S*>(p.k);
  const S* __restrict__ kt = static_cast<const S*>(p.k_t);
  const S* __restrict__ v = static_cast<const S*>(p.v);
  const S* __restrict__ dout = static_cast<const S*>(p.dout);
  const float* __restrict__ lse2 = static_cast<const float*>(p.lse_log2);
  const float* __restrict__ dpad = static_cast<const float*>(p.delta_pad);
  constexpr int STEP = bwd_step<E, DP>();
  constexpr int kFixed = bwd_rows_bytes<E, DP, kBwdBlock>();  // Q or dO
  constexpr int kStep = bwd_rows_bytes<E, DP, STEP>();        // one streamed operand
  constexpr int kNS = STEP / 8;  // n8 tiles of S per warp: keys
  constexpr int kND = DP / 8;
  require_launch(kBwdThreads, bwd_dq_smem_bytes<E, DP>());

  const uint32_t base = smem_addr(aligned_smem());
  // Q and dO, then stages of [K, V, Kᵀ], then the mbarriers qd_full,
  // full[2], empty[2].
  const uint32_t sQ = base, sdO = sQ + kFixed, sStage = sdO + kFixed;
  const uint32_t bars = sStage + 6 * kStep;
  const uint32_t qd_full = bars;
  auto full = [&](int s) { return bars + 8 + 8 * s; };
  auto empty = [&](int s) { return bars + 24 + 8 * s; };

  const long long nq_pad = (nq + kBwdPad - 1) / kBwdPad * kBwdPad;
  const long long nk_pad = (nk + kBwdPad - 1) / kBwdPad * kBwdPad;
  const long long blocks = (nq + kBwdBlock - 1) / kBwdBlock;
  const long long bh = blockIdx.x / blocks, q0 = blockIdx.x % blocks * kBwdBlock;
  const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;

  // This thread's rows g and g+8 of its warp's 16: keys they see, LSE in
  // log2 units and D (padded rows: +inf and 0, and no key).
  const long long row0 = q0 + wg * kBwdTile + warp * 16 + g;
  long long vis[2];
  float l2[2], dr[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long row = row0 + 8 * h;
    vis[h] = row < nq ? visible_keys(row, nq, nk, causal) : 0;
    // __ldg: read-only for the whole kernel, which nvcc cannot prove
    // when the pointers come from p (it did from __restrict__ arguments).
    l2[h] = __ldg(lse2 + bh * nq_pad + row);
    dr[h] = __ldg(dpad + bh * nq_pad + row);
  }
  const long long vis_min = vis[0] < vis[1] ? vis[0] : vis[1];
  const long long kv_end = visible_keys((q0 + kBwdBlock < nq ? q0 + kBwdBlock : nq) - 1, nq, nk, causal);
  const int n_it = static_cast<int>((kv_end + STEP - 1) / STEP);

  if (threadIdx.x == 0) {
    mbar_init(qd_full, 1);
    for (int s = 0; s < 2; ++s) mbar_init(full(s), 1), mbar_init(empty(s), kBwdThreads);
    mbar_fence_init();
  }
  __syncthreads();
  auto load_step = [&](int stage, int it) {
    const long long r0 = static_cast<long long>(it) * STEP;
    const uint32_t st = sStage + stage * 3 * kStep, bar = full(stage);
    mbar_arrive_expect_tx(bar, 3 * kStep);
    copy_rows<E, DP, STEP>(st, k, bh, nk_pad, r0, bar);
    copy_rows<E, DP, STEP>(st + kStep, v, bh, nk_pad, r0, bar);
    copy_transposed<E, DP, STEP>(st + 2 * kStep, kt, bh, nk_pad, r0, bar);
  };
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(qd_full, 2 * kFixed);
    copy_rows<E, DP, kBwdBlock>(sQ, q, bh, nq_pad, q0, qd_full);
    copy_rows<E, DP, kBwdBlock>(sdO, dout, bh, nq_pad, q0, qd_full);
    for (int s = 0; s < 2 && s < n_it; ++s) load_step(s, s);
  }

  const float scale_log2 = static_cast<float>(p.scale) * kLog2e;
  float acc[kND][4];
#pragma unroll
  for (int n = 0; n < kND; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  constexpr int kWgBytes = bwd_rows_bytes<E, DP, kBwdTile>();
  mbar_wait(qd_full, 0);

  for (int it = 0; it < n_it; ++it) {
    const int stage = it & 1;
    const unsigned parity = (it >> 1) & 1;
    const long long k0 = static_cast<long long>(it) * STEP;
    const uint32_t st = sStage + stage * 3 * kStep;
    mbar_wait(full(stage), parity);

    // S = Q·Kᵀ and dP = dO·Vᵀ; element e of tile j is row row0 + 8·(e/2),
    // key k0 + 8j + 2t + e%2. Keys past a row's last visible one (past nk
    // too: those were zero-filled) are masked where a step reaches them.
    float s[kNS][4], dp[kNS][4];
    two_products<E, DP, STEP>(s, dp, sQ + wg * kWgBytes, st, sdO + wg * kWgBytes, st + kStep, [&] {
      if constexpr (bwd_early_refill<E, DP>()) {
        if (threadIdx.x == 0 && it > 0 && it + 1 < n_it) {
          mbar_wait(empty((it - 1) & 1), ((it - 1) >> 1) & 1);  // every thread is done with step it − 1
          load_step((it - 1) & 1, it + 1);
        }
      }
    });
    probs_by_row(s, scale_log2, l2, k0 + STEP > vis_min, k0, t, vis);
    wgmma_wait<0>();
    ds_by_row(dp, s, dr);
    uint32_t df[STEP / E::kK][4];
    to_frags<E>(df, dp);
    wgmma_fence();
    gemm_rs<E, DP, STEP>(acc, df, st + 2 * kStep);  // dQ += dS·K
    wgmma_commit();
    wgmma_wait<0>();

    mbar_arrive(empty(stage));  // every thread: an arrive releases only its own reads
    if constexpr (!bwd_early_refill<E, DP>()) {
      if (threadIdx.x == 0 && it + 2 < n_it) {
        mbar_wait(empty(stage), parity);
        load_step(stage, it + 2);
      }
    }
  }

  store_warp_rows<DP>(head_of(static_cast<float*>(p.dq), bh, p.h, p.dq_batch_stride, p.dq_head_stride), acc,
                      q0 + wg * kBwdTile + warp * 16, nq, p.dim, p.dq_row_stride, static_cast<float>(p.scale));
}

}  // namespace sm90
}  // namespace flash
