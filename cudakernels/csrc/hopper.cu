// Entry points of the Hopper module (compiled for compute_90a only, loaded
// on devices of compute capability 9.0): the wgmma forward and backward and
// the conversions into their tile images. Calling convention as in flash.cu:
// attention kernels take one Params, conversions short lists of 8-byte
// arguments; one-dimensional grids.
#include "params.cuh"
#include "bwd_wgmma.cuh"
#include "fwd_wgmma.cuh"
#include "fwd_wgmma_ws.cuh"

// The forward: kFwdThreads threads, kFwdRows query rows per block
// (blockIdx.x = (b·H + h) · tiles + tile), fwd_smem_bytes of dynamic shared
// memory; p.q, p.k and p.v are the images the conversions below write (V
// transposed; K and Vᵀ one image per key head; the persistent
// warp-specialized kernels write K's and Vᵀ's themselves where p.k_src is
// set). select.go's wgmma constants
// must match. Each attention kernel comes twice: plain (no grouped heads,
// lengths, left window bound or score modifier; it traps on those) and _var
// (every variant of Params; sm90_variants.cuh), which the host launches
// when the problem is not plain, so that the plain kernels keep their code.
// Where ws_built, the plain kernel is the warp-specialized one
// (fwd_wgmma_ws.cuh: ws_threads threads, ws_smem_bytes, blocks of ws_rows
// query rows).
#define FLASH_FWD_WGMMA_VAR(NAME, E, DP)                                                            \
  extern "C" __global__ void __launch_bounds__(flash::sm90::kFwdThreads, 1)                        \
      flash_fwd_wgmma_##NAME##_d##DP##_var(const __grid_constant__ flash::Params p) {              \
    flash::sm90::fwd_rowblock<flash::mma::E, DP, true>(p);                                         \
  }
#define FLASH_FWD_WGMMA(NAME, E, DP)                                                                \
  extern "C" __global__ void __launch_bounds__(flash::sm90::kFwdThreads, 1)                        \
      flash_fwd_wgmma_##NAME##_d##DP(const __grid_constant__ flash::Params p) {                    \
    flash::sm90::fwd_rowblock<flash::mma::E, DP, false>(p);                                        \
  }                                                                                                \
  FLASH_FWD_WGMMA_VAR(NAME, E, DP)
#define FLASH_FWD_WGMMA_WS(NAME, E, DP)                                                             \
  extern "C" __global__ void __launch_bounds__(                                                    \
      flash::sm90::ws_threads<flash::sm90::ws_consumers<DP>()>(), 1)                               \
      flash_fwd_wgmma_##NAME##_d##DP(const __grid_constant__ flash::Params p) {                    \
    flash::sm90::fwd_ws<flash::mma::E, DP>(p);                                                     \
  }                                                                                                \
  FLASH_FWD_WGMMA_VAR(NAME, E, DP)
// _ws2: the two-consumer kernel at DP = 64 (fwd_wgmma_ws.cuh's
// ws_consumers), for short causal problems.
#define FLASH_FWD_WGMMA_WS2(NAME, E)                                                                \
  extern "C" __global__ void __launch_bounds__(flash::sm90::ws_threads<2>(), 1)                   \
      flash_fwd_wgmma_##NAME##_d64_ws2(const __grid_constant__ flash::Params p) {                  \
    flash::sm90::fwd_ws<flash::mma::E, 64, 2>(p);                                                  \
  }

FLASH_FWD_WGMMA_WS(bf16, BF16, 64)
FLASH_FWD_WGMMA_WS2(bf16, BF16)
FLASH_FWD_WGMMA_WS(bf16, BF16, 128)
FLASH_FWD_WGMMA(bf16, BF16, 256)
FLASH_FWD_WGMMA_WS(fp16, FP16, 64)
FLASH_FWD_WGMMA_WS2(fp16, FP16)
FLASH_FWD_WGMMA_WS(fp16, FP16, 128)
FLASH_FWD_WGMMA(fp16, FP16, 256)
FLASH_FWD_WGMMA(tf32, TF32, 64)
FLASH_FWD_WGMMA_WS(tf32, TF32, 128)

