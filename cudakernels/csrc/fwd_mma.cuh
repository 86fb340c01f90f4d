// Forward pass on tensor cores (mma.sync, sm_80+): float32 in and out,
// operands in bf16 or fp16, fp32 accumulation and softmax.
//
// Two kernels per call. to_half_padded converts Q, K and V once into
// scratch buffers of 16-bit elements with rows padded to DP columns (zeros
// past dim), so every row is 16-byte aligned and the forward never checks
// columns. fwd_1rowblock then gives each block of kFwdWarps warps BQ = 16 ·
// kFwdWarps query rows, 16 per warp, and walks key tiles of BK rows: tiles
// are copied into shared memory by cp.async (K and V double buffered, the
// next tile landing while this one computes) and operand fragments are read
// with ldmatrix (.trans for V). Scores live only in registers: S = Q·Kᵀ as
// mma accumulators, the online softmax on those registers, then P re-packed
// as the A operand of O += P·V.
#pragma once
#include "common.cuh"
#include "mma.cuh"

namespace flash {
namespace mma {

constexpr int kFwdWarps = 8;
constexpr int kFwdBQ = 16 * kFwdWarps;
constexpr int kFwdThreads = 32 * kFwdWarps;

// Row stride of the shared tiles in 16-bit elements: DP + 8 makes the row
// stride ≡ 16 bytes (mod 128), so the 8 row addresses of one ldmatrix
// 8×8 matrix fall in 8 different 16-byte bank groups.
template <int DP> __host__ __device__ constexpr int ldh() { return DP + 8; }

// fwd_smem_bytes is the shared-memory layout: Q, then two K and two V
// buffers. launch_gpu.go repeats it (mmaFwdSmem).
template <int DP, int BK> __host__ __device__ constexpr int fwd_smem_bytes() {
  return (kFwdBQ + 4 * BK) * ldh<DP>() * 2;
}

// to_half_padded writes y[r, c] = round(x[r, c]) for c < dim and 0 for
// dim ≤ c < dp, rows r < rows: x is [rows, dim] fp32, y is [rows, dp] of
// E's 16-bit type. Each thread converts 8 elements and stores 16 bytes.
template <typename E>
__device__ void to_half_padded(const float* __restrict__ x, uint4* __restrict__ y, long long rows, long long dim,
                               long long dp) {
  const long long chunks = dp / 8, n = rows * chunks;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const long long r = i / chunks, c0 = (i % chunks) * 8;
    const float* src = x + r * dim + c0;
    float f[8];
    if (dim % 4 == 0 && c0 + 8 <= dim) {
      const float4 a = *reinterpret_cast<const float4*>(src), b = *reinterpret_cast<const float4*>(src + 4);
      f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) f[e] = c0 + e < dim ? src[e] : 0.f;
    }
    y[i] = make_uint4(E::pack(f[0], f[1]), E::pack(f[2], f[3]), E::pack(f[4], f[5]), E::pack(f[6], f[7]));
  }
}

// ldsm_x4 loads four 8×8 matrices of 16-bit elements; lane l gives the
// address of row l%8 of matrix l/8 and receives in r[i] the elements
// (l/4, 2(l%4)..2(l%4)+1) of matrix i (transposed with ldsm_x4_t).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// cp_rows starts copying rows [r0, r0+ROWS) of a [n, DP] matrix of 16-bit
// elements into a [ROWS, ldh<DP>] shared tile, zero-filling rows past n.
template <int ROWS, int DP>
__device__ __forceinline__ void cp_rows(uint16_t* dst, const uint16_t* src, long long r0, long long n) {
  constexpr int kChunks = DP / 8;  // 16-byte chunks per row
  for (int c = threadIdx.x; c < ROWS * kChunks; c += kFwdThreads) {
    const int r = c / kChunks, col = c % kChunks * 8;
    const bool ok = r0 + r < n;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst + r * ldh<DP>() + col)),
                 "l"(ok ? src + (r0 + r) * DP + col : src), "r"(ok ? 16 : 0));
  }
}

