// Backward pass on CUDA cores in exact float32, register-blocked as
// fwd_simt_blocked.cuh's forward is: the dK/dV and dQ kernels of
// bwd_simt.cuh with 4×4 blocks of S and dP per thread from 16-byte shared
// loads, and 4×(DP/16) blocks of the gradients. Same products, masks,
// variants and pair gradient (pair_grad) per element as dkdv_1colblock and
// dq_1rowblock, and every sum in their order (each product chain over d
// from 0 up, dK and dV over rows, dQ over keys, in increasing order), so
// the results are their bits; deterministic like them.
#pragma once
#include "bwd_simt.cuh"
#include "fwd_simt_blocked.cuh"

namespace flash {
namespace simt {

// Shared memory of the blocked dK/dV kernel, in floats: Kᵀ, Vᵀ [DP][64]
// for the block's keys, then per query tile Qᵀ, dOᵀ [DP][64] (for S and
// dP) and Q, dO [64][DP] (for dK and dV), and the tile's LSE and D.
// P and dS by query row (p_slot's layout) take Qᵀ's and dOᵀ's place once
// S and dP are done. 96 KiB at DP = 64, 192 at 128; DP = 256 would need
// 384 and keeps dkdv_1colblock. shapes.go's simtBlockedDKDVSmem repeats
// it.
template <int DP> __host__ __device__ constexpr int dkdv_blocked_smem_floats() {
  return 6 * DP * kBlockedRows + 2 * kBlockedRows;
}
// The blocked dQ kernel: Qᵀ, dOᵀ [DP][64] for the block's rows, and per key
// tile Kᵀ, Vᵀ [DP][64] and K [64][DP]; dS by key takes Vᵀ's
// place once dP is done. 80 KiB at DP = 64, 160 at 128 (shapes.go's
// simtBlockedDQSmem).
template <int DP> __host__ __device__ constexpr int dq_blocked_smem_floats() {
  return 5 * DP * kBlockedRows;
}

// products4x4 computes the thread's 4×4 blocks s = A·Bᵀ and dp = C·Dᵀ over
// DP, from [DP][64] tiles: rows 4·rg … of a and c, columns 4·lane16 … of b
// and d, one fma chain per element in increasing d.
template <int DP>
__device__ __forceinline__ void products4x4(float (&s)[4][4], float (&dp)[4][4], const float* a, const float* b,
                                            const float* c, const float* d, int rg, int lane16) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) s[i][j] = dp[i][j] = 0.f;
#pragma unroll 2
  for (int k = 0; k < DP; ++k) {
    const float4 av = *reinterpret_cast<const float4*>(a + k * kBlockedRows + 4 * rg);
    const float4 bv = *reinterpret_cast<const float4*>(b + k * kBlockedRows + 4 * lane16);
    const float4 cv = *reinterpret_cast<const float4*>(c + k * kBlockedRows + 4 * rg);
    const float4 dv = *reinterpret_cast<const float4*>(d + k * kBlockedRows + 4 * lane16);
    const float ar[4] = {av.x, av.y, av.z, av.w}, br[4] = {bv.x, bv.y, bv.z, bv.w};
    const float cr[4] = {cv.x, cv.y, cv.z, cv.w}, dr[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s[i][j] = Math<float>::fma(ar[i], br[j], s[i][j]);
        dp[i][j] = Math<float>::fma(cr[i], dr[j], dp[i][j]);
      }
  }
}

// store_block writes the thread's rows r0 + 4·rg + i (below n) of an output
// with row stride ld, columns 4·lane16 + 64·g below dim, times f.
template <int DP>
__device__ __forceinline__ void store_block(float* out, long long ld, const float (&acc)[4][DP / 16], float f,
                                            long long r0, long long n, long long dim, int rg, int lane16) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const long long r = r0 + 4 * rg + i;
    if (r >= n) continue;
#pragma unroll
    for (int g = 0; g < DP / 64; ++g)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int col = 64 * g + 4 * lane16 + c;
        if (col < dim) out[r * ld + col] = acc[i][4 * g + c] * f;
      }
  }
}