// The FP32 precision on tf32 tensor cores (mma::TF32x3, 3xTF32): plain
// problems at DP = 64 and 128, on images of hi and lo parts (the tf32x3
// conversions below); the row-block kernel's shape.
extern "C" __global__ void __launch_bounds__(flash::sm90::kFwdThreads, 1)
    flash_fwd_wgmma_tf32x3_d64(const __grid_constant__ flash::Params p) {
  flash::sm90::fwd_rowblock<flash::mma::TF32x3, 64, false>(p);
}
// At DP = 128 with Q's lo parts in registers and key tiles of 32
// (fwd_wgmma.cuh's fwd_q_lo_regs).
extern "C" __global__ void __launch_bounds__(flash::sm90::kFwdThreads, 1)
    flash_fwd_wgmma_tf32x3_d128(const __grid_constant__ flash::Params p) {
  flash::sm90::fwd_rowblock<flash::mma::TF32x3, 128, false>(p);
}

// _full adds the bias and dropout to _var's variants (fwd_body's kFull),
// where its two bias tiles fit beside the others: 16-bit operands up to
// DP = 128, TF32 at 64 (select.go's wgmmaFullBuilt); the rest go to the
// mma.sync _full kernel.
#define FLASH_FWD_WGMMA_FULL(NAME, E, DP)                                                           \
  extern "C" __global__ void __launch_bounds__(flash::sm90::kFwdThreads, 1)                        \
      flash_fwd_wgmma_##NAME##_d##DP##_full(const __grid_constant__ flash::Params p) {             \
    flash::sm90::fwd_rowblock<flash::mma::E, DP, true, true>(p);                                   \
  }

FLASH_FWD_WGMMA_FULL(bf16, BF16, 64)
FLASH_FWD_WGMMA_FULL(bf16, BF16, 128)
FLASH_FWD_WGMMA_FULL(fp16, FP16, 64)
FLASH_FWD_WGMMA_FULL(fp16, FP16, 128)
FLASH_FWD_WGMMA_FULL(tf32, TF32, 64)

// _drop is _full for dropout without a bias: no bias tiles, so _var's key
// tile of 128 where that differs from _full's 64 (16-bit operands up to
// DP = 128: select.go's wgmmaDropBuilt); it traps on a bias.
#define FLASH_FWD_WGMMA_DROP(NAME, E, DP)                                                           \
  extern "C" __global__ void __launch_bounds__(flash::sm90::kFwdThreads, 1)                        \
      flash_fwd_wgmma_##NAME##_d##DP##_drop(const __grid_constant__ flash::Params p) {             \
    flash::sm90::fwd_rowblock<flash::mma::E, DP, true, true, false>(p);                            \
  }

FLASH_FWD_WGMMA_DROP(bf16, BF16, 64)
FLASH_FWD_WGMMA_DROP(bf16, BF16, 128)
FLASH_FWD_WGMMA_DROP(fp16, FP16, 64)
FLASH_FWD_WGMMA_DROP(fp16, FP16, 128)

// Tile images: to_image_rows (any block size and grid; convert_gpu.go uses
// 256 threads) for Q and K, to_image_vt (256 threads, any grid) for V and
// TF32's transposed images in the backward. The
// _len pair serves calls with per-sequence lengths (sm90.cuh's SeqRows: the
// int lengths at lens, head bh in batch entry (first + bh) / per, rows
// written up to the length rounded up to unit); any grid, 256 threads.
#define FLASH_TO_IMAGE_PLAIN(NAME, E)                                                                          \
  extern "C" __global__ void flash_to_image_rows_##NAME(const float* x, uint4* y, long long bhs, long long n,  \
                                                        long long n_pad, long long dim, long long dp,          \
                                                        long long rows) {                                      \
    flash::sm90::to_image_rows<flash::mma::E>(x, y, bhs, n, n_pad, dim, static_cast<int>(dp),                  \
                                              static_cast<int>(rows));                                         \
  }                                                                                                            \
  extern "C" __global__ void __launch_bounds__(256) flash_to_image_vt_##NAME(                                  \
      const float* x, uint4* y, long long bhs, long long nk, long long nk_pad, long long dim, long long dp,     \
      long long bk) {                                                                                          \
    flash::sm90::to_image_vt<flash::mma::E>(x, y, bhs, nk, nk_pad, dim, static_cast<int>(dp),                  \
                                            static_cast<int>(bk));                                             \
  }
