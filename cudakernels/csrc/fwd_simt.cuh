// Forward pass on CUDA cores, in the precision of T (float: exact fp32;
// double: the float64 path for gradient checks). Used where tensor cores do
// not apply; accurate rather than fast.
#pragma once
#include "simt_tile.cuh"
#include "philox.cuh"
#include "variants.cuh"

namespace flash {
namespace simt {

// fwd_1rowblock computes one tile of TILE query rows of one (batch, head):
// it loops over the TILE-key tiles of K and V that its rows see (the key
// head of its group under GQA), keeps the running maximum m and sum l of
// every row (online softmax) and rescales the output accumulators whenever
// m grows. Writes O = acc / l and LSE = m + log l. Scores go through the
// softcap and ALiBi (variants.cuh) before the mask.
template <typename T, int DP, int TILE>
__device__ void fwd_1rowblock(const Params& p) {
  using M = Math<T>;
  const long long nq = p.nq, dim = p.dim;
  constexpr int kLd = ld<DP>();
  constexpr int kPerS = TILE / 8;  // score columns per thread
  constexpr int kPerO = DP / 8;    // output columns per thread
  require_launch(TILE * 8, fwd_smem_elems<DP, TILE>() * sizeof(T));

  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + TILE * kLd;
  T* sV = sK + TILE * kLd;
  T* sP = sV + TILE * kLd;  // [TILE, TILE+1]

  const long long tiles = (nq + TILE - 1) / TILE;
  const long long bh = blockIdx.x / tiles;
  const long long q0 = (blockIdx.x % tiles) * TILE;
  const int ty = threadIdx.x / 8, tx = threadIdx.x % 8;
  const long long row = q0 + ty;
  const long long kvh = kv_pair(p, bh), kv_heads = p.h / p.kv_group;
  const T* qh = head_of(static_cast<const T*>(p.q), bh, p.h, p.q_batch_stride, p.q_head_stride);
  const T* kh = head_of(static_cast<const T*>(p.k), kvh, kv_heads, p.k_batch_stride, p.k_head_stride);
  const T* vh = head_of(static_cast<const T*>(p.v), kvh, kv_heads, p.v_batch_stride, p.v_head_stride);
  const SeqMask mask = seq_mask(p, bh);
  const Scores<T> score = scores_of<T>(p, bh, mask);
  const Dropout drop = dropout_of(p);
  const long long pair = p.pair0 + bh;

  // Prologue: this tile's queries and the keys its rows see: from the
  // first row's first key to the last real row's last (both bounds are
  // nondecreasing in the row); key tiles outside are skipped entirely.
  load_tile<T, DP, TILE>(sQ, qh, q0, nq, dim, p.q_row_stride);
  const long long lo = row < nq ? mask.key_lo(row) : 0, hi = row < nq ? mask.key_hi(row) : 0;
  const long long last = (q0 + TILE < mask.lq ? q0 + TILE : mask.lq) - 1;
  const long long kv_begin = q0 <= last ? mask.key_lo(q0) / TILE * TILE : 0;
  const long long kv_end = q0 <= last ? mask.key_hi(last) : 0;

  T m = -M::inf(), l = T(0);
  T acc[kPerO];
#pragma unroll
  for (int c = 0; c < kPerO; ++c) acc[c] = T(0);

  // Main loop over key tiles.
  for (long long k0 = kv_begin; k0 < kv_end; k0 += TILE) {
    __syncthreads();  // the previous tile's sK, sV, sP are no longer read
    // Padding keys load as zeros: a masked probability is 0, and 0 times
    // whatever the caller left in a padding row of V could be NaN.
    load_tile<T, DP, TILE>(sK, kh, k0, mask.lk, dim, p.k_row_stride);
    load_tile<T, DP, TILE>(sV, vh, k0, mask.lk, dim, p.v_row_stride);
    __syncthreads();

    T s[kPerS];
#pragma unroll
    for (int c = 0; c < kPerS; ++c) s[c] = T(0);
#pragma unroll 8
    for (int d = 0; d < DP; ++d) {
      const T qd = sQ[ty * kLd + d];
#pragma unroll
      for (int c = 0; c < kPerS; ++c) s[c] = M::fma(qd, sK[(tx + 8 * c) * kLd + d], s[c]);
    }

    T tile_max = -M::inf();
#pragma unroll
    for (int c = 0; c < kPerS; ++c) {
      const long long key = k0 + tx + 8 * c;
      T dsoft;
      s[c] = lo <= key && key < hi ? score(s[c], row, key, dsoft) : -M::inf();
      tile_max = s[c] > tile_max ? s[c] : tile_max;
    }
    const T tile_m = group8_max(tile_max);
    const T m_new = tile_m > m ? tile_m : m;
    // A row that has seen no visible key yet has m_new = −inf; subtracting it
    // would give (−inf) − (−inf) = NaN. Its p are all 0 whatever the
    // reference, so use 0 instead. alpha = exp(m − ref) is then 0 and
    // multiplies accumulators that are still 0.
    const T ref = m_new == -M::inf() ? T(0) : m_new;
    const T alpha = M::exp(m - ref);
    T tile_sum = T(0);
#pragma unroll
    for (int c = 0; c < kPerS; ++c) {
      const T p = M::exp(s[c] - ref);
      tile_sum += p;
      // Dropout drops probabilities after the softmax: l sums them all.
      sP[ty * (TILE + 1) + tx + 8 * c] =
          drop.on() ? (drop.kept(pair, row, k0 + tx + 8 * c) ? p * T(drop.scale) : T(0)) : p;
    }
    l = l * alpha + group8_sum(tile_sum);
    m = m_new;
    __syncwarp();  // sP row ty is written and read by the 8 lanes of one warp

#pragma unroll
    for (int c = 0; c < kPerO; ++c) acc[c] *= alpha;
    // Only the keys this row sees: a masked probability is 0, but 0 times
    // an infinite or NaN value of a key outside the row's range would not
    // be, and the reference never touches such a pair.
    const int j_lo = clamp_tile(lo - k0, TILE), j_hi = clamp_tile(hi - k0, TILE);
    for (int j = j_lo; j < j_hi; ++j) {
      const T p = sP[ty * (TILE + 1) + j];
#pragma unroll
      for (int c = 0; c < kPerO; ++c) acc[c] = M::fma(p, sV[j * kLd + tx + 8 * c], acc[c]);
    }
  }

  // Epilogue. Only the mask decides that a row has no key (output 0, LSE =
  // +inf); every other row follows IEEE arithmetic as the naive softmax
  // does: NaN scores make l NaN, and all scores −inf leave l = 0, so
  // O = 0·(1/0) = NaN and LSE = −inf + log 0 = −inf.
  if (row < nq) {
    T* oh = head_of(static_cast<T*>(p.o), bh, p.h, p.o_batch_stride, p.o_head_stride);
    const bool any_key = lo < hi;
    const T inv_l = any_key ? T(1) / l : T(0);
    store_row<T, DP>(oh + row * p.o_row_stride, acc, inv_l, dim);
    // With m = +inf (an infinite bias or input), exp(s − m) is NaN at the
    // scores equal to m, so l is NaN, but log Σ exp(s) is m itself, as the
    // reference has it; the backward's P = exp(s − LSE) is then 0 at every
    // finite score. (m = −inf is left to the formula: l = 0 gives −inf, and
    // NaN scores, which the running maximum skips, make l and LSE NaN. A
    // row with both a +inf and a NaN score gets +inf, where the reference,
    // whose maximum is NaN, has NaN.)
    const T lse = !any_key ? M::inf() : (m == M::inf() ? m : m + M::log(l));
    if (tx == 0) static_cast<T*>(p.lse)[bh * nq + row] = lse;
  }
}

}  // namespace simt
}  // namespace flash
