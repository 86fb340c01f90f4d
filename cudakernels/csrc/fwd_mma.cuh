// Forward pass on tensor cores (mma.sync, sm_80+), float32 in and out,
// operands converted to bf16 or fp16 on chip, fp32 accumulation and softmax.
//
// A block of 4 warps owns BQ = 64 query rows, 16 per warp, and walks key tiles
// of BK rows. Q, K and V stay fp32 in shared memory, filled by cp.async; K and
// V are double buffered so the next tile loads while this one computes.
// Scores live only in registers: S = Q·Kᵀ as mma accumulators, the online
// softmax on those registers, then P re-packed as the A operand of O += P·V.
#pragma once
#include "common.cuh"
#include "mma.cuh"

namespace flash {
namespace mma {

constexpr int kFwdBQ = 64;
constexpr int kFwdThreads = 128;

// Row strides in floats. Q and K are read as float2 at (row g, column 2t):
// a stride ≡ 8 (mod 32) puts a half-warp's 16 float2 in distinct banks. V is
// read as scalars at (row 2t, column g): a stride ≡ 4 (mod 32) does the same.
template <int DP> __host__ __device__ constexpr int ldqk() { return DP + 8; }
template <int DP> __host__ __device__ constexpr int ldv() { return DP + 4; }

// fwd_smem_floats is the shared-memory layout in floats; launch_gpu.go
// repeats it (mmaFwdSmem).
template <int DP, int BK> __host__ __device__ constexpr int fwd_smem_floats() {
  return kFwdBQ * ldqk<DP>() + 2 * BK * ldqk<DP>() + 2 * BK * ldv<DP>();
}

template <typename E, int DP, int BK>
__device__ void fwd_1rowblock(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                              float* __restrict__ o, float* __restrict__ lse, long long nq, long long nk,
                              long long dim, bool causal, double scale) {
  constexpr int kLdQK = ldqk<DP>(), kLdV = ldv<DP>();
  constexpr int kNS = BK / 8;  // n8 tiles of scores per warp
  constexpr int kNO = DP / 8;  // n8 tiles of output per warp
  require_launch(kFwdThreads, fwd_smem_floats<DP, BK>() * sizeof(float));

  float* sQ = reinterpret_cast<float*>(smem);
  float* sK = sQ + kFwdBQ * kLdQK;  // 2 buffers
  float* sV = sK + 2 * BK * kLdQK;  // 2 buffers

  const long long tiles = (nq + kFwdBQ - 1) / kFwdBQ;
  const long long bh = blockIdx.x / tiles;
  const long long q0 = (blockIdx.x % tiles) * kFwdBQ;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const float* kh = k + bh * nk * dim;
  const float* vh = v + bh * nk * dim;

  // Rows g and g+8 of this warp's 16.
  const long long rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  long long n_vis[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) n_vis[r] = rows[r] < nq ? visible_keys(rows[r], nq, nk, causal) : 0;
  // Causal block skipping: no row of the block sees past its last row's keys.
  const long long kv_end = visible_keys((q0 + kFwdBQ < nq ? q0 + kFwdBQ : nq) - 1, nq, nk, causal);
  const int n_tiles = static_cast<int>((kv_end + BK - 1) / BK);

  // Prologue: Q and the first K/V tile in one cp.async group.
  cp_tile<kFwdBQ, DP, kLdQK, kFwdThreads>(sQ, q + bh * nq * dim, q0, nq, dim);
  if (n_tiles > 0) {
    cp_tile<BK, DP, kLdQK, kFwdThreads>(sK, kh, 0, nk, dim);
    cp_tile<BK, DP, kLdV, kFwdThreads>(sV, vh, 0, nk, dim);
  }
  cp_async_commit();

  const float scale_log2 = static_cast<float>(scale) * 1.4426950408889634f;
  float m[2] = {-Math<float>::inf(), -Math<float>::inf()};
  float l[2] = {0.f, 0.f};  // this thread's partial row sums; reduced at the end
  float acc[kNO][4];
#pragma unroll
  for (int n = 0; n < kNO; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

  const float* qw = sQ + warp * 16 * kLdQK;
  for (int it = 0; it < n_tiles; ++it) {
    const long long k0 = static_cast<long long>(it) * BK;
    // Start the next tile into the other buffer (freed by the barrier that
    // ended the previous iteration), then wait for this one.
    if (it + 1 < n_tiles) {
      const int nb = (it + 1) % 2;
      cp_tile<BK, DP, kLdQK, kFwdThreads>(sK + nb * BK * kLdQK, kh, k0 + BK, nk, dim);
      cp_tile<BK, DP, kLdV, kFwdThreads>(sV + nb * BK * kLdV, vh, k0 + BK, nk, dim);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const float* kt = sK + (it % 2) * BK * kLdQK;
    const float* vt = sV + (it % 2) * BK * kLdV;

    // S = Q·Kᵀ for this warp's 16 rows and BK keys.
    float s[kNS][4];
#pragma unroll
    for (int j = 0; j < kNS; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kc = 0; kc < DP / 16; ++kc) {
      const int c = kc * 16 + 2 * t;
      const float2 x0 = *reinterpret_cast<const float2*>(qw + g * kLdQK + c);
      const float2 x1 = *reinterpret_cast<const float2*>(qw + (g + 8) * kLdQK + c);
      const float2 x2 = *reinterpret_cast<const float2*>(qw + g * kLdQK + c + 8);
      const float2 x3 = *reinterpret_cast<const float2*>(qw + (g + 8) * kLdQK + c + 8);
      const uint32_t a[4] = {E::pack(x0.x, x0.y), E::pack(x1.x, x1.y), E::pack(x2.x, x2.y), E::pack(x3.x, x3.y)};
#pragma unroll
      for (int j = 0; j < kNS; ++j) {
        const float2 y0 = *reinterpret_cast<const float2*>(kt + (j * 8 + g) * kLdQK + c);
        const float2 y1 = *reinterpret_cast<const float2*>(kt + (j * 8 + g) * kLdQK + c + 8);
        E::mma(s[j], a, E::pack(y0.x, y0.y), E::pack(y1.x, y1.y));
      }
    }

    // Online softmax in log2 units. Element e of tile j is row (e < 2 ? g :
    // g+8), key k0 + 8j + 2t + (e & 1).
    float tile_max[2] = {-Math<float>::inf(), -Math<float>::inf()};
#pragma unroll
    for (int j = 0; j < kNS; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const long long key = k0 + j * 8 + 2 * t + (e & 1);
        s[j][e] = key < n_vis[r] ? s[j][e] * scale_log2 : -Math<float>::inf();
        tile_max[r] = fmaxf(tile_max[r], s[j][e]);
      }
    }
    float ref[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // The 4 lanes with the same g share a row.
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float m_new = fmaxf(m[r], tile_max[r]);
      // A row with no visible key so far keeps m = −inf; (−inf) − (−inf)
      // would be NaN, so its reference is 0 (all its p are 0 anyway).
      ref[r] = m_new == -Math<float>::inf() ? 0.f : m_new;
      const float alpha = exp2f(m[r] - ref[r]);
      m[r] = m_new;
      l[r] *= alpha;
#pragma unroll
      for (int n = 0; n < kNO; ++n) {
        acc[n][2 * r] *= alpha;
        acc[n][2 * r + 1] *= alpha;
      }
    }
#pragma unroll
    for (int j = 0; j < kNS; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(s[j][e] - ref[e / 2]);
        l[e / 2] += s[j][e];
      }
    }

    // O += P·V, P taken from the score registers 16 keys at a time.
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      const uint32_t a[4] = {E::pack(s[2 * kk][0], s[2 * kk][1]), E::pack(s[2 * kk][2], s[2 * kk][3]),
                             E::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]), E::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      const float* v0 = vt + (kk * 16 + 2 * t) * kLdV + g;
#pragma unroll
      for (int n = 0; n < kNO; ++n) {
        const float* vn = v0 + n * 8;
        E::mma(acc[n], a, E::pack(vn[0], vn[kLdV]), E::pack(vn[8 * kLdV], vn[9 * kLdV]));
      }
    }
    __syncthreads();  // every warp is done with this buffer before it refills
  }
  cp_async_wait<0>();  // nothing may still be landing in shared memory at exit

  // Epilogue: O = acc / l, LSE = m + log l (natural units); a row that saw no
  // key gets 0 and +inf.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    if (rows[r] >= nq) continue;
    const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
    float* orow = o + (bh * nq + rows[r]) * dim;
#pragma unroll
    for (int n = 0; n < kNO; ++n) {
      const int col = n * 8 + 2 * t;
      if (col < dim) orow[col] = acc[n][2 * r] * inv;
      if (col + 1 < dim) orow[col + 1] = acc[n][2 * r + 1] * inv;
    }
    if (t == 0) lse[bh * nq + rows[r]] = l[r] > 0.f ? (m[r] + log2f(l[r])) * 0.6931471805599453f : Math<float>::inf();
  }
}

}  // namespace mma
}  // namespace flash
