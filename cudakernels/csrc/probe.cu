// Probes of tensor-core arithmetic that a kernel design relies on and that
// no document states: small kernels the flashgpu tests run
// (probe_gpu_test.go) to check a property on the device at hand. The
// backend never loads this module. Compiled for compute_90a (gen.sh), so
// one module holds both families' instructions.
//
// The property probed so far: FP32 on tensor cores (3xTF32) needs the
// backward to recompute the forward's scores bit for bit (NOTES, "FP32 on
// tensor cores: the bound stays"). The forward takes S = Q·Kᵀ with the
// queries as the product's M; a backward that holds a block of keys takes
// Sᵀ = K·Qᵀ with the keys as M. Both sum the same products in the same k
// order; whether the tensor core's result for an element depends only on
// those values and that order, not on which operand is A, is what the
// probes below measure, for wgmma (from shared memory, and with A in
// registers) and for mma.sync.
#include "sm90.cuh"

namespace {

using flash::mma::TF32;
namespace sm90 = flash::sm90;

constexpr int kProbeRows = 64;   // M and N of every wgmma product below
constexpr int kProbeDepth = 64;  // K: two 128-byte panels of tf32, eight k-slices

// stage_image writes x [kProbeRows, kProbeDepth] fp32, rounded to tf32, into
// the K-major, 128-byte-swizzled tile image at s (sm90.cuh's layout).
__device__ void stage_image(const float* __restrict__ x, uint4* s) {
  constexpr int kRowChunks = kProbeDepth / 4;
  for (int i = threadIdx.x; i < kProbeRows * kRowChunks; i += blockDim.x) {
    const int r = i / kRowChunks, c = i % kRowChunks;
    const float* f = x + r * kProbeDepth + 4 * c;
    s[sm90::image_chunk(r, c, kProbeRows)] = make_uint4(TF32::cvt(f[0]), TF32::cvt(f[1]), TF32::cvt(f[2]), TF32::cvt(f[3]));
  }
}

// store_acc writes the warpgroup's m64n64 accumulators to out [64, 64],
// row-major: warp w holds rows 16w … 16w+15, n8 tile j in d[4j … 4j+3] in
// the m16n8 C layout (mma.cuh).
__device__ void store_acc(const float (&d)[32], float* __restrict__ out) {
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int row = 16 * warp + g, col = 8 * j + 2 * t;
    out[row * kProbeRows + col] = d[4 * j];
    out[row * kProbeRows + col + 1] = d[4 * j + 1];
    out[(row + 8) * kProbeRows + col] = d[4 * j + 2];
    out[(row + 8) * kProbeRows + col + 1] = d[4 * j + 3];
  }
}

// product_ss sets d = 0 + Σ over the eight k-slices in order of A·Bᵀ, A and
// B the tile images at shared addresses a and b (each kProbeRows rows).
__device__ void product_ss(uint32_t a, uint32_t b, float (&d)[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) d[i] = 0.f;
  sm90::wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < kProbeDepth / TF32::kK; ++kc) {
    sm90::Wgmma<TF32, 64>::ss(d, sm90::desc_sw128(a + sm90::k_slice_offset(kc, kProbeRows)),
                              sm90::desc_sw128(b + sm90::k_slice_offset(kc, kProbeRows)), 1);
  }
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
}

// product_rs is product_ss with A read from global x [kProbeRows,
// kProbeDepth] into registers, each warp's m16 A fragment of a k-slice:
// a0 = (g, t), a1 = (g+8, t), a2 = (g, t+4), a3 = (g+8, t+4).
__device__ void product_rs(const float* __restrict__ x, uint32_t b, float (&d)[32]) {
  const int row = 16 * (threadIdx.x / 32) + threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
  for (int i = 0; i < 32; ++i) d[i] = 0.f;
  sm90::wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < kProbeDepth / TF32::kK; ++kc) {
    const float* f = x + kc * TF32::kK + t;
    const uint32_t a[4] = {TF32::cvt(f[row * kProbeDepth]), TF32::cvt(f[(row + 8) * kProbeDepth]),
                           TF32::cvt(f[row * kProbeDepth + 4]), TF32::cvt(f[(row + 8) * kProbeDepth + 4])};
    sm90::Wgmma<TF32, 64>::rs(d, a, sm90::desc_sw128(b + sm90::k_slice_offset(kc, kProbeRows)));
  }
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
}

}  // namespace