#define FLASH_TO_IMAGE(NAME, E)                                                                                \
  FLASH_TO_IMAGE_PLAIN(NAME, E)                                                                                \
  extern "C" __global__ void __launch_bounds__(256) flash_to_image_rows_len_##NAME(                            \
      const float* x, uint4* y, long long bhs, long long n, long long n_pad, long long dim, long long dp,      \
      long long rows, const int* lens, long long first, long long per, long long unit) {                       \
    flash::sm90::to_image_rows_len<flash::mma::E>(x, y, bhs, n, n_pad, dim, static_cast<int>(dp),              \
                                                  static_cast<int>(rows),                                      \
                                                  flash::sm90::SeqRows{lens, first, per, static_cast<int>(unit)}); \
  }                                                                                                            \
  extern "C" __global__ void __launch_bounds__(256) flash_to_image_vt_len_##NAME(                              \
      const float* x, uint4* y, long long bhs, long long nk, long long nk_pad, long long dim, long long dp,     \
      long long bk, const int* lens, long long first, long long per, long long unit) {                         \
    flash::sm90::to_image_vt<flash::mma::E, true>(x, y, bhs, nk, nk_pad, dim, static_cast<int>(dp),            \
                                                  static_cast<int>(bk),                                        \
                                                  flash::sm90::SeqRows{lens, first, per, static_cast<int>(unit)}); \
  }

FLASH_TO_IMAGE(bf16, BF16)
FLASH_TO_IMAGE(fp16, FP16)
FLASH_TO_IMAGE(tf32, TF32)
// The split type's images (hi and lo parts): plain problems only.
FLASH_TO_IMAGE_PLAIN(tf32x3, TF32x3)

// Both images of Q, K or dO for the TF32 backwards, in one pass: the
// transposed image into y_t and the row image (tiles of bk rows) into
// y_rows; plain calls (no lengths), 256 threads, any grid.
#define FLASH_TO_IMAGE_ROWS_VT(NAME, E)                                                                        \
  extern "C" __global__ void __launch_bounds__(256) flash_to_image_rows_vt_##NAME(                             \
      const float* x, uint4* y_t, uint4* y_rows, long long bhs, long long n, long long n_pad, long long dim,    \
      long long dp, long long bk) {                                                                            \
    flash::sm90::to_image_vt<flash::mma::E, false, true>(x, y_t, bhs, n, n_pad, dim, static_cast<int>(dp),     \
                                                         static_cast<int>(bk), flash::sm90::SeqRows{}, y_rows); \
  }
FLASH_TO_IMAGE_ROWS_VT(tf32, TF32)
FLASH_TO_IMAGE_ROWS_VT(tf32x3, TF32x3)

