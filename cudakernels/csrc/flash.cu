// Entry points of the module: every kernel the Go loader looks up, with
// extern "C" names. Each wrapper only instantiates a templated work unit.
//
// Calling convention: every attention kernel takes one Params (params.cuh)
// by value, as a __grid_constant__ so that work units read it in place
// through a reference instead of copying it to local memory. The grid is
// one-dimensional: blockIdx.x = (batch·h + head) · tiles + tile. The
// element-wise conversions keep short argument lists of 8-byte values
// (pointers, long long), passed by gorgonia.org/cu's launcher: they see
// dense, flat row-major matrices and know nothing of the attention problem.
#include "params.cuh"
#include "fwd_simt.cuh"
#include "fwd_simt_blocked.cuh"
#include "bwd_simt.cuh"
#include "bwd_simt_blocked.cuh"

#define FLASH_SIMT(NAME, T, DP, TILE)                                                                          \
  extern "C" __global__ void __launch_bounds__(TILE * 8)                                                     \
      flash_fwd_simt_##NAME##_d##DP(const __grid_constant__ flash::Params p) {                               \
    flash::simt::fwd_1rowblock<T, DP, TILE>(p);                                                              \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(TILE * 8)                                                     \
      flash_bwd_dkdv_simt_##NAME##_d##DP(const __grid_constant__ flash::Params p) {                          \
    flash::simt::dkdv_1colblock<T, DP, TILE>(p);                                                             \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(TILE * 8)                                                     \
      flash_bwd_dq_simt_##NAME##_d##DP(const __grid_constant__ flash::Params p) {                            \
    flash::simt::dq_1rowblock<T, DP, TILE>(p);                                                               \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(TILE * 8)                                                     \
      flash_bwd_dbias_simt_##NAME##_d##DP(const __grid_constant__ flash::Params p) {                         \
    flash::simt::dbias_1tile<T, DP, TILE>(p);                                                                \
  }

// Tile sizes: 32 rows (256 threads) everywhere except float64 at DP = 256,
// whose backward layout would need 274 KiB of shared memory at 32 rows.
// select.go's simtTile must match.
FLASH_SIMT(f32, float, 32, 32)
FLASH_SIMT(f32, float, 64, 32)
FLASH_SIMT(f32, float, 128, 32)
FLASH_SIMT(f32, float, 256, 32)
FLASH_SIMT(f64, double, 32, 32)
FLASH_SIMT(f64, double, 64, 32)
FLASH_SIMT(f64, double, 128, 32)
FLASH_SIMT(f64, double, 256, 16)

// The register-blocked float32 forward (fwd_simt_blocked.cuh) at DP ≥ 64,
// 256 threads per 64 rows; shapes.go's simtBlocked, simtBlockedRows and
// simtBlockedSmem must match. MINB blocks share an SM (its shared memory
// would take four at DP = 64, two at 128: 48 and 96 KiB each), bounding
// the registers to 64K / (256 · MINB): 85 and 128; four at DP = 64 (64
// registers) spilled 476 bytes a thread (ptxas 12.4).
#define FLASH_SIMT_BLOCKED(DP, MINB)                                                                    \
  extern "C" __global__ void __launch_bounds__(flash::simt::kBlockedThreads, MINB)                    \
      flash_fwd_simt_blocked_f32_d##DP(const __grid_constant__ flash::Params p) {                     \
    flash::simt::fwd_blocked<DP>(p);                                                                  \
  }

FLASH_SIMT_BLOCKED(64, 2)
FLASH_SIMT_BLOCKED(128, 2)
FLASH_SIMT_BLOCKED(256, 1)

// The register-blocked float32 backward (bwd_simt_blocked.cuh) at DP = 64
// and 128, 256 threads per 64 keys (dK/dV) or rows (dQ); shapes.go's
// simtBlockedBwd, simtBlockedDKDVSmem and simtBlockedDQSmem must match.
// Their shared memory lets two blocks share an SM at DP = 64 (96 and 80
// KiB) and one at 128 (192 and 160).
#define FLASH_SIMT_BLOCKED_BWD(DP, MINB)                                                                \
  extern "C" __global__ void __launch_bounds__(flash::simt::kBlockedThreads, MINB)                    \
      flash_bwd_dkdv_simt_blocked_f32_d##DP(const __grid_constant__ flash::Params p) {                \
    flash::simt::dkdv_blocked<DP>(p);                                                                 \
  }                                                                                                   \
  extern "C" __global__ void __launch_bounds__(flash::simt::kBlockedThreads, MINB)                    \
      flash_bwd_dq_simt_blocked_f32_d##DP(const __grid_constant__ flash::Params p) {                  \
    flash::simt::dq_blocked<DP>(p);                                                                   \
  }

