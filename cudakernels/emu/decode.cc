// decode runs the decoding kernels (decode.cuh: the cache's append, the
// split-KV units and their merge) on the host through cuda_emu.h, one
// problem per run, for
// TestDecodeKernelsOnHost (emu_test.go), as mma.cc runs the mma.sync
// kernels.
//
// Standard input: eight int64 words — the storage format (0 float32, 1
// bf16, 2 fp16), the padded head dimension DP, the rows per unit R, the
// grid (⌈units / units per block⌉), the merge's blocks and threads (0
// blocks: one split, no merge) and the blob's size in bytes — then the
// kernels' Params (params.go's kernelParams, pointers as offsets into the
// blob plus one), then the blob. Standard output: the blob after the run.
// Where Params has new rows (k_new), the append kernel stores them first,
// as a cache's step does.
// A launch whose threads or shared memory differ from what the kernel was
// compiled for traps (require_launch), so the Go side's mirror of the
// layout (decode.go's decodeLayout) is checked too.
#include <cstdint>
#include <vector>

#define __noinline__
#include "../csrc/decode.cuh"
#include "request.h"

namespace flash {
alignas(16) unsigned char smem[1 << 18];
}

namespace {

using flash::Params;
using namespace flash::decode;

// units launches the unit kernel as decode.cu's FLASH_DECODE_UNIT does.
template <typename S, int DP, int R> void units(const Params& p, unsigned grid) {
  using L = Layout<float, S, DP, R>;
  emu::launch(grid, 32 * L::kUnits, L::kBlock, [&] {
    flash::require_launch(32 * L::kUnits, L::kBlock);
    const int w = threadIdx.x / 32;
    rows_body<float, S, DP, R>(p, static_cast<long long>(blockIdx.x) * L::kUnits + w, flash::smem + w * L::kUnit);
  });
}

template <typename S, int DP> void byRows(int rows, const Params& p, unsigned grid) {
  if constexpr (sizeof(S) == 2) {
    if (rows == kTensorRows) return units<S, DP, kTensorRows>(p, grid);
  } else {
    switch (rows) {
      case 1: return units<S, DP, 1>(p, grid);
      case 4: return units<S, DP, 4>(p, grid);
      case 8: return units<S, DP, 8>(p, grid);
    }
  }
  std::fprintf(stderr, "emu/decode: no unit of %d rows for this format\n", rows);
  std::exit(2);
}

template <typename S> void byDim(int dp, int rows, const Params& p, unsigned grid) {
  switch (dp) {
    case 64: return byRows<S, 64>(rows, p, grid);
    case 128: return byRows<S, 128>(rows, p, grid);
    default: return byRows<S, 256>(rows, p, grid);
  }
}

}  // namespace

int main() {
  Request r(6);
  Params& p = r.p;
  const int64_t format = r.head[0], dp = r.head[1], rows = r.head[2], grid = r.head[3], mergeBlocks = r.head[4],
                mergeThreads = r.head[5];
  if (format < 0 || format > 2 || (dp != 64 && dp != 128 && dp != 256) || grid < 1 || mergeBlocks < 0)
    Request::fail("header");
  if (p.k_new != nullptr) {
    // decode.cu's flash_cache_append_*, 256 threads, any grid.
    emu::launch(4, 256, 0, [&] {
      switch (format) {
        case 0: return append_rows<float, float>(p);
        case 1: return append_rows<float, __nv_bfloat16>(p);
        default: return append_rows<float, __half>(p);
      }
    });
  }
  const auto g = static_cast<unsigned>(grid);
  switch (format) {
    case 0: byDim<float>(static_cast<int>(dp), static_cast<int>(rows), p, g); break;
    case 1: byDim<__nv_bfloat16>(static_cast<int>(dp), static_cast<int>(rows), p, g); break;
    default: byDim<__half>(static_cast<int>(dp), static_cast<int>(rows), p, g); break;
  }
  if (mergeBlocks > 0) {
    // decode.cu's flash_decode_merge_f32.
    emu::launch(static_cast<unsigned>(mergeBlocks), static_cast<unsigned>(mergeThreads), 0, [&] {
      static MergeSmem<float> sm;
      const long long colBlocks = (p.dim + 31) / 32;
      merge_cols<float>(p, blockIdx.x / colBlocks, static_cast<int>(blockIdx.x % colBlocks), sm);
    });
  }
  r.reply();
  return 0;
}
