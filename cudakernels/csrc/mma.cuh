// Tensor-core building blocks for sm_80+: warp-level mma.sync with fp32
// accumulators on 16×8×16 tiles of bf16 or fp16 operands or 16×8×8 tiles of
// tf32 operands, operand packing from fp32 (inputs are converted on chip),
// and cp.async copies.
//
// Each operand type is a policy (BF16, FP16, TF32): its storage element in
// shared memory, the k of one mma, the mma itself, and p_frag, which turns
// score accumulators into the A operand of P·V. Fragment loads are written in
// units of 16 bytes (8 16-bit or 4 32-bit elements), so one ldmatrix
// addressing scheme serves both widths: an 8×8 matrix of b16 is an 8×4
// matrix of b32, and lane l receives element (l/4, l%4) of the latter.
//
// Fragment layouts (PTX ISA, mma.m16n8k16), with g = lane/4 and t = lane%4:
//   A (16×16, row-major): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..2t+1),
//                         a2 = (g, 2t+8..2t+9), a3 = (g+8, 2t+8..2t+9)
//   B (16×8, k × n):      b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g)
//   C (16×8, fp32):       c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
// Two adjacent C tiles (n 0–7 and 8–15) hold exactly the A fragment of a
// 16×16 operand, which is how P goes from the scores' accumulators straight
// into the P·V product without shared memory.
//
// mma.m16n8k8 with tf32 (PTX ISA), same g and t:
//   A (16×8):  a0 = (g, t), a1 = (g+8, t), a2 = (g, t+4), a3 = (g+8, t+4)
//   B (8×8):   b0 = (k t, n g), b1 = (k t+4, n g)
// One C tile holds columns 2t and 2t+1 where A wants t and t+4. The order of
// the 8 keys inside a P·V product is free, so TF32 reads column t of A as key
// 2t and column t+4 as key 2t+1: the C tile is then the A fragment, and V
// must be stored with its keys permuted the same way (vt_position).
#pragma once
#ifndef FLASH_EMU  // emu/cuda_emu.h has host stand-ins
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif
#include <stdint.h>

