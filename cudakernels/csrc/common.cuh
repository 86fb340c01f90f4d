// Helpers shared by every kernel family: the causal mask, per-type math,
// group reductions and launch-configuration guards.
#pragma once
#include "params.cuh"

namespace flash {

// All kernels carve their tiles out of this one dynamic shared buffer. One
// declaration for every instantiation: extern __shared__ arrays of different
// types under one name do not compile.
#ifndef FLASH_EMU  // emu/cuda_emu.h declares it
extern __shared__ __align__(16) unsigned char smem[];
#endif

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

// Math gives exp, log, log2, fma and infinity in the precision of T.
template <typename T> struct Math;

template <> struct Math<float> {
  static __device__ __forceinline__ float exp(float x) { return expf(x); }
  static __device__ __forceinline__ float log(float x) { return logf(x); }
  static __device__ __forceinline__ float log2(float x) { return log2f(x); }
  static __device__ __forceinline__ float fma(float a, float b, float c) { return fmaf(a, b, c); }
  static __device__ __forceinline__ float inf() { return __int_as_float(0x7f800000); }
};

template <> struct Math<double> {
  static __device__ __forceinline__ double exp(double x) { return ::exp(x); }
  static __device__ __forceinline__ double log(double x) { return ::log(x); }
  static __device__ __forceinline__ double log2(double x) { return ::log2(x); }
  static __device__ __forceinline__ double fma(double a, double b, double c) { return ::fma(a, b, c); }
  static __device__ __forceinline__ double inf() { return __longlong_as_double(0x7ff0000000000000LL); }
};

// lse_log2 is a row's log-sum-exp in natural units from its maximum m
// and its sum l = Σ exp2(s − m), both in log2 units: m itself where m is
// +Inf, since a +Inf score makes l NaN (exp2(∞ − ∞)) where the naive
// computation's LSE is +Inf (kernels' doc: O NaN, LSE +Inf), and a NaN
// LSE would then make the backward's P NaN for every key of the row.
template <typename T> __device__ __forceinline__ T lse_log2(T m, T l) {
  return m == Math<T>::inf() ? m : (m + Math<T>::log2(l)) * T(0.6931471805599453);
}
// lse_natural is lse_log2 for m in natural units and l = Σ exp(s − m).
template <typename T> __device__ __forceinline__ T lse_natural(T m, T l) {
  return m == Math<T>::inf() ? m : m + Math<T>::log(l);
}

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

// ex2_ftz is 2^x by the hardware's approximation with results below 2^−126
// flushed to zero: a probability that small is far below what its 16-bit
// rounding for P·V keeps, and exp2f's care for subnormal results costs a
// compare and two predicated multiplications per score.
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
#ifdef FLASH_EMU  // without the flush; no CUDA-core kernel calls it
  y = exp2f(x);
#else
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
#endif
  return y;
}

// score_exp is the exponential the tensor-core kernels take of a score
// less a reference: ex2_ftz in log2 units, or with kExact (the FP32
// precision's split type, mma::TF32x3) expf in natural units, as the
// CUDA-core float32 kernels and the naive computation the suite compares
// with. score_unit is the factor that brings a scaled score into those
// units.
template <bool kExact> __device__ __forceinline__ float score_exp(float x) {
  if constexpr (kExact) {
    return expf(x);
  } else {
    return ex2_ftz(x);
  }
}
template <bool kExact> __device__ __forceinline__ float score_unit(double scale) {
  return kExact ? static_cast<float>(scale) : static_cast<float>(scale) * 1.4426950408889634f;
}

// The helpers below work on score-like accumulators in the C layout of an
// m16n8 tile (mma.cuh), NS n8 tiles per warp: element e of tile j belongs to
// row e/2 of the thread's two (g and g+8) and column 8j + 2t + e%2.

// MaskFlag<B> converts to B at compile time, in device code too (the
// std::integral_constant conversion is host-only without
// --expt-relaxed-constexpr).
template <bool B> struct MaskFlag {
  __host__ __device__ constexpr operator bool() const { return B; }
};

// with_mask calls body(MaskFlag<true>{}) when masked and
// body(MaskFlag<false>{}) otherwise, so that a loop written once with
// `if (kMasked && …)` per element is compiled twice and the unmasked copy
// carries no compare. nvcc used to do this split (loop unswitching) on its
// own while the mask arrived as kernel arguments; once it came from Params
// it stopped (half the ex2 in the backward's PTX, 30–40 % slower on the
// H200), so the split is explicit and no longer up to a heuristic.
template <typename F>
__device__ __forceinline__ void with_mask(bool masked, F&& body) {
  if (masked)
    body(MaskFlag<true>{});
  else
    body(MaskFlag<false>{});
}

// probs_by_row turns scores s into P = exp2(scale_log2·s − lse2[row]), with
// the LSE in log2 units, and 0 for the columns k0 + … at or past vis[row]
// where masked (columns are keys starting at k0).
// kExact: natural units and expf (score_exp), scale_log2 and lse2 then
// natural too.
template <int NS, bool kExact = false>
__device__ __forceinline__ void probs_by_row(float (&s)[NS][4], float scale_log2, const float (&lse2)[2], bool masked,
                                             long long k0, int t, const long long (&vis)[2]) {
  with_mask(masked, [&](auto kMasked) {
#pragma unroll
    for (int j = 0; j < NS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = score_exp<kExact>(s[j][e] * scale_log2 - lse2[e >> 1]);
        if (kMasked && k0 + 8 * j + 2 * t + (e & 1) >= vis[e >> 1]) p = 0.f;
        s[j][e] = p;
      }
  });
}

