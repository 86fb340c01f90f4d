// Helpers shared by every kernel family: the causal mask, per-type math,
// group reductions and launch-configuration guards.
#pragma once

namespace flash {

// All kernels carve their tiles out of this one dynamic shared buffer. One
// declaration for every instantiation: extern __shared__ arrays of different
// types under one name do not compile.
extern __shared__ __align__(16) unsigned char smem[];

// visible_keys is the number of keys query row i sees, keys 0 … n−1, under the
// bottom-right aligned causal mask (key j visible iff j ≤ i + nk − nq). It is
// nondecreasing in i, so the last row of a tile bounds the keys the whole tile
// needs: that is what causal block skipping relies on.
__device__ __forceinline__ long long visible_keys(long long i, long long nq, long long nk, bool causal) {
  if (!causal) return nk;
  long long n = i + nk - nq + 1;
  return n < 0 ? 0 : (n > nk ? nk : n);
}

// first_query_seeing is the first query row that sees key j under the causal
// mask (possibly ≥ nq: then no row does).
__device__ __forceinline__ long long first_query_seeing(long long j, long long nq, long long nk, bool causal) {
  if (!causal) return 0;
  long long i = j - (nk - nq);
  return i < 0 ? 0 : i;
}

// Math gives exp, log, fma and infinity in the precision of T.
template <typename T> struct Math;

template <> struct Math<float> {
  static __device__ __forceinline__ float exp(float x) { return expf(x); }
  static __device__ __forceinline__ float log(float x) { return logf(x); }
  static __device__ __forceinline__ float fma(float a, float b, float c) { return fmaf(a, b, c); }
  static __device__ __forceinline__ float inf() { return __int_as_float(0x7f800000); }
};

template <> struct Math<double> {
  static __device__ __forceinline__ double exp(double x) { return ::exp(x); }
  static __device__ __forceinline__ double log(double x) { return ::log(x); }
  static __device__ __forceinline__ double fma(double a, double b, double c) { return ::fma(a, b, c); }
  static __device__ __forceinline__ double inf() { return __longlong_as_double(0x7ff0000000000000LL); }
};

// group8_max and group8_sum reduce over the 8 consecutive lanes that share one
// tile row. The xor butterfly leaves the same bits in all 8 lanes (each step
// adds the same two partial sums, only commuted), so every lane of a row holds
// identical m and l.
template <typename T> __device__ __forceinline__ T group8_max(T x) {
#pragma unroll
  for (int off = 4; off > 0; off >>= 1) {
    T y = __shfl_xor_sync(0xffffffffu, x, off);
    x = y > x ? y : x;
  }
  return x;
}

template <typename T> __device__ __forceinline__ T group8_sum(T x) {
#pragma unroll
  for (int off = 4; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// require_launch traps when the host launched a kernel with another block size
// or less dynamic shared memory than the kernel's layout needs. The host
// computes both from the same table (launch_gpu.go); a mismatch is a bug that
// must fail loudly instead of corrupting memory.
__device__ __forceinline__ void require_launch(unsigned threads, unsigned smem_bytes) {
  unsigned have;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(have));
  if (blockDim.x != threads || blockDim.y != 1 || blockDim.z != 1 || have < smem_bytes) __trap();
}

}  // namespace flash