// The backward (bwd_wgmma.cuh), plain and _var like the forward:
// kBwdThreads threads and kBwdBlock keys of one key head (dkdv, which sums
// the gradients of its group's query heads) or queries of one query head
// (dq) per block, on row images of Q, K, V, dO in tiles of kBwdTile rows and
// transposed images Qᵀ, Kᵀ, dOᵀ of kBwdTile columns, all padded to kBwdPad
// rows (p.q, p.k, p.v, p.dout and p.q_t, p.k_t, p.dout_t; K, V and Kᵀ one
// image per key head); p.lse_log2 and p.delta_pad come from
// flash_bwd_stats_sm90.
#define FLASH_BWD_WGMMA_KERNELS(NAME, E, DP, SUFFIX, VAR, FULL, BIAS)                           \
  extern "C" __global__ void __launch_bounds__(flash::sm90::kBwdThreads, 1)                        \
      flash_bwd_dkdv_wgmma_##NAME##_d##DP##SUFFIX(const __grid_constant__ flash::Params p) {       \
    flash::sm90::dkdv_colblock<flash::mma::E, DP, VAR, FULL, BIAS>(p);                             \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(flash::sm90::kBwdThreads, 1)                        \
      flash_bwd_dq_wgmma_##NAME##_d##DP##SUFFIX(const __grid_constant__ flash::Params p) {         \
    flash::sm90::dq_rowblock<flash::mma::E, DP, VAR, FULL, BIAS>(p);                               \
  }
#define FLASH_BWD_WGMMA(NAME, E, DP)                              \
  FLASH_BWD_WGMMA_KERNELS(NAME, E, DP, , false, false, false)    \
  FLASH_BWD_WGMMA_KERNELS(NAME, E, DP, _var, true, false, false)

FLASH_BWD_WGMMA(bf16, BF16, 64)
FLASH_BWD_WGMMA(bf16, BF16, 128)
FLASH_BWD_WGMMA(fp16, FP16, 64)
FLASH_BWD_WGMMA(fp16, FP16, 128)

// The fused backward (bwd_dq_fused): dkdv_colblock adding dQ's part of its
// keys into the zeroed p.dq_accum (bulk reductions: the sums' order varies
// from run to run), in place of the dQ kernel, for plain 16-bit problems;
// then dq_from_accum writes dq from those sums, a block of kDqAccumThreads
// per 64 queries of each head (any element type: one per DP).
#define FLASH_BWD_WGMMA_FUSED(NAME, E, DP)                                                  \
  extern "C" __global__ void __launch_bounds__(flash::sm90::kBwdThreads, 1)                  \
      flash_bwd_dkdv_dq_wgmma_##NAME##_d##DP(const __grid_constant__ flash::Params p) {     \
    flash::sm90::dkdv_colblock<flash::mma::E, DP, false, false, false, true>(p);             \
  }
FLASH_BWD_WGMMA_FUSED(bf16, BF16, 64)
FLASH_BWD_WGMMA_FUSED(bf16, BF16, 128)
FLASH_BWD_WGMMA_FUSED(fp16, FP16, 64)
FLASH_BWD_WGMMA_FUSED(fp16, FP16, 128)
#define FLASH_BWD_DQ_FROM_ACCUM(DP)                                                              \
  extern "C" __global__ void __launch_bounds__(flash::sm90::kDqAccumThreads)                     \
      flash_bwd_dq_from_accum_d##DP(const __grid_constant__ flash::Params p) {                   \
    flash::sm90::dq_from_accum<DP>(p);                                                           \
  }
FLASH_BWD_DQ_FROM_ACCUM(64)
FLASH_BWD_DQ_FROM_ACCUM(128)
FLASH_BWD_WGMMA(tf32, TF32, 64)
FLASH_BWD_WGMMA(tf32, TF32, 128)
// The FP32 precision on tf32 tensor cores (3xTF32), plain problems at DP =
// 64: bwd_wgmma.cuh's wide shape (steps of 32 rows, one transposed stage),
// with S recomputed by the forward's sequence of products and the
// statistics in natural units (flash_bwd_stats_sm90_natural).
FLASH_BWD_WGMMA_KERNELS(tf32x3, TF32x3, 64, , false, false, false)

