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

namespace flash {
namespace mma {

// The conversions of BF16::pack and FP16::pack (round to nearest even, fp16
// with subnormals and overflow to ±inf), element by element; TF32::round
// (mma.cuh) is the same for TF32.
struct RoundBF16 {
  static __device__ __forceinline__ float round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
};
struct RoundFP16 {
  static __device__ __forceinline__ float round(float x) { return __half2float(__float2half_rn(x)); }
};

// round_inplace rounds x[0..n) with a grid-stride loop.
template <typename R>
__device__ void round_inplace(float* __restrict__ x, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) x[i] = R::round(x[i]);
}

}  // namespace mma
}  // namespace flash
