// The attention variants in the Hopper kernels (fwd_wgmma.cuh,
// bwd_wgmma.cuh): the warpgroup epilogue the _var kernels store through, on
// top of tc_variants.cuh (the element-wise work on the scores, which the
// mma.sync kernels share).
//
// Every Hopper attention kernel is compiled twice (hopper.cu): plain
// (kVar = false: no grouped heads, no lengths, no window bound on the left,
// no modifier; the causal mask and a right bound are fine) and _var (every
// variant). The plain one keeps its tuned loops as they were: masks compare
// a key with the row's one upper bound, since its rows see keys from 0. The
// _var one compares with both bounds, and compiles the element-wise work on
// the scores (scale, modifiers, mask, exp) four times, picked per tile by
// with_variant: without modifiers masked and unmasked, as the plain kernel
// does, so that grouped heads and masks alone pay nothing for the
// modifiers; with them, with and without the softcap, masked and unmasked
// (six copies: the modifiers' unmasked tiles, most of them, skip the
// compares, and ALiBi's bias is one FFMA there: AlibiRow). A whole copy of
// the body for the modifiers, chosen once per block, was tried first: the
// module's PTX grew from 2.1 to 11 MB (7.3 MB with four copies of the
// element-wise loops alone) with the same loops.
#pragma once
#include "common.cuh"
#include "sm90.cuh"
#include "tc_variants.cuh"

namespace flash {
namespace sm90 {

// wg_bar synchronises the 128 threads of warpgroup wg (named barrier
// 1 + wg; barrier 0 is __syncthreads).
__device__ __forceinline__ void wg_bar(int wg) {
#ifdef FLASH_EMU
  ::emu::arrive_named(1 + wg, 128);
#else
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
#endif
}

// finish_wg_rows ends a thread's two rows of a warpgroup forward, row0
// and row0 + 8, with finish_row's conventions: it sums l over the quad,
// sets inv to o_scale / l (0 for a row that sees no key: vis ≤ 0) and, from
// t == 0, writes the LSE of the rows below nq (+inf without keys). The
// caller stores O·inv (store_wg_rows).
__device__ __forceinline__ void finish_wg_rows(const Params& p, long long bh, long long nq, long long row0,
                                               const long long (&vis)[2], const float (&m)[2], float (&l)[2],
                                               float o_scale, int t, float (&inv)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const bool any_key = vis[r] > 0;
    inv[r] = any_key ? o_scale / l[r] : 0.f;
    if (t == 0 && row0 + 8 * r < nq)
      static_cast<float*>(p.lse)[bh * nq + row0 + 8 * r] =
          any_key ? lse_log2(m[r], l[r]) : Math<float>::inf();
  }
}

// store_wg_rows writes a warpgroup's fp32 accumulators c of DP columns
// (64 rows: warp w holds rows 16w + g and 16w + g + 8, scaled by s[0] and
// s[1]; n8 tile n holds columns 8n + 2t and 8n + 2t + 1) to rows row0 …
// row0 + 63 of y (row stride ld; rows ≥ n and columns ≥ dim skipped)
// through BYTES of shared memory at the shared address region, which no
// other warpgroup touches. Stored straight from the accumulators, each
// 4-byte store instruction of a warp hits 8 rows (8 lines, 8 cycles of the
// L1 for 128 bytes); here the columns go through shared memory in passes of
// W = BYTES / 256, in 16-byte chunks swizzled by row (chunk c of row r at
// c ⊕ 2(r mod 4), so that a half-warp's 8-byte writes hit 32 distinct
// banks, and 8 lanes' 16-byte reads of one row too), and come back a row
// at a time: each warp stores 512 contiguous bytes per instruction (float4
// where y, ld and dim allow: vec). Every thread of the warpgroup calls it;
// it starts with a warpgroup barrier, so the region may still be in use by
// the warpgroup (its wgmma must be complete) up to the call.
template <int DP, int BYTES>
__device__ __forceinline__ void store_wg_rows(float* y, long long ld, long long row0, long long n, long long dim,
                                              uint32_t region, const float (&c)[DP / 8][4], const float (&s)[2],
                                              int wg, bool vec) {
  constexpr int W = BYTES / 256 < DP ? BYTES / 256 : DP;  // columns per pass
  static_assert(W % 32 == 0 && DP % W == 0, "whole groups of 8 chunks per staged row, whole passes");
  constexpr int kChunks = W / 4;  // 16-byte chunks per staged row
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int pass = 0; pass < DP / W; ++pass) {
    wg_bar(wg);  // the region's earlier readers (wgmma, the last pass) are done
#pragma unroll
    for (int j = 0; j < W / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp * 16 + g + 8 * h, col = 8 * j + 2 * t, n8 = pass * (W / 8) + j;
        const uint32_t a = region + (r * kChunks + ((col / 4) ^ (2 * (r & 3)))) * 16 + (col & 3) * 4;
#ifdef FLASH_EMU
        *reinterpret_cast<float2*>(::emu::shared_at(a)) = float2{c[n8][2 * h] * s[h], c[n8][2 * h + 1] * s[h]};
#else
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"(c[n8][2 * h] * s[h]),
                     "f"(c[n8][2 * h + 1] * s[h])
                     : "memory");
#endif
      }
    wg_bar(wg);
#pragma unroll
    for (int i = tid; i < 64 * kChunks; i += 128) {
      const int r = i / kChunks, c4 = i % kChunks;
      float4 v;
#ifdef FLASH_EMU
      v = *reinterpret_cast<const float4*>(::emu::shared_at(region + (r * kChunks + (c4 ^ (2 * (r & 3)))) * 16));
#else
      asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                   : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                   : "r"(region + (r * kChunks + (c4 ^ (2 * (r & 3)))) * 16)
                   : "memory");
#endif
      const long long row = row0 + r;
      const int col = pass * W + 4 * c4;
      if (row >= n || col >= dim) continue;
      float* yr = y + row * ld + col;
      if (vec) {  // asm: nvcc merged a plain float4 store with the scalar ones below into 4 scalar stores
#ifdef FLASH_EMU
        *reinterpret_cast<float4*>(yr) = v;
#else
        asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(yr), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                     : "memory");
#endif
      } else {
        yr[0] = v.x;
        if (col + 1 < dim) yr[1] = v.y;
        if (col + 2 < dim) yr[2] = v.z;
        if (col + 3 < dim) yr[3] = v.w;
      }
    }
  }
}

