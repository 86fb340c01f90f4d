// Storage rounding for the low-precision backward. The BF16, FP16 and TF32
// forwards round Q, K and V to the storage format before every tensor-core
// product; where no tensor-core backward serves a head dimension, the
// backward runs the float32 CUDA-core kernels on operands rounded the same
// way (these kernels overwrite the backward's device copies in place), so
// that the gradients are those of the function the forward computed. In
// particular dP = dO·V and D = rowsum(dO∘O) then see the same V that built O,
// and dS = P∘(dP − D) cancels exactly where the forward's softmax is
// constant (a row that sees one key: O = V exactly, dP and D run the same
// fma chain).
#pragma once
#include "mma.cuh"
#include "params.cuh"
#include "variants.cuh"

namespace flash {
namespace mma {

// The conversions of BF16::pack and FP16::pack (round to nearest even, fp16
// with subnormals and overflow to ±inf), element by element; TF32::round
// (mma.cuh) is the same for TF32.
struct RoundBF16 {
  static constexpr int kParts = 1;
  static __device__ __forceinline__ float round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
};
struct RoundFP16 {
  static constexpr int kParts = 1;
  static __device__ __forceinline__ float round(float x) { return __half2float(__float2half_rn(x)); }
};

// round_inplace rounds x[0..n) with a grid-stride loop.
template <typename R>
__device__ void round_inplace(float* __restrict__ x, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) x[i] = R::round(x[i]);
}

// do_o_fma adds the product x·y to acc as the backward's dP = dO·Vᵀ
// takes its products: in float32 for a storage rounding R, and for the
// split type (R = TF32x3, FP32 on tf32 tensor cores) as its three parts,
// the two small ones first as its kernels add them. With the split, D is
// made of the products dP is made of: where the forward's softmax is
// constant (a row that sees one key, O = V's hi + lo exactly, whose own
// parts are those), dP − D then differs by the order of the additions
// alone, not by the lo·lo term and lo's rounding that 3xTF32 drops; with
// the float32 products instead, that difference outgrew the FP32 bounds
// at D = 128 (dQ of a one-key row, H100 and host, 2026-12-06).
template <typename R>
__device__ __forceinline__ float do_o_fma(float x, float y, float acc) {
  if constexpr (R::kParts > 1) {
    const uint32_t xh = R::cvt(x), yh = R::cvt(y);
    acc = fmaf(__uint_as_float(xh), __uint_as_float(R::lo(y, yh)), acc);
    acc = fmaf(__uint_as_float(R::lo(x, xh)), __uint_as_float(yh), acc);
    return fmaf(__uint_as_float(xh), __uint_as_float(yh), acc);
  } else {
    return fmaf(x, y, acc);
  }
}

// dot_do_o_round is the tensor-core precisions' D = rowsum(dO∘O) − dLSE
// and their storage rounding of dO in one pass over the rows: dO is read
// once, rounded to R and written back (the rounding pass it replaces read
// and wrote it once more), and D sums the rounded dO times O, as the
// products of the backward see them (do_o_fma). One warp per row, its
// lanes reading 16-byte pieces where the row allows (else one element
// each) and summing through a fixed butterfly of shuffles, so that D is
// the same on every run, though not in the fma chain's order of
// simt::dot_do_o: that order matters where the CUDA-core backward computes
// dP = dO·V with the same chain (a row that sees one key: dP − D = 0
// exactly), which is why that backward keeps the two passes. Every row of
// dO is rounded, padding included, as before; padding rows get D = 0. The
// split type (FP32) keeps dO as it is, unwritten, and so does every type
// without kWriteBack: the Hopper backward reads dO only through its
// images, whose conversion rounds it to R the same way (rounding twice to
// one format is rounding once), so writing the rounded rows back would be
// a third of the pass's traffic for nothing.
template <typename R, bool kWriteBack = true>
__device__ void dot_do_o_round(const Params& p) {
  const long long rows = p.b * p.h * p.nq;
  const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps: blockDim.x is a multiple of 32
  const int dim = static_cast<int>(p.dim);
  const unsigned nq = static_cast<unsigned>(p.nq);
  const unsigned bh = static_cast<unsigned>(row) / nq, i = static_cast<unsigned>(row) - bh * nq;
  // Params carries dO as an input; here it is the backward's own device
  // copy, which the rounding pass it replaces overwrote in place too.
  float* dout = head_of(const_cast<float*>(static_cast<const float*>(p.dout)), bh, p.h, p.dout_batch_stride,
                        p.dout_head_stride) +
                i * p.dout_row_stride;
  const float* o =
      head_of(static_cast<const float*>(p.o), bh, p.h, p.o_batch_stride, p.o_head_stride) + i * p.o_row_stride;
  const bool real = i < seq_mask(p, bh).lq;
  float acc = 0.f;
  const bool vec = dim % 4 == 0 && (reinterpret_cast<uintptr_t>(dout) | reinterpret_cast<uintptr_t>(o)) % 16 == 0;
  if (vec) {
    for (int d = 4 * lane; d < dim; d += 4 * 32) {
      float4 x = *reinterpret_cast<const float4*>(dout + d);
      if constexpr (R::kParts == 1) {
        x = make_float4(R::round(x.x), R::round(x.y), R::round(x.z), R::round(x.w));
        if constexpr (kWriteBack) *reinterpret_cast<float4*>(dout + d) = x;
      }
      if (real) {
        const float4 y = __ldg(reinterpret_cast<const float4*>(o + d));
        acc = do_o_fma<R>(x.x, y.x, acc);
        acc = do_o_fma<R>(x.y, y.y, acc);
        acc = do_o_fma<R>(x.z, y.z, acc);
        acc = do_o_fma<R>(x.w, y.w, acc);
      }
    }
  } else {
    for (int d = lane; d < dim; d += 32) {
      float x = dout[d];
      if constexpr (R::kParts == 1) {
        x = R::round(x);
        if constexpr (kWriteBack) dout[d] = x;
      }
      if (real) acc = do_o_fma<R>(x, __ldg(o + d), acc);
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    if (real && p.dlse != nullptr) acc -= static_cast<const float*>(p.dlse)[row];
    static_cast<float*>(p.delta)[row] = real ? acc : 0.f;
  }
}

}  // namespace mma
}  // namespace flash