namespace flash {
namespace mma {

// p_frag16 builds the A fragment of P for keys 16c … 16c+15 from the score
// tiles 2c and 2c+1, rounded to the 16-bit type by pack.
template <typename E, int NS>
__device__ __forceinline__ void p_frag16(uint32_t (&a)[4], const float (&s)[NS][4], int c) {
  a[0] = E::pack(s[2 * c][0], s[2 * c][1]);
  a[1] = E::pack(s[2 * c][2], s[2 * c][3]);
  a[2] = E::pack(s[2 * c + 1][0], s[2 * c + 1][1]);
  a[3] = E::pack(s[2 * c + 1][2], s[2 * c + 1][3]);
}

// Half16 is the policy of a 16-bit operand type: bf16 (BF16) or fp16
// (FP16), which differ only in the conversion and in the mma's type names.
template <bool kBF16> struct Half16 {
  using Storage = uint16_t;
  static constexpr int kK = 16;               // k of one mma
  static constexpr bool kVTransposed = false;  // V tiles as [key, d]
  static constexpr int kParts = 1;             // an operand is one value (TF32x3: two)
  static constexpr bool kExact = false;        // the exponentials are approximate (TF32x3: exact)
  template <int NS>
  static __device__ __forceinline__ void p_frag(uint32_t (&a)[4], const float (&s)[NS][4], int c) {
    p_frag16<Half16>(a, s, c);
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    if constexpr (kBF16) {
      __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
      return *reinterpret_cast<uint32_t*>(&h);
    } else {
      __half2 h = __floats2half2_rn(lo, hi);
      return *reinterpret_cast<uint32_t*>(&h);
    }
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef FLASH_EMU
    ::emu::mma_m16n8k16(c, a, b0, b1, kBF16);
#else
    if constexpr (kBF16) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
#endif
  }
};
using BF16 = Half16<true>;
using FP16 = Half16<false>;

// TF32 keeps operands as fp32 bit patterns rounded to tf32 (10 explicit
// mantissa bits, round to nearest, ties away from zero: cvt.rna).
struct TF32 {
  using Storage = float;
  static constexpr int kK = 8;
  // V tiles as [d, key] with keys permuted (vt_position), so that ldmatrix
  // without .trans reads B fragments (it cannot transpose 32-bit elements).
  static constexpr bool kVTransposed = true;
  static constexpr int kParts = 1;
  static constexpr bool kExact = false;
  static __device__ __forceinline__ uint32_t cvt(float x) {
    uint32_t r;
#ifdef FLASH_EMU
    r = ::emu::tf32_rna(x);
#else
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
#endif
    return r;
  }
  static __device__ __forceinline__ float round(float x) { return __uint_as_float(cvt(x)); }
  // The A fragment of P for keys 8c … 8c+7 is score tile c, reordered.
  template <int NS>
  static __device__ __forceinline__ void p_frag(uint32_t (&a)[4], const float (&s)[NS][4], int c) {
    a[0] = cvt(s[c][0]), a[1] = cvt(s[c][2]), a[2] = cvt(s[c][1]), a[3] = cvt(s[c][3]);
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef FLASH_EMU
    ::emu::mma_m16n8k8_tf32(c, a, b0, b1);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
  }
};

// TF32x3 is float32 on tf32 tensor cores (3xTF32): an operand x is held
// as hi = tf32(x) and lo = tf32(x − hi), and a product a·b is taken as
// a_lo·b_hi + a_hi·b_lo + a_hi·b_hi; the dropped lo·lo term and the
// split's residue are about 2⁻²² of the product, below float32's own
// rounding of the sums. kParts = 2: a K-major image of a [rows, DP] tile
// holds the hi values in columns 0 … DP−1 and the lo values in columns
// DP … 2DP−1 (a tile twice as wide along K), and an array of A fragments
// holds the hi fragments and then the lo ones (p_frag_split). kExact: the
// kernels take scores in natural units with expf, as the CUDA-core FP32
// kernels and the suite's naive float32 computation do (not ex2.approx in
// log2 units), since this is the FP32 precision.
struct TF32x3 : TF32 {
  static constexpr int kParts = 2;
  static constexpr bool kExact = true;
  // lo is x − hi rounded to tf32: x − hi is exact in float32 (hi holds x's
  // leading 11 bits), and its own leading 11 bits are what the tensor core
  // reads. For an infinite or NaN x it is 0, not ∞ − ∞: hi alone carries
  // the value, so that an infinite operand gives the products the naive
  // computation gets (±∞, or NaN where it meets a 0), not NaN everywhere.
  static __device__ __forceinline__ uint32_t lo(float x, uint32_t hi) {
    const float r = x - __uint_as_float(hi);
    return cvt(fabsf(r) <= 3.40282347e+38f ? r : 0.f);  // false for ±∞ and NaN
  }
  // The hi and lo A fragments of P for keys 8c … 8c+7 (TF32::p_frag's order).
  template <int NS>
  static __device__ __forceinline__ void p_frag_split(uint32_t (&hi)[4], uint32_t (&lo)[4], const float (&s)[NS][4],
                                                      int c) {
    constexpr int kOrder[4] = {0, 2, 1, 3};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float x = s[c][kOrder[i]];
      hi[i] = cvt(x);
      lo[i] = TF32x3::lo(x, hi[i]);
    }
  }
};

// frag_count is the A fragments of a product over COLS columns of scores
// for E: COLS / E::kK, and as many again for the lo parts of a split type.
template <typename E, int COLS> __host__ __device__ constexpr int frag_count() { return COLS / E::kK * E::kParts; }

// put_frag writes the A fragment(s) of score columns 8·(E::kK/8)·c …: a[c],
// and for a split type its lo part a[c + NF/2].
template <typename E, int NS, int NF>
__device__ __forceinline__ void put_frag(uint32_t (&a)[NF][4], const float (&s)[NS][4], int c) {
  if constexpr (E::kParts == 1) {
    E::p_frag(a[c], s, c);
  } else {
    E::p_frag_split(a[c], a[c + NF / 2], s, c);
  }
}

// StorageOf converts 16 bytes' worth of fp32 values (8 for 16-bit types, 4
// for TF32) into one uint4 of E's storage type.
template <typename E> struct StorageOf {
  static constexpr int kVec = 8;
  static __device__ __forceinline__ uint4 convert(const float (&f)[8]) {
    return make_uint4(E::pack(f[0], f[1]), E::pack(f[2], f[3]), E::pack(f[4], f[5]), E::pack(f[6], f[7]));
  }
};
template <> struct StorageOf<TF32> {
  static constexpr int kVec = 4;
  static __device__ __forceinline__ uint4 convert(const float (&f)[4]) {
    return make_uint4(TF32::cvt(f[0]), TF32::cvt(f[1]), TF32::cvt(f[2]), TF32::cvt(f[3]));
  }
};
// The split type's part 0 is the hi values, part 1 the lo ones.
template <> struct StorageOf<TF32x3> {
  static constexpr int kVec = 4;
  static __device__ __forceinline__ uint4 convert(const float (&f)[4], int part) {
    uint32_t y[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t hi = TF32::cvt(f[e]);
      y[e] = part == 0 ? hi : TF32x3::lo(f[e], hi);
    }
    return make_uint4(y[0], y[1], y[2], y[3]);
  }
};

// image_value converts 16 bytes' worth of fp32 values into part `part` of
// E's image (every type but a split one has part 0 alone).
template <typename E, int kVec>
__device__ __forceinline__ uint4 image_value(const float (&f)[kVec], int part) {
  if constexpr (E::kParts == 1) {
    return StorageOf<E>::convert(f);
  } else {
    return StorageOf<E>::convert(f, part);
  }
}

// load_chunk reads the kVec fp32 elements src[0 … kVec) of a row, zero
// where the row is absent (!row_ok) or past dim (columns c0 + e ≥ dim),
// with 16-byte loads where the row's alignment allows.
template <int kVec>
__device__ __forceinline__ void load_chunk(float (&f)[kVec], const float* src, bool row_ok, long long c0,
                                           long long dim) {
  if (row_ok && dim % 4 == 0 && c0 + kVec <= dim) {
#pragma unroll
    for (int e = 0; e < kVec; e += 4) {
      const float4 a = *reinterpret_cast<const float4*>(src + e);
      f[e] = a.x, f[e + 1] = a.y, f[e + 2] = a.z, f[e + 3] = a.w;
    }
  } else {
#pragma unroll
    for (int e = 0; e < kVec; ++e) f[e] = row_ok && c0 + e < dim ? src[e] : 0.f;
  }
}

// vt_position is where key j goes in the permuted rows of a TF32 Vᵀ copy:
// inside each group of 8, key 2t to position t and key 2t+1 to t+4.
__host__ __device__ __forceinline__ long long vt_position(long long j) {
  const int r = static_cast<int>(j & 7);
  return (j & ~7LL) | ((r & 1) ? 4 + (r >> 1) : (r >> 1));
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// ldsm_x4 loads four 8×8 matrices of 16-bit elements; lane l gives the
// address of row l%8 of matrix l/8 and receives in r[i] the elements
// (l/4, 2(l%4)..2(l%4)+1) of matrix i (transposed with ldsm_x4_t).
#ifdef FLASH_EMU
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) { ::emu::ldmatrix_x4(r, p, false); }
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) { ::emu::ldmatrix_x4(r, p, true); }
#else
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
#endif