// dkdv_blocked is dkdv_1colblock for 64 keys a block: the thread's keys
// are 4·rg … +3, its query rows of a tile 4·lane16 … +3 in S and dP, its
// columns 4·lane16 + 64·g in dK and dV.
template <int DP>
__device__ void dkdv_blocked(const Params& p) {
  static_assert(DP % 64 == 0, "dkdv_blocked: DP must be a multiple of 64");
  constexpr int BK = kBlockedRows, BQ = kBlockedRows;
  using M = Math<float>;
  require_launch(kBlockedThreads, dkdv_blocked_smem_floats<DP>() * sizeof(float));

  float* sKt = reinterpret_cast<float*>(smem);  // [DP][BK]
  float* sVt = sKt + DP * BK;                   // [DP][BK]
  float* sQt = sVt + DP * BK;                   // [DP][BQ], then P by row
  float* sdOt = sQt + DP * BQ;                  // [DP][BQ], then dS by row
  float* sQ = sdOt + DP * BQ;                   // [BQ][DP]
  float* sdO = sQ + BQ * DP;                    // [BQ][DP]
  float* sLse = sdO + BQ * DP;
  float* sDelta = sLse + BQ;
  float* sP = sQt;
  float* sdS = sdOt;

  const long long nq = p.nq, nk = p.nk, dim = p.dim;
  const long long tiles = (nk + BK - 1) / BK;
  const long long kvh = blockIdx.x / tiles, kv_heads = p.h / p.kv_group;
  const long long k0 = (blockIdx.x % tiles) * BK;
  const int t = threadIdx.x, rg = t / 16, lane16 = t % 16;

  // A group lies in one batch entry, so its heads share the mask. Padding
  // rows and keys (past the lengths) load as zeros.
  const SeqMask mask = seq_mask(p, kvh * p.kv_group);
  const Dropout drop = dropout_of(p);
  load_transposed(sKt, head_of(static_cast<const float*>(p.k), kvh, kv_heads, p.k_batch_stride, p.k_head_stride), k0,
                  mask.lk, dim, p.k_row_stride, DP);
  load_transposed(sVt, head_of(static_cast<const float*>(p.v), kvh, kv_heads, p.v_batch_stride, p.v_head_stride), k0,
                  mask.lk, dim, p.v_row_stride, DP);

  // The rows that see each of the thread's keys, in 32 bits (as
  // fwd_blocked's key ranges: registers are what the blocks need).
  int qlo[4], qhi[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    qlo[i] = static_cast<int>(mask.query_lo(k0 + 4 * rg + i));
    qhi[i] = static_cast<int>(mask.query_hi(k0 + 4 * rg + i));
  }
  float acc_dk[4][DP / 16], acc_dv[4][DP / 16];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int c = 0; c < DP / 16; ++c) acc_dk[i][c] = acc_dv[i][c] = 0.f;

  const long long last_key = (k0 + BK < mask.lk ? k0 + BK : mask.lk) - 1;
  const long long q_begin = k0 <= last_key ? mask.query_lo(k0) / BQ * BQ : 0;
  const long long q_end = k0 <= last_key ? mask.query_hi(last_key) : 0;
  for (long long r = 0; r < p.kv_group; ++r) {
    const long long bh = kvh * p.kv_group + r;
    const Scores<float> score = scores_of<float>(p, bh, mask);
    const long long pair = p.pair0 + bh;
    const float* qh = head_of(static_cast<const float*>(p.q), bh, p.h, p.q_batch_stride, p.q_head_stride);
    const float* doh = head_of(static_cast<const float*>(p.dout), bh, p.h, p.dout_batch_stride, p.dout_head_stride);
    const float* lh = static_cast<const float*>(p.lse) + bh * nq;
    const float* dh = static_cast<const float*>(p.delta) + bh * nq;
    for (long long q0 = q_begin; q0 < q_end; q0 += BQ) {
      __syncthreads();  // the last tile's P, dS, Q and dO are no longer read
      load_transposed(sQt, qh, q0, mask.lq, dim, p.q_row_stride, DP);
      load_transposed(sdOt, doh, q0, mask.lq, dim, p.dout_row_stride, DP);
      bool finite = load_rows(sQ, qh, q0, mask.lq, dim, p.q_row_stride, DP);
      finite = load_rows(sdO, doh, q0, mask.lq, dim, p.dout_row_stride, DP) && finite;
      if (t < BQ) {
        const long long i = q0 + t;
        // Rows past nq, and rows that see no key (LSE = +inf), are masked
        // below before their LSE is used.
        sLse[t] = i < nq ? lh[i] : 0.f;
        sDelta[t] = i < mask.lq ? dh[i] : 0.f;
      }
      const bool nonFinite = __syncthreads_or(!finite);  // for the whole block

      float s[4][4], dp[4][4];
      products4x4<DP>(s, dp, sKt, sQt, sVt, sdOt, rg, lane16);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const long long key = k0 + 4 * rg + i;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int qi = 4 * lane16 + c;
          const long long row = q0 + qi;
          float pr = 0.f, ds = 0.f;
          if (row < nq && mask.sees(row, key)) {
            // dK takes the gradient of scale·q·k: dS times the softcap's
            // derivative.
            float dsoft;
            pr = M::exp(score(s[i][c], row, key, dsoft) - sLse[qi]);
            ds = pair_grad(pr, dp[i][c], sDelta[qi], drop, pair, row, key) * dsoft;
          }
          s[i][c] = pr;
          dp[i][c] = ds;
        }
      }
      __syncthreads();  // Qᵀ and dOᵀ are read: P and dS, by row, take their place
      store_by_column(sP, s, rg, lane16);
      store_by_column(sdS, dp, rg, lane16);
      __syncthreads();

      // dV += Pᵀ·dO and dK += dSᵀ·Q over the tile's rows. A row that does
      // not see a key has P = dS = 0, but 0 times a NaN or infinite dO or
      // Q would not be 0: tiles that are not finite add only the pairs
      // the keys see.
      const int rows = q0 + BQ <= q_end ? BQ : static_cast<int>(q_end - q0);
      add_tile<DP>(!nonFinite, acc_dv, sP, sdO, rg, lane16, rows, q0, qlo, qhi);
      add_tile<DP>(!nonFinite, acc_dk, sdS, sQ, rg, lane16, rows, q0, qlo, qhi);
    }
  }

  float* dk = head_of(static_cast<float*>(p.dk), kvh, kv_heads, p.dk_batch_stride, p.dk_head_stride);
  float* dv = head_of(static_cast<float*>(p.dv), kvh, kv_heads, p.dv_batch_stride, p.dv_head_stride);
  store_block<DP>(dk, p.dk_row_stride, acc_dk, static_cast<float>(p.scale), k0, nk, dim, rg, lane16);
  store_block<DP>(dv, p.dv_row_stride, acc_dv, 1.f, k0, nk, dim, rg, lane16);
}