// ds_by_row turns dP into dS = P∘(dP − D[row]); ds_by_col does the same
// with D indexed by column (d[c] for column c), for the transposed products.
template <int NS>
__device__ __forceinline__ void ds_by_row(float (&dp)[NS][4], const float (&p)[NS][4], const float (&d)[2]) {
#pragma unroll
  for (int j = 0; j < NS; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dp[j][e] = p[j][e] * (dp[j][e] - d[e >> 1]);
}
template <int NS>
__device__ __forceinline__ void ds_by_col(float (&dp)[NS][4], const float (&p)[NS][4], const float* d, int t) {
#pragma unroll
  for (int j = 0; j < NS; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dp[j][e] = p[j][e] * (dp[j][e] - d[8 * j + 2 * t + (e & 1)]);
}

// finish_row ends the forward for one of the thread's rows (half 0: g,
// half 1: g+8) of head bh: it sums the row's partial l over its 4 lanes
// (every lane must call, rows past nq too), then writes O = o_scale·acc / l
// for the columns below p.dim (o_scale: the dropout factor 1/(1−p), applied
// here in float32 rather than to P before P·V, where TF32, BF16 and FP16
// would round it with P and so scale every output by the same rounding
// error) and, from lane t = 0, LSE = m + log l in natural units
// (m in log2 units; kNatural: m in natural units, l a sum of exp; lse_natural). Only the mask decides that a row has no key (any_key
// false: O = 0 exactly, whatever acc holds: its zero probabilities met a
// tile's infinite value, LSE = +inf). Every other row follows IEEE arithmetic as the
// naive softmax does: NaN scores make l NaN, and all scores −inf leave
// l = 0, so O = 0·(1/0) = NaN and LSE = −inf.
template <int NO, bool kNatural = false>
__device__ __forceinline__ void finish_row(const Params& p, long long bh, long long row, bool any_key,
                                           const float (&acc)[NO][4], int half, float m, float l,
                                           float o_scale = 1.f) {
  const int t = threadIdx.x % 4;
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  // p's fields into registers first: p lives in parameter space, which the
  // stores to O could alias as far as nvcc knows, so reading p.dim in the
  // column loop reloaded it per column.
  const long long nq = p.nq, dim = p.dim;
  if (row >= nq) return;
  const float inv = any_key ? o_scale / l : 0.f;
  float* orow = head_of(static_cast<float*>(p.o), bh, p.h, p.o_batch_stride, p.o_head_stride) + row * p.o_row_stride;
  float* lse = static_cast<float*>(p.lse);
#pragma unroll
  for (int n = 0; n < NO; ++n) {
    const int col = n * 8 + 2 * t;
    if (col < dim) orow[col] = any_key ? acc[n][2 * half] * inv : 0.f;
    if (col + 1 < dim) orow[col + 1] = any_key ? acc[n][2 * half + 1] * inv : 0.f;
  }
  if (t == 0) lse[bh * nq + row] = any_key ? (kNatural ? lse_natural(m, l) : lse_log2(m, l)) : Math<float>::inf();
}

// require_launch traps when the host launched a kernel with another block size
// or less dynamic shared memory than the kernel's layout needs. The host
// computes both from the same formulas (select.go); a mismatch is a bug that
// must fail loudly instead of corrupting memory.
__device__ __forceinline__ void require_launch(unsigned threads, unsigned smem_bytes) {
  unsigned have;
#ifdef FLASH_EMU  // emu/cuda_emu.h, the tests' host emulation
  have = ::emu::dyn_smem;
#else
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(have));
#endif
  if (blockDim.x != threads || blockDim.y != 1 || blockDim.z != 1 || have < smem_bytes) __trap();
}

// tree_reduce folds v[0 … N) with op in pairs, ⌈log2 N⌉ dependent steps
// deep, and returns the result (v is overwritten). Why: a running fold is N
// steps deep, and ptxas keeps the order it is written in (for fmaxf too,
// though exact): with the softmax's row maxima and sums as such chains of
// FMNMX and FADD, the D = 64 forward's tile loop spent 54 % of its samples
// on fixed-latency waits and short scoreboards; as trees, the
// warp-specialized forward ran 1–5 % faster at D = 64 and 2–4 % at
// D = 128, N ≥ 4k, the other wgmma forwards (TF32 D = 64, the variants)
// 1–3 % and the mma.sync ones 1.2 % in geomean (H100, 2026-12-07).
template <int N, typename Op> __device__ __forceinline__ float tree_reduce(float (&v)[N], Op op) {
#pragma unroll
  for (int w = 1; w < N; w *= 2)
#pragma unroll
    for (int j = 0; j + w < N; j += 2 * w) v[j] = op(v[j], v[j + w]);
  return v[0];
}

}  // namespace flash