// cp_async16 copies 16 bytes, or writes 16 zero bytes when !valid (src-size
// 0: nothing is read, so src only has to be some valid address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
#ifdef FLASH_EMU
  ::emu::copy_or_zero(dst, src, valid ? 16 : 0, 16);
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
#endif
}

__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool valid) {
#ifdef FLASH_EMU
  ::emu::copy_or_zero(dst, src, valid ? 4 : 0, 4);
#else
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0));
#endif
}

// Emulated copies land at once, so committing and waiting do nothing there.
__device__ __forceinline__ void cp_async_commit() {
#ifndef FLASH_EMU
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N> __device__ __forceinline__ void cp_async_wait() {
#ifndef FLASH_EMU
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// bias_tile_aligned reports whether cp_bias_tile may copy the bias slice
// at src (rows n floats apart) 16 bytes at a time: every row starts on a
// 16-byte boundary.
__device__ __forceinline__ bool bias_tile_aligned(const float* src, long long n) {
  return src != nullptr && n % 4 == 0 && reinterpret_cast<unsigned long long>(src) % 16 == 0;
}

// NoSwizzle places column c of row r of a shared tile at column c.
struct NoSwizzle {
  __device__ __forceinline__ static int col(int, int c) { return c; }
};

// cp_bias_tile copies the bias of rows [r0, r0 + ROWS) and keys [c0, c0 +
// COLS) of a slice (rows n apart) into dst (row stride LD floats), zeros
// past rows_real or n; key c of row r goes to column Swz::col(r, c), which
// must keep groups of 4 columns together. aligned (bias_tile_aligned, c0 a
// multiple of 4): 16-byte copies, 4 keys each; else one per key, as a row
// of the slice starts anywhere. Every thread of the block (kThreads) takes
// part.
template <int ROWS, int COLS, int LD, int kThreads, typename Swz = NoSwizzle>
__device__ __forceinline__ void cp_bias_tile(float* dst, const float* __restrict__ src, long long r0,
                                             long long rows_real, long long c0, long long n, bool aligned) {
  if (aligned) {
    constexpr int kChunks = COLS / 4;
    for (int c = threadIdx.x; c < ROWS * kChunks; c += kThreads) {
      const int r = c / kChunks, col = c % kChunks * 4;
      const bool ok = r0 + r < rows_real && c0 + col < n;
      cp_async16(dst + r * LD + Swz::col(r, col), ok ? src + (r0 + r) * n + c0 + col : src, ok);
    }
  } else {
    for (int c = threadIdx.x; c < ROWS * COLS; c += kThreads) {
      const int r = c / COLS, col = c % COLS;
      const bool ok = r0 + r < rows_real && c0 + col < n;
      cp_async4(dst + r * LD + Swz::col(r, col), ok ? src + (r0 + r) * n + c0 + col : src, ok);
    }
  }
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
