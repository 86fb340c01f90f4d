// Tile geometry of the CUDA-core ("simt") kernels, shared by forward and
// backward. A block has TILE·8 threads: thread t owns tile row t/8 and, in that
// row, the columns ≡ t mod 8 (of the score tile and of the D-wide
// accumulators). The 8 threads of a row sit in one warp, so row statistics
// need only group8_* shuffles and score rows only __syncwarp.
#pragma once
#include "common.cuh"
#include "params.cuh"

namespace flash {
namespace simt {

// Row stride of a [TILE, DP] tile in shared memory. The odd stride puts the 8
// rows read at one column in 8 different banks.
template <int DP> __host__ __device__ constexpr int ld() { return DP + 1; }

// Shared-memory layouts, in elements of T. select.go repeats these
// formulas; require_launch checks that the two agree.
template <int DP, int TILE> __host__ __device__ constexpr int fwd_smem_elems() {
  return 3 * TILE * ld<DP>() + TILE * (TILE + 1);
}
template <int DP, int TILE> __host__ __device__ constexpr int bwd_smem_elems() {
  return 4 * TILE * ld<DP>() + 2 * TILE * (TILE + 1) + 2 * TILE;
}

// load_tile copies rows [r0, r0+TILE) of an [n, dim] matrix with row stride
// ld into a [TILE, DP] shared tile, writing zeros past n rows and past dim
// columns so that padded rows and columns add nothing to dot products.
template <typename T, int DP, int TILE>
__device__ __forceinline__ void load_tile(T* __restrict__ dst, const T* __restrict__ src, long long r0, long long n,
                                          long long dim, long long ld_src) {
  for (int e = threadIdx.x; e < TILE * DP; e += TILE * 8) {
    const int r = e / DP, c = e % DP;
    T x = T(0);
    if (r0 + r < n && c < dim) x = src[(r0 + r) * ld_src + c];
    dst[r * ld<DP>() + c] = x;
  }
}

// clamp_tile clamps an index relative to a tile's first row or key into
// [0, tile]: the bounds of the part of a tile that a row or key range covers.
__device__ __forceinline__ int clamp_tile(long long x, int tile) {
  return static_cast<int>(x < 0 ? 0 : (x > tile ? tile : x));
}

// store_row writes the thread's DP/8 accumulator columns of one row, times f,
// skipping padded columns.
template <typename T, int DP>
__device__ __forceinline__ void store_row(T* __restrict__ dst, const T (&acc)[DP / 8], T f, long long dim) {
  const int tx = threadIdx.x % 8;
#pragma unroll
  for (int c = 0; c < DP / 8; ++c) {
    const int col = tx + 8 * c;
    if (col < dim) dst[col] = acc[c] * f;
  }
}

}  // namespace simt
}  // namespace flash
