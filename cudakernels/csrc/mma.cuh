// Tensor-core building blocks for sm_80+: warp-level mma.sync on 16×8×16
// tiles with bf16 or fp16 operands and fp32 accumulators, operand packing
// from fp32 (inputs are converted on chip), and cp.async copies.
//
// Fragment layouts (PTX ISA, mma.m16n8k16), with g = lane/4 and t = lane%4:
//   A (16×16, row-major): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..2t+1),
//                         a2 = (g, 2t+8..2t+9), a3 = (g+8, 2t+8..2t+9)
//   B (16×8, k × n):      b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g)
//   C (16×8, fp32):       c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
// Two adjacent C tiles (n 0–7 and 8–15) hold exactly the A fragment of a
// 16×16 operand, which is how P goes from the scores' accumulators straight
// into the P·V product without shared memory.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace flash {
namespace mma {

struct BF16 {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

struct FP16 {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// cp_async16 copies 16 bytes, or writes 16 zero bytes when !valid (src-size
// 0: nothing is read, so src only has to be some valid address).
__device__ __forceinline__ void cp_async16(float* dst, const float* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// cp_tile starts copying rows [r0, r0+ROWS) of a row-major [n, dim] fp32
// matrix into a [ROWS, LD] shared tile, zero-filling rows past n and columns
// past dim up to DP. 16-byte copies need dim % 4 == 0 (aligned rows);
// otherwise it falls back to 4-byte copies.
template <int ROWS, int DP, int LD, int THREADS>
__device__ __forceinline__ void cp_tile(float* dst, const float* src, long long r0, long long n, long long dim) {
  if (dim % 4 == 0) {
    constexpr int kChunks = DP / 4;
    for (int c = threadIdx.x; c < ROWS * kChunks; c += THREADS) {
      const int r = c / kChunks, col = c % kChunks * 4;
      const bool ok = r0 + r < n && col < dim;
      cp_async16(dst + r * LD + col, ok ? src + (r0 + r) * dim + col : src, ok);
    }
  } else {
    for (int e = threadIdx.x; e < ROWS * DP; e += THREADS) {
      const int r = e / DP, col = e % DP;
      const bool ok = r0 + r < n && col < dim;
      cp_async4(dst + r * LD + col, ok ? src + (r0 + r) * dim + col : src, ok);
    }
  }
}

}  // namespace mma
}  // namespace flash