// _full adds the bias and dropout (the _full kernels' bias tiles fit
// beside the others for 16-bit operands up to DP = 128: select.go's
// wgmmaBwdBuilt with full), _drop dropout without a bias (no bias tiles),
// and dbias writes the bias gradient: a block of
// kBwdThreads per kBwdBlock queries × kBwdTile keys of each bias slice
// (blockIdx.x = (slice · query blocks + query block) · key tiles + key
// tile), bwd_dbias_smem_bytes of shared memory, on the same images.
#define FLASH_BWD_WGMMA_FULL(NAME, E, DP)                                                          \
  FLASH_BWD_WGMMA_KERNELS(NAME, E, DP, _full, true, true, true)                                    \
  FLASH_BWD_WGMMA_KERNELS(NAME, E, DP, _drop, true, true, false)                                   \
  extern "C" __global__ void __launch_bounds__(flash::sm90::kBwdThreads, 1)                        \
      flash_bwd_dbias_wgmma_##NAME##_d##DP(const __grid_constant__ flash::Params p) {              \
    flash::sm90::dbias_tile<flash::mma::E, DP>(p);                                                 \
  }

FLASH_BWD_WGMMA_FULL(bf16, BF16, 64)
FLASH_BWD_WGMMA_FULL(bf16, BF16, 128)
FLASH_BWD_WGMMA_FULL(fp16, FP16, 64)
FLASH_BWD_WGMMA_FULL(fp16, FP16, 128)

// D = rowsum(dO∘O) and dO's row image in one pass (bwd_wgmma.cuh's
// dot_do_o_image) for the 16-bit backward of a call without lengths: p is
// the backward's Params (its dout the image), dout the float32 dO, n_pad
// the image's rows a head; a warp per image row, any grid (256 threads
// from bwd_wgmma_gpu.go).
#define FLASH_DOT_DO_O_IMAGE(NAME, E, R)                                                                      \
  extern "C" __global__ void __launch_bounds__(256) flash_bwd_dot_do_o_image_##NAME(                         \
      const __grid_constant__ flash::Params p, const float* dout, long long n_pad) {                         \
    flash::sm90::dot_do_o_image<flash::mma::E, flash::mma::R>(p, dout, n_pad);                               \
  }

FLASH_DOT_DO_O_IMAGE(bf16, BF16, RoundBF16)
FLASH_DOT_DO_O_IMAGE(fp16, FP16, RoundFP16)

// LSE in log2 units and D, padded to whole blocks; any block size and grid.
// The _var one, for every problem the _var kernels compute, leaves the
// blocks past a batch entry's last real row unwritten (no kernel reads them).
extern "C" __global__ void flash_bwd_stats_sm90(const __grid_constant__ flash::Params p) {
  flash::sm90::prep_stats<false>(p);
}
extern "C" __global__ void flash_bwd_stats_sm90_var(const __grid_constant__ flash::Params p) {
  flash::sm90::prep_stats<true>(p);
}
// The split type's backward at DP = 128, the first of three kernels: dV
// (bwd_wgmma.cuh's dv_colblock).
extern "C" __global__ void __launch_bounds__(flash::sm90::kDvThreads, 1)
    flash_bwd_dv_wgmma_tf32x3_d128(const __grid_constant__ flash::Params p) {
  flash::sm90::dv_colblock<flash::mma::TF32x3, 128>(p);
}

// The second: dK (dk_colblock).
extern "C" __global__ void __launch_bounds__(flash::sm90::kSplitThreads, 1)
    flash_bwd_dk_wgmma_tf32x3_d128(const __grid_constant__ flash::Params p) {
  flash::sm90::dk_colblock<flash::mma::TF32x3, 128>(p);
}

// The third: dQ (dq_split_rowblock).
extern "C" __global__ void __launch_bounds__(flash::sm90::kSplitThreads, 1)
    flash_bwd_dq_wgmma_tf32x3_d128(const __grid_constant__ flash::Params p) {
  flash::sm90::dq_split_rowblock<flash::mma::TF32x3, 128>(p);
}

// The LSE in natural units, for the tf32x3 kernels.
extern "C" __global__ void flash_bwd_stats_sm90_natural(const __grid_constant__ flash::Params p) {
  flash::sm90::prep_stats<false, true>(p);
}