FLASH_SIMT_BLOCKED_BWD(64, 2)
FLASH_SIMT_BLOCKED_BWD(128, 1)

// D = rowsum(dO∘O), one thread per query row; bwd_simt_gpu.go uses 256.
#define FLASH_DOT_DO_O(NAME, T)                                                                       \
  extern "C" __global__ void __launch_bounds__(256)                                                   \
      flash_bwd_dot_do_o_##NAME(const __grid_constant__ flash::Params p) {                            \
    flash::simt::dot_do_o<T>(p);                                                                      \
  }

FLASH_DOT_DO_O(f32, float)
FLASH_DOT_DO_O(f64, double)

// Tensor-core forward: float32 in and out, operands converted once to bf16
// or fp16 (rows padded to DP) by flash_to_half_*, or to tf32 by
// flash_to_tf32 (Q, K) and flash_to_tf32_vt (V, transposed), then
// fwd_bq<DP> query rows per block (128, or 64 at DP = 256 and in _full) and key tiles of
// fwd_bk (64, or 32 for TF32 above DP = 64); select.go's mmaFwdRows,
// mmaFwdBK and mmaFwdSmem must match.
#include "fwd_mma.cuh"

// Each attention kernel comes three times, plain, _var (the variants of
// tc_variants.cuh but the bias and dropout) and _full (those too): the
// host launches the least that computes the problem (pickMmaVariant), so
// that plain attention, and the variants without a bias or dropout, keep
// their code.
#define FLASH_FWD_MMA(NAME, E, DP)                                                                  \
  extern "C" __global__ void __launch_bounds__(flash::mma::kFwdThreads)                             \
      flash_fwd_mma_##NAME##_d##DP(const __grid_constant__ flash::Params p) {                       \
    flash::mma::fwd_1rowblock<flash::mma::E, DP, false>(p);                                         \
  }                                                                                                 \
  extern "C" __global__ void __launch_bounds__(flash::mma::kFwdThreads)                             \
      flash_fwd_mma_##NAME##_d##DP##_var(const __grid_constant__ flash::Params p) {                 \
    flash::mma::fwd_1rowblock<flash::mma::E, DP, true>(p);                                          \
  }                                                                                                 \
  extern "C" __global__ void __launch_bounds__(flash::mma::kFwdThreads)                             \
      flash_fwd_mma_##NAME##_d##DP##_full(const __grid_constant__ flash::Params p) {                \
    flash::mma::fwd_1rowblock<flash::mma::E, DP, true, true>(p);                                    \
  }

FLASH_FWD_MMA(bf16, BF16, 32)
FLASH_FWD_MMA(bf16, BF16, 64)
FLASH_FWD_MMA(bf16, BF16, 128)
FLASH_FWD_MMA(bf16, BF16, 256)
FLASH_FWD_MMA(fp16, FP16, 32)
FLASH_FWD_MMA(fp16, FP16, 64)
FLASH_FWD_MMA(fp16, FP16, 128)
FLASH_FWD_MMA(fp16, FP16, 256)
FLASH_FWD_MMA(tf32, TF32, 32)
FLASH_FWD_MMA(tf32, TF32, 64)
FLASH_FWD_MMA(tf32, TF32, 128)
FLASH_FWD_MMA(tf32, TF32, 256)

// Tensor-core backward (bwd_mma.cuh) on the 16-bit copies made by
// flash_to_half_*: dK and dV per block of 64 keys, dQ per block of 64
// queries, both looping over tiles of 64; select.go's mmaBwd* constants and
// mmaBwdSmem must match. An atomic-dQ variant (dQ added from the dK/dV
// kernel, as FlashAttention 2 does) measured slower on the H200 (144 against
// 189 TFLOP/s at D = 128, N = 8192) and was dropped. D = 256 is not instantiated (dK and dV
// accumulators would not fit the register budget of this block shape).
#include "bwd_mma.cuh"

#define FLASH_BWD_MMA_KERNELS(NAME, E, DP, SUFFIX, VAR, FULL)                                       \
  extern "C" __global__ void __launch_bounds__(flash::mma::kBwdThreads)                             \
      flash_bwd_dkdv_mma_##NAME##_d##DP##SUFFIX(const __grid_constant__ flash::Params p) {          \
    flash::mma::dkdv_1colblock<flash::mma::E, DP, VAR, FULL>(p);                                    \
  }                                                                                                 \
  extern "C" __global__ void __launch_bounds__(flash::mma::kBwdThreads)                             \
      flash_bwd_dq_mma_##NAME##_d##DP##SUFFIX(const __grid_constant__ flash::Params p) {            \
    flash::mma::dq_1rowblock<flash::mma::E, DP, VAR, FULL>(p);                                      \
  }