// dq_blocked is dq_1rowblock for 64 query rows a block: the thread's rows
// are 4·rg … +3, its keys of a tile 4·lane16 … +3 in S and dP, its columns
// 4·lane16 + 64·g in dQ.
template <int DP>
__device__ void dq_blocked(const Params& p) {
  static_assert(DP % 64 == 0, "dq_blocked: DP must be a multiple of 64");
  constexpr int BQ = kBlockedRows, BK = kBlockedRows;
  using M = Math<float>;
  require_launch(kBlockedThreads, dq_blocked_smem_floats<DP>() * sizeof(float));

  float* sQt = reinterpret_cast<float*>(smem);  // [DP][BQ]
  float* sdOt = sQt + DP * BQ;                  // [DP][BQ]
  float* sKt = sdOt + DP * BQ;                  // [DP][BK]
  float* sVt = sKt + DP * BK;                   // [DP][BK], then dS by key
  float* sK = sVt + DP * BK;                    // [BK][DP]
  float* sdS = sVt;

  const long long nq = p.nq, dim = p.dim;
  const long long tiles = (nq + BQ - 1) / BQ;
  const long long bh = blockIdx.x / tiles;
  const long long q0 = (blockIdx.x % tiles) * BQ;
  const int t = threadIdx.x, rg = t / 16, lane16 = t % 16;
  const long long kvh = kv_pair(p, bh), kv_heads = p.h / p.kv_group;
  const float* kh = head_of(static_cast<const float*>(p.k), kvh, kv_heads, p.k_batch_stride, p.k_head_stride);
  const float* vh = head_of(static_cast<const float*>(p.v), kvh, kv_heads, p.v_batch_stride, p.v_head_stride);
  const SeqMask mask = seq_mask(p, bh);
  const Scores<float> score = scores_of<float>(p, bh, mask);
  const Dropout drop = dropout_of(p);
  const long long pair = p.pair0 + bh;

  load_transposed(sQt, head_of(static_cast<const float*>(p.q), bh, p.h, p.q_batch_stride, p.q_head_stride), q0,
                  mask.lq, dim, p.q_row_stride, DP);
  load_transposed(sdOt, head_of(static_cast<const float*>(p.dout), bh, p.h, p.dout_batch_stride, p.dout_head_stride),
                  q0, mask.lq, dim, p.dout_row_stride, DP);

  int lo[4], hi[4];
  float lse[4], delta[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const long long row = q0 + 4 * rg + i;
    lo[i] = row < nq ? static_cast<int>(mask.key_lo(row)) : 0;
    hi[i] = row < nq ? static_cast<int>(mask.key_hi(row)) : 0;
    // Only read for visible keys, so rows with LSE = +inf never use it.
    lse[i] = lo[i] < hi[i] ? static_cast<const float*>(p.lse)[bh * nq + row] : 0.f;
    delta[i] = row < mask.lq ? static_cast<const float*>(p.delta)[bh * nq + row] : 0.f;
  }
  const long long last = (q0 + BQ < mask.lq ? q0 + BQ : mask.lq) - 1;
  const long long kv_begin = q0 <= last ? mask.key_lo(q0) / BK * BK : 0;
  const long long kv_end = q0 <= last ? mask.key_hi(last) : 0;

  float acc[4][DP / 16];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int c = 0; c < DP / 16; ++c) acc[i][c] = 0.f;

  for (long long k0 = kv_begin; k0 < kv_end; k0 += BK) {
    __syncthreads();  // the last tile's K, Kᵀ and dS are no longer read
    load_transposed(sKt, kh, k0, mask.lk, dim, p.k_row_stride, DP);
    load_transposed(sVt, vh, k0, mask.lk, dim, p.v_row_stride, DP);
    // Whether some value of the K tile is not finite, for the whole block.
    const bool nonFinite = __syncthreads_or(!load_rows(sK, kh, k0, mask.lk, dim, p.k_row_stride, DP));

    float s[4][4], dp[4][4];
    products4x4<DP>(s, dp, sQt, sKt, sdOt, sVt, rg, lane16);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const long long row = q0 + 4 * rg + i;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const long long key = k0 + 4 * lane16 + c;
        float ds = 0.f;
        if (lo[i] <= key && key < hi[i]) {
          float dsoft;
          float pr = M::exp(score(s[i][c], row, key, dsoft) - lse[i]);
          ds = pair_grad(pr, dp[i][c], delta[i], drop, pair, row, key) * dsoft;
        }
        s[i][c] = ds;
      }
    }
    __syncthreads();  // Vᵀ is read: dS, by key, takes its place
    store_by_column(sdS, s, rg, lane16);
    __syncthreads();

    // dQ += dS·K over the tile's keys (a tile of K that is not finite:
    // only the pairs the rows see).
    const int keys = k0 + BK <= kv_end ? BK : static_cast<int>(kv_end - k0);
    add_tile<DP>(!nonFinite, acc, sdS, sK, rg, lane16, keys, k0, lo, hi);
  }

  float* dq = head_of(static_cast<float*>(p.dq), bh, p.h, p.dq_batch_stride, p.dq_head_stride);
  store_block<DP>(dq, p.dq_row_stride, acc, static_cast<float>(p.scale), q0, nq, dim, rg, lane16);
}

}  // namespace simt
}  // namespace flash