template <typename E, int DP, int BK>
__device__ void fwd_1rowblock(const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                              const uint16_t* __restrict__ v, float* __restrict__ o, float* __restrict__ lse,
                              long long nq, long long nk, long long dim, bool causal, double scale) {
  constexpr int kLd = ldh<DP>();
  constexpr int kNS = BK / 8;  // n8 tiles of scores per warp
  constexpr int kNO = DP / 8;  // n8 tiles of output per warp
  static_assert(kNS % 2 == 0 && kNO % 2 == 0, "ldmatrix.x4 loads two n8 tiles");
  require_launch(kFwdThreads, fwd_smem_bytes<DP, BK>());

  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sK = sQ + kFwdBQ * kLd;  // 2 buffers
  uint16_t* sV = sK + 2 * BK * kLd;  // 2 buffers

  const long long tiles = (nq + kFwdBQ - 1) / kFwdBQ;
  const long long bh = blockIdx.x / tiles;
  const long long q0 = (blockIdx.x % tiles) * kFwdBQ;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const uint16_t* kh = k + bh * nk * DP;
  const uint16_t* vh = v + bh * nk * DP;

  // Rows g and g+8 of this warp's 16.
  const long long rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  long long n_vis[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) n_vis[r] = rows[r] < nq ? visible_keys(rows[r], nq, nk, causal) : 0;
  const long long n_vis_min = n_vis[0] < n_vis[1] ? n_vis[0] : n_vis[1];
  // Causal block skipping: no row of the block sees past its last row's keys.
  const long long kv_end = visible_keys((q0 + kFwdBQ < nq ? q0 + kFwdBQ : nq) - 1, nq, nk, causal);
  const int n_tiles = static_cast<int>((kv_end + BK - 1) / BK);

  // Prologue: Q and the first K/V tile in one cp.async group.
  cp_rows<kFwdBQ, DP>(sQ, q + bh * nq * DP, q0, nq);
  if (n_tiles > 0) {
    cp_rows<BK, DP>(sK, kh, 0, nk);
    cp_rows<BK, DP>(sV, vh, 0, nk);
  }
  cp_async_commit();

  const float scale_log2 = static_cast<float>(scale) * 1.4426950408889634f;
  float m[2] = {-Math<float>::inf(), -Math<float>::inf()};
  float l[2] = {0.f, 0.f};  // this thread's partial row sums; reduced at the end
  float acc[kNO][4];
#pragma unroll
  for (int n = 0; n < kNO; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

  // Per-lane ldmatrix addresses (see ldsm_x4): Q rows l%16 at column
  // 8·(l/16); K keys 8·(l/16) + l%8 at column 8·((l/8)%2); V keys
  // l%8 + 8·((l/8)%2) at column 8·(l/16).
  const uint16_t* qa = sQ + (warp * 16 + lane % 16) * kLd + (lane / 16) * 8;
  const int k_off = ((lane / 16) * 8 + lane % 8) * kLd + ((lane / 8) % 2) * 8;
  const int v_off = (lane % 8 + ((lane / 8) % 2) * 8) * kLd + (lane / 16) * 8;

  for (int it = 0; it < n_tiles; ++it) {
    const long long k0 = static_cast<long long>(it) * BK;
    // Start the next tile into the other buffer (freed by the barrier that
    // ended the previous iteration), then wait for this one.
    if (it + 1 < n_tiles) {
      const int nb = (it + 1) % 2;
      cp_rows<BK, DP>(sK + nb * BK * kLd, kh, k0 + BK, nk);
      cp_rows<BK, DP>(sV + nb * BK * kLd, vh, k0 + BK, nk);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint16_t* kt = sK + (it % 2) * BK * kLd + k_off;
    const uint16_t* vt = sV + (it % 2) * BK * kLd + v_off;

    // S = Q·Kᵀ for this warp's 16 rows and BK keys.
    float s[kNS][4];
#pragma unroll
    for (int j = 0; j < kNS; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kc = 0; kc < DP / 16; ++kc) {
      uint32_t a[4];
      ldsm_x4(a, qa + kc * 16);
#pragma unroll
      for (int j = 0; j < kNS; j += 2) {
        uint32_t b[4];
        ldsm_x4(b, kt + j * 8 * kLd + kc * 16);
        E::mma(s[j], a, b[0], b[1]);
        E::mma(s[j + 1], a, b[2], b[3]);
      }
    }

    // Online softmax in log2 units. Element e of tile j is row (e < 2 ? g :
    // g+8), key k0 + 8j + 2t + (e & 1). Only tiles reaching past some row's
    // last visible key need the mask.
    const bool mask = k0 + BK > n_vis_min;
    float tile_max[2] = {-Math<float>::inf(), -Math<float>::inf()};
#pragma unroll
    for (int j = 0; j < kNS; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        s[j][e] *= scale_log2;
        if (mask && k0 + j * 8 + 2 * t + (e & 1) >= n_vis[r]) s[j][e] = -Math<float>::inf();
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
#pragma unroll
      for (int n = 0; n < kNO; n += 2) {
        uint32_t b[4];
        ldsm_x4_t(b, vt + kk * 16 * kLd + n * 8);
        E::mma(acc[n], a, b[0], b[1]);
        E::mma(acc[n + 1], a, b[2], b[3]);
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
