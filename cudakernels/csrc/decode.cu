// The decoding kernels (decode.cuh): split-KV forward units, the merge of
// their partial results, the key/value cache's append, and a read of
// device memory at full speed that the decode benchmark measures its
// bandwidth against. Compiled to its own PTX (gen.sh), so that a change
// here regenerates this module alone.
#include "params.cuh"
#include "decode.cuh"

#define FLASH_DECODE_UNIT(NAME, F, S, DP, R)                                                              \
  extern "C" __global__ void __launch_bounds__(32 * flash::decode::Layout<F, S, DP, R>::kUnits)           \
      flash_decode_##NAME##_d##DP##_r##R(const __grid_constant__ flash::Params p) {                       \
    using L = flash::decode::Layout<F, S, DP, R>;                                                         \
    flash::require_launch(32 * L::kUnits, L::kBlock);                                                     \
    const int w = threadIdx.x / 32;                                                                       \
    flash::decode::rows_body<F, S, DP, R>(p, static_cast<long long>(blockIdx.x) * L::kUnits + w,          \
                                          flash::smem + w * L::kUnit);                                    \
  }
#define FLASH_DECODE_DIMS(NAME, F, S, R) \
  FLASH_DECODE_UNIT(NAME, F, S, 64, R)     \
  FLASH_DECODE_UNIT(NAME, F, S, 128, R)    \
  FLASH_DECODE_UNIT(NAME, F, S, 256, R)
#define FLASH_CACHE_APPEND(NAME, F, S)                                                     \
  extern "C" __global__ void __launch_bounds__(256)                                        \
      flash_cache_append_##NAME(const __grid_constant__ flash::Params p) {                 \
    flash::decode::append_rows<F, S>(p);                                                   \
  }

// float32 and float64 on CUDA cores: units of one row (unit_body) and of
// eight (group_body).
FLASH_DECODE_DIMS(f32, float, float, 1)
FLASH_DECODE_DIMS(f32, float, float, 4)
FLASH_DECODE_DIMS(f32, float, float, 8)
FLASH_DECODE_DIMS(f64, double, double, 1)
FLASH_DECODE_DIMS(f64, double, double, 4)
FLASH_DECODE_DIMS(f64, double, double, 8)
// bf16 and fp16 on tensor cores: units of 16 rows (tc_body).
FLASH_DECODE_DIMS(bf16, float, __nv_bfloat16, 16)
FLASH_DECODE_DIMS(fp16, float, __half, 16)
FLASH_CACHE_APPEND(f32, float, float)
FLASH_CACHE_APPEND(bf16, float, __nv_bfloat16)
FLASH_CACHE_APPEND(fp16, float, __half)
FLASH_CACHE_APPEND(f64, double, double)

#define FLASH_DECODE_MERGE(NAME, F)                                                        \
  extern "C" __global__ void __launch_bounds__(flash::decode::kMergeThreads)               \
      flash_decode_merge_##NAME(const __grid_constant__ flash::Params p) {                 \
    __shared__ flash::decode::MergeSmem<F> sm;                                              \
    const long long col_blocks = (p.dim + 31) / 32;                                         \
    flash::decode::merge_cols<F>(p, blockIdx.x / col_blocks, blockIdx.x % col_blocks, sm);  \
  }
FLASH_DECODE_MERGE(f32, float)
FLASH_DECODE_MERGE(f64, double)

// flash_read_ceiling sums n float4s of x into *out (one atomic add per
// block): a read of memory with no other work, whose time gives the
// device's read bandwidth, and at a decode step's size the best time of a
// kernel that reads those bytes once. Each thread keeps kReadUnroll loads
// in flight, so that even a small read is not waiting on one load per
// thread at a time. Launched with 256 threads.
constexpr int kReadUnroll = 4;
extern "C" __global__ void __launch_bounds__(256) flash_read_ceiling(const float4* x, long long n, float* out) {
  const long long stride = static_cast<long long>(gridDim.x) * 256;
  long long i = blockIdx.x * 256LL + threadIdx.x;
  float s = 0.f;
  for (; i + (kReadUnroll - 1) * stride < n; i += kReadUnroll * stride) {
    float4 y[kReadUnroll];
#pragma unroll
    for (int u = 0; u < kReadUnroll; ++u) y[u] = __ldcs(x + i + u * stride);
#pragma unroll
    for (int u = 0; u < kReadUnroll; ++u) s += (y[u].x + y[u].y) + (y[u].z + y[u].w);
  }
  for (; i < n; i += stride) {
    const float4 y = __ldcs(x + i);
    s += (y.x + y.y) + (y.z + y.w);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  __shared__ float part[8];
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int w = 0; w < 8; ++w) t += part[w];
    atomicAdd(out, t);
  }
}