// flash_probe_wgmma_tf32 takes, for q and k [64, 64] fp32 (rounded to tf32
// here), S = Q·Kᵀ by wgmma from shared memory into s_qk, Sᵀ = K·Qᵀ the same
// way into s_kq, and Q·Kᵀ with Q's fragments in registers into s_qk_rs, all
// [64, 64] row-major fp32. One block of 128 threads (a warpgroup).
extern "C" __global__ void __launch_bounds__(128, 1)
    flash_probe_wgmma_tf32(const float* __restrict__ q, const float* __restrict__ k, float* __restrict__ s_qk,
                           float* __restrict__ s_kq, float* __restrict__ s_qk_rs) {
  __shared__ __align__(1024) uint4 q_img[kProbeRows * kProbeDepth / 4];
  __shared__ __align__(1024) uint4 k_img[kProbeRows * kProbeDepth / 4];
  stage_image(q, q_img);
  stage_image(k, k_img);
  sm90::fence_proxy_async();
  __syncthreads();
  const uint32_t qa = sm90::smem_addr(q_img), ka = sm90::smem_addr(k_img);
  float d[32];
  product_ss(qa, ka, d);
  store_acc(d, s_qk);
  product_ss(ka, qa, d);
  store_acc(d, s_kq);
  product_rs(q, ka, d);
  store_acc(d, s_qk_rs);
}

// flash_probe_mma_tf32 is the same question for mma.sync.m16n8k8 (the sm80
// family): for q and k [16, 64] fp32, one warp takes S = Q·Kᵀ and Sᵀ = K·Qᵀ
// as two n8 tiles each, summed over the eight k-slices in order from zero
// accumulators, into s_qk and s_kq [16, 16] row-major.
extern "C" __global__ void __launch_bounds__(32, 1)
    flash_probe_mma_tf32(const float* __restrict__ q, const float* __restrict__ k, float* __restrict__ s_qk,
                         float* __restrict__ s_kq) {
  const int g = threadIdx.x / 4, t = threadIdx.x % 4;
  const float* const operands[2][2] = {{q, k}, {k, q}};
  float* const outs[2] = {s_qk, s_kq};
  for (int o = 0; o < 2; ++o) {
    const float* a_src = operands[o][0];
    const float* b_src = operands[o][1];
    float c[2][4] = {};
    for (int kc = 0; kc < kProbeDepth / TF32::kK; ++kc) {
      const float* a = a_src + kc * TF32::kK + t;
      const uint32_t af[4] = {TF32::cvt(a[g * kProbeDepth]), TF32::cvt(a[(g + 8) * kProbeDepth]),
                              TF32::cvt(a[g * kProbeDepth + 4]), TF32::cvt(a[(g + 8) * kProbeDepth + 4])};
      for (int j = 0; j < 2; ++j) {
        // B (k × n) = the other operand's rows 8j … 8j+7, transposed:
        // b0 = (k t, n g), b1 = (k t+4, n g).
        const float* b = b_src + (8 * j + g) * kProbeDepth + kc * TF32::kK + t;
        TF32::mma(c[j], af, TF32::cvt(b[0]), TF32::cvt(b[4]));
      }
    }
    for (int j = 0; j < 2; ++j) {
      float* out = outs[o];
      out[g * 16 + 8 * j + 2 * t] = c[j][0];
      out[g * 16 + 8 * j + 2 * t + 1] = c[j][1];
      out[(g + 8) * 16 + 8 * j + 2 * t] = c[j][2];
      out[(g + 8) * 16 + 8 * j + 2 * t + 1] = c[j][3];
    }
  }
}