// rows_vec reports whether rows of y (row stride ld) take 16-byte stores
// of 4 columns up to dim: store_wg_rows' vec.
__device__ __forceinline__ bool rows_vec(const float* y, long long ld, long long dim) {
  return (reinterpret_cast<unsigned long long>(y) & 15) == 0 && ld % 4 == 0 && dim % 4 == 0;
}

// WgRows holds a thread's share of 64 rows of a float32 tensor that its
// warpgroup converts into a 64-row tile image of E (K-major with the
// 128-byte swizzle, image_chunk's layout: the bytes a bulk copy of one tile
// of to_image_rows' images brings): kPer chunks of kVec elements (kPer ·
// kVec = 32 at DP = 64, 64 at 128). The warp-specialized forward reads Q
// this way (fwd_wgmma_ws.cuh's QRows), the plain 16-bit dK/dV kernels
// their K and V blocks (bwd_wgmma.cuh's dkdv_body).
template <typename E, int DP> struct WgRows {
  static constexpr int kRows = 64, kVec = mma::StorageOf<E>::kVec, kRowChunks = DP / kVec;
  static constexpr int kPer = kRows * kRowChunks / 128;
  float f[kPer][kVec];

  // load issues every load of rows r0 … r0 + 63 of x (n rows of dim
  // columns, row stride ld; zero past them) as thread tid of the
  // warpgroup: all of them in flight at once, so that the conversion costs
  // one DRAM round trip, not one per chunk (one chunk after another, a
  // first version of the forward's cost 60–90 µs over the forward, H100
  // 2026-12-05).
  __device__ __forceinline__ void load(const float* x, long long ld, long long r0, long long n, long long dim,
                                       int tid) {
    // 16-byte loads where every row starts on a 16-byte boundary.
    const bool vec = dim % 4 == 0 && ld % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = tid + j * 128, r = i / kRowChunks, c = i % kRowChunks;
      const long long row = r0 + r, c0 = static_cast<long long>(c) * kVec;
      const float* src = x + row * ld + c0;
      if (vec && row < n && c0 + kVec <= dim) {
#pragma unroll
        for (int e = 0; e < kVec; e += 4) {
          const float4 a = *reinterpret_cast<const float4*>(src + e);
          f[j][e] = a.x, f[j][e + 1] = a.y, f[j][e + 2] = a.z, f[j][e + 3] = a.w;
        }
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) f[j][e] = row < n && c0 + e < dim ? src[e] : 0.f;
      }
    }
  }
  // store converts the rows into the tile at shared address tile. The
  // caller orders the stores before wgmma reads the tile
  // (fence_proxy_async, then a warpgroup barrier).
  __device__ __forceinline__ void store(uint32_t tile, int tid) const {
    store_to(smem + (tile - smem_addr(smem)), tid);
  }
  // store_global writes the same bytes to a tile of an image in global
  // memory (img: the tile's first element), for later bulk copies.
  __device__ __forceinline__ void store_global(typename E::Storage* img, int tid) const {
    store_to(reinterpret_cast<unsigned char*>(img), tid);
  }

 private:
  __device__ __forceinline__ void store_to(unsigned char* tile, int tid) const {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = tid + j * 128;
      *reinterpret_cast<uint4*>(tile + image_chunk(i / kRowChunks, i % kRowChunks, kRows) * 16) =
          mma::StorageOf<E>::convert(f[j]);
    }
  }
};

}  // namespace sm90
}  // namespace flash