// _full adds the bias and dropout to _var's variants; dbias is the bias
// gradient (dbias_1tile).
#define FLASH_BWD_MMA(NAME, E, DP)                                                                  \
  FLASH_BWD_MMA_KERNELS(NAME, E, DP, , false, false)                                                \
  FLASH_BWD_MMA_KERNELS(NAME, E, DP, _var, true, false)                                             \
  FLASH_BWD_MMA_KERNELS(NAME, E, DP, _full, true, true)                                             \
  extern "C" __global__ void __launch_bounds__(flash::mma::kBwdThreads)                             \
      flash_bwd_dbias_mma_##NAME##_d##DP(const __grid_constant__ flash::Params p) {                 \
    flash::mma::dbias_1tile<flash::mma::E, DP>(p);                                                  \
  }

FLASH_BWD_MMA(bf16, BF16, 32)
FLASH_BWD_MMA(bf16, BF16, 64)
FLASH_BWD_MMA(bf16, BF16, 128)
FLASH_BWD_MMA(fp16, FP16, 32)
FLASH_BWD_MMA(fp16, FP16, 64)
FLASH_BWD_MMA(fp16, FP16, 128)

// x [rows, dim] fp32 → y [rows, dp] in the operand type, zero-padded;
// grid-stride, any grid; convert_gpu.go uses 256 threads.
#define FLASH_TO_STORAGE(NAME, E)                                                                          \
  extern "C" __global__ void NAME(const float* x, uint4* y, long long rows, long long dim, long long dp) {  \
    flash::mma::to_storage_padded<flash::mma::E>(x, y, rows, dim, dp);                                    \
  }

FLASH_TO_STORAGE(flash_to_half_bf16, BF16)
FLASH_TO_STORAGE(flash_to_half_fp16, FP16)
FLASH_TO_STORAGE(flash_to_tf32, TF32)

// V [bhs, nk, dim] fp32 → [bhs, dp, nk rounded up to 8] tf32, transposed with
// permuted keys; 256 threads (32 × 8), any grid.
extern "C" __global__ void __launch_bounds__(256)
    flash_to_tf32_vt(const float* x, float* y, long long bhs, long long nk, long long dim, long long dp) {
  flash::mma::to_vt_tf32(x, y, bhs, nk, dim, dp);
}

// Storage rounding of the low-precision backward's operands (round.cuh): any
// block size, any grid (grid-stride loop); convert_gpu.go uses 256 threads.
#include "round.cuh"

#define FLASH_ROUND(NAME, R)                                                                              \
  extern "C" __global__ void flash_round_##NAME(float* x, long long n) { flash::mma::round_inplace<R>(x, n); }

FLASH_ROUND(bf16, flash::mma::RoundBF16)
FLASH_ROUND(fp16, flash::mma::RoundFP16)
FLASH_ROUND(tf32, flash::mma::TF32)

// dO rounded and D = rowsum(dO∘O) in one pass (round.cuh), a warp per row;
// bwd_simt_gpu.go launches 256 threads, 8 rows, a block. The _rounded
// ones leave dO as it is and take D of its rounded values, for the Hopper
// backward, which reads dO through images that round it alike.
#define FLASH_DOT_DO_O_ROUND(NAME, R)                                                  \
  extern "C" __global__ void __launch_bounds__(256)                                    \
      flash_bwd_dot_do_o_round_##NAME(const __grid_constant__ flash::Params p) {       \
    flash::mma::dot_do_o_round<R>(p);                                                  \
  }
#define FLASH_DOT_DO_O_ROUNDED(NAME, R)                                                \
  FLASH_DOT_DO_O_ROUND(NAME, R)                                                        \
  extern "C" __global__ void __launch_bounds__(256)                                    \
      flash_bwd_dot_do_o_rounded_##NAME(const __grid_constant__ flash::Params p) {     \
    flash::mma::dot_do_o_round<R, false>(p);                                           \
  }

FLASH_DOT_DO_O_ROUNDED(bf16, flash::mma::RoundBF16)
FLASH_DOT_DO_O_ROUNDED(fp16, flash::mma::RoundFP16)
FLASH_DOT_DO_O_ROUNDED(tf32, flash::mma::TF32)
// FP32's D for the 3xTF32 backward: split products, dO unrounded.
FLASH_DOT_DO_O_ROUND(tf32x3, flash::mma::TF32x3)

