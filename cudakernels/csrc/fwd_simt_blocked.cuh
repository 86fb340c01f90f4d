// Forward pass on CUDA cores in exact float32, register-blocked: the FP32
// precision's kernel at DP ≥ 64. fwd_simt.cuh's fwd_1rowblock gives each
// thread one row and four scores, so every FMA of S = Q·Kᵀ and of P·V waits on
// about one shared-memory load, and the loads, not the FMA pipe, set its speed
// (12.7 TFLOP/s on the H200, a fifth of the FP32 peak). Here each thread
// computes a 4×4 block of S and a 4×(DP/16) block of O from 16-byte loads:
// two loads per 16 FMAs in S, 1 + DP/64 per 4·DP/16 in P·V, the ratio of a
// register-blocked SGEMM. The arithmetic per element is fwd_1rowblock's (fp32
// FMAs, expf, the same masks and variants), only the order of the sums
// differs.
#pragma once
#include "simt_tile.cuh"
#include "philox.cuh"
#include "variants.cuh"

namespace flash {
namespace simt {

// The blocked kernel's tile: 64 query rows by 64 keys, 256 threads. Thread t
// owns rows 4·(t/16) … +3 and, in S, keys 4·(t%16) … +3 of the key tile; in
// O, columns 4·(t%16) + 64·g … +3 for g < DP/64. The 16 threads of a row
// group are one half of a warp, so row statistics reduce with four xor
// shuffles below 16.
constexpr int kBlockedRows = 64, kBlockedKeys = 64, kBlockedThreads = 256;

// Shared memory, in floats: Qᵀ and Kᵀ [DP][64] (16-byte loads along rows and
// keys) and V [64][DP] as it lies in global memory. Pᵀ [64 keys][64 rows], its
// 16-byte groups of rows swizzled by key (p_slot), takes Kᵀ's place once S
// is computed: 48 KiB at DP = 64 and 96 at 128, so that four and two blocks
// share an SM (Pᵀ apart, two blocks of 112 KiB would not fit its 228).
// shapes.go's simtBlockedSmem repeats this formula.
template <int DP> __host__ __device__ constexpr int fwd_blocked_smem_floats() {
  return 2 * DP * kBlockedRows + kBlockedKeys * DP;
}

// p_slot is where row group g (rows 4g … 4g+3) of key j sits in Pᵀ: the
// groups of a key are permuted by j/4 so that the 16 lanes of a half-warp,
// which write keys 4·lane + c of one row group, hit 16 different 16-byte
// bank groups instead of one.
__device__ __forceinline__ int p_slot(int j, int g) { return j * kBlockedRows + 4 * (g ^ ((j >> 2) & 15)); }

// row_max16 and row_sum16 reduce over the 16 lanes of a half-warp, the
// threads that share a row group. Like group8_max, the max skips NaN (a NaN
// y never compares greater) and every lane ends with the same bits.
__device__ __forceinline__ float row_max16(float x) {
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) {
    const float y = __shfl_xor_sync(0xffffffffu, x, off);
    x = y > x ? y : x;
  }
  return x;
}
__device__ __forceinline__ float row_sum16(float x) {
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// load_transposed writes rows [r0, r0 + 64) of an [n, dim] matrix (row
// stride ld) into a [DP][64] shared tile, zeros past n rows and dim
// columns: lane e takes row e % 64 of column e / 64, so that a warp stores
// 32 consecutive words. It returns whether every value it read is finite.
__device__ __forceinline__ bool load_transposed(float* dst, const float* src, long long r0, long long n, long long dim,
                                                long long ld, int dp) {
  bool finite = true;
  for (int e = threadIdx.x; e < kBlockedRows * dp; e += kBlockedThreads) {
    const int r = e % kBlockedRows, c = e / kBlockedRows;
    const float x = r0 + r < n && c < dim ? src[(r0 + r) * ld + c] : 0.f;
    finite = finite && x - x == 0.f;
    dst[c * kBlockedRows + r] = x;
  }
  return finite;
}

// load_rows is load_transposed into a [64][DP] tile, as the rows lie.
__device__ __forceinline__ bool load_rows(float* dst, const float* src, long long r0, long long n, long long dim,
                                          long long ld, int dp) {
  bool finite = true;
  for (int e = threadIdx.x; e < kBlockedRows * dp; e += kBlockedThreads) {
    const int r = e / dp, c = e % dp;
    const float x = r0 + r < n && c < dim ? src[(r0 + r) * ld + c] : 0.f;
    finite = finite && x - x == 0.f;
    dst[r * dp + c] = x;
  }
  return finite;
}

// add_outer adds, over n entries e (from e0 in the mask's numbering), the
// products x[e][rows 4·rg …] · y[e][columns 4·lane16 + 64·g] to acc, where
// x is a p_slot tile by e and y a [64][DP] tile: the forward's P·V (e a
// key), the backward's dV, dK (e a row) and dQ (e a key). With kSeenOnly
// it adds only where lo[i] ≤ e0 + e < hi[i], the pairs the thread's rows
// see, for tiles of y that are not finite.
template <int DP, bool kSeenOnly>
__device__ __forceinline__ void add_outer(float (&acc)[4][DP / 16], const float* x, const float* y, int rg, int lane16,
                                          int n, long long e0, const int (&lo)[4], const int (&hi)[4]) {
#pragma unroll(kSeenOnly ? 1 : 2)
  for (int e = 0; e < n; ++e) {
    const float4 xv = *reinterpret_cast<const float4*>(x + p_slot(e, rg));
    const float xr[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
    for (int g = 0; g < DP / 64; ++g) {
      const float4 yv = *reinterpret_cast<const float4*>(y + e * DP + 64 * g + 4 * lane16);
      const float yr[4] = {yv.x, yv.y, yv.z, yv.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const bool seen = !kSeenOnly || (lo[i] <= e0 + e && e0 + e < hi[i]);
#pragma unroll
        for (int c = 0; c < 4; ++c)
          acc[i][4 * g + c] = seen ? Math<float>::fma(xr[i], yr[c], acc[i][4 * g + c]) : acc[i][4 * g + c];
      }
    }
  }
}

// store_by_column writes the thread's 4×4 block b (rows 4·rg …, columns
// 4·lane16 …) into a p_slot tile by column: column 4·lane16 + c gets the
// four rows as one 16-byte group.
__device__ __forceinline__ void store_by_column(float* dst, const float (&b)[4][4], int rg, int lane16) {
#pragma unroll
  for (int c = 0; c < 4; ++c)
    *reinterpret_cast<float4*>(dst + p_slot(4 * lane16 + c, rg)) = make_float4(b[0][c], b[1][c], b[2][c], b[3][c]);
}

// add_tile is add_outer for a tile whose y is finite (the plain loop) or
// not (only the pairs seen: a pair the mask hides has x = 0, but 0 times
// an infinite or NaN y would not be 0, and the reference never forms it).
template <int DP>
__device__ __forceinline__ void add_tile(bool finite, float (&acc)[4][DP / 16], const float* x, const float* y, int rg,
                                         int lane16, int n, long long e0, const int (&lo)[4], const int (&hi)[4]) {
  if (finite) {
    add_outer<DP, false>(acc, x, y, rg, lane16, n, e0, lo, hi);
  } else {
    add_outer<DP, true>(acc, x, y, rg, lane16, n, e0, lo, hi);
  }
}

template <int DP>
__device__ void fwd_blocked(const Params& p) {
  static_assert(DP % 64 == 0, "fwd_blocked: DP must be a multiple of 64");
  constexpr int BM = kBlockedRows, BN = kBlockedKeys, G = DP / 64;
  using M = Math<float>;
  require_launch(kBlockedThreads, fwd_blocked_smem_floats<DP>() * sizeof(float));

  float* sQt = reinterpret_cast<float*>(smem);  // [DP][BM]
  float* sKt = sQt + DP * BM;                   // [DP][BN]
  float* sV = sKt + DP * BN;                    // [BN][DP]
  float* sPt = sKt;                             // [BN][BM], swizzled, once S is done

  const long long nq = p.nq, dim = p.dim;
  const long long tiles = (nq + BM - 1) / BM;
  const long long bh = blockIdx.x / tiles;
  const long long q0 = (blockIdx.x % tiles) * BM;
  const int t = threadIdx.x, rg = t / 16, lane16 = t % 16;
  const long long kvh = kv_pair(p, bh), kv_heads = p.h / p.kv_group;
  const float* qh = head_of(static_cast<const float*>(p.q), bh, p.h, p.q_batch_stride, p.q_head_stride);
  const float* kh = head_of(static_cast<const float*>(p.k), kvh, kv_heads, p.k_batch_stride, p.k_head_stride);
  const float* vh = head_of(static_cast<const float*>(p.v), kvh, kv_heads, p.v_batch_stride, p.v_head_stride);
  const SeqMask mask = seq_mask(p, bh);
  const Scores<float> score = scores_of<float>(p, bh, mask);
  const Dropout drop = dropout_of(p);
  const long long pair = p.pair0 + bh;

  load_transposed(sQt, qh, q0, nq, dim, p.q_row_stride, DP);

  // The rows' key ranges, and the key tiles some row of the block sees.
  // 32 bits hold any key index (a head of 2³¹ keys would take 256 GiB of
  // K at D = 32) and save eight registers, which the 4×4 blocks need.
  int lo[4], hi[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const long long row = q0 + 4 * rg + i;
    lo[i] = row < nq ? static_cast<int>(mask.key_lo(row)) : 0;
    hi[i] = row < nq ? static_cast<int>(mask.key_hi(row)) : 0;
  }
  const long long last = (q0 + BM < mask.lq ? q0 + BM : mask.lq) - 1;
  const long long kv_begin = q0 <= last ? mask.key_lo(q0) / BN * BN : 0;
  const long long kv_end = q0 <= last ? mask.key_hi(last) : 0;

  float m[4], l[4], acc[4][4 * G];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -M::inf();
    l[i] = 0.f;  // this lane's share of the row sum, summed over lanes at the end
#pragma unroll
    for (int c = 0; c < 4 * G; ++c) acc[i][c] = 0.f;
  }

  for (long long k0 = kv_begin; k0 < kv_end; k0 += BN) {
    __syncthreads();  // the last tile's V and Pᵀ are no longer read
    // Padding keys (from lk on) load as zeros: their probabilities are 0,
    // and 0 times whatever a padding row of V holds could be NaN.
    load_transposed(sKt, kh, k0, mask.lk, dim, p.k_row_stride, DP);
    // Whether some value of the V tile is not finite, for the whole block.
    const bool nonFinite = __syncthreads_or(!load_rows(sV, vh, k0, mask.lk, dim, p.v_row_stride, DP));

    // S = Q·Kᵀ for the thread's 4×4 block.
    float s[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[i][c] = 0.f;
#pragma unroll 4
    for (int d = 0; d < DP; ++d) {
      const float4 a = *reinterpret_cast<const float4*>(sQt + d * BM + 4 * rg);
      const float4 b = *reinterpret_cast<const float4*>(sKt + d * BN + 4 * lane16);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[i][c] = M::fma(av[i], bv[c], s[i][c]);
    }

    // Online softmax, row by row, as fwd_1rowblock takes it.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const long long row = q0 + 4 * rg + i;
      float tile_max = -M::inf();
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const long long key = k0 + 4 * lane16 + c;
        float dsoft;
        s[i][c] = lo[i] <= key && key < hi[i] ? score(s[i][c], row, key, dsoft) : -M::inf();
        tile_max = s[i][c] > tile_max ? s[i][c] : tile_max;
      }
      const float tile_m = row_max16(tile_max);
      const float m_new = tile_m > m[i] ? tile_m : m[i];
      // A row that has seen no visible key yet has m_new = −inf: (−inf) −
      // (−inf) would be NaN, and its probabilities are all 0 whatever the
      // reference, so it takes 0.
      const float ref = m_new == -M::inf() ? 0.f : m_new;
      const float alpha = M::exp(m[i] - ref);
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float pr = M::exp(s[i][c] - ref);
        sum += pr;
        // Dropout drops probabilities after the softmax: l sums them all.
        s[i][c] = drop.on() ? (drop.kept(pair, row, k0 + 4 * lane16 + c) ? pr * static_cast<float>(drop.scale) : 0.f)
                            : pr;
      }
      l[i] = l[i] * alpha + sum;
      m[i] = m_new;
#pragma unroll
      for (int c = 0; c < 4 * G; ++c) acc[i][c] *= alpha;
    }
    // Pᵀ, by key, where Kᵀ was.
    __syncthreads();
    store_by_column(sPt, s, rg, lane16);
    __syncthreads();

    // O += P·V over the tile's keys (a tile whose V is not finite: only
    // the pairs the rows see).
    const int keys = k0 + BN <= kv_end ? BN : static_cast<int>(kv_end - k0);
    add_tile<DP>(!nonFinite, acc, sPt, sV, rg, lane16, keys, k0, lo, hi);
  }

  // Epilogue, as fwd_1rowblock's: only the mask decides that a row has no
  // key (O = 0, LSE = +inf); every other row follows IEEE arithmetic (see
  // there for NaN and infinite scores).
  float* oh = head_of(static_cast<float*>(p.o), bh, p.h, p.o_batch_stride, p.o_head_stride);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float row_l = row_sum16(l[i]);
    const long long row = q0 + 4 * rg + i;
    if (row >= nq) continue;
    const bool any_key = lo[i] < hi[i];
    const float inv_l = any_key ? 1.f / row_l : 0.f;
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int col = 64 * g + 4 * lane16 + c;
        if (col < dim) oh[row * p.o_row_stride + col] = acc[i][4 * g + c] * inv_l;
      }
    const float lse = !any_key ? M::inf() : (m[i] == M::inf() ? m[i] : m[i] + M::log(row_l));
    if (lane16 == 0) static_cast<float*>(p.lse)[bh * nq + row] = lse;
  }
}

}  // namespace simt
}  // namespace flash
