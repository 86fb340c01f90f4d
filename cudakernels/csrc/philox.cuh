// Attention dropout's mask on the device: the function kernels.Dropout
// defines (its documentation gives the counter layout), computed directly
// rather than through curand, whose state and counter layout are its own.
// The CPU, the float64 reference and every kernel draw the same bits for
// the same (seed, offset, pair, row, key), so a forward and its backward,
// and a run on either machine, drop the same entries.
#pragma once
#include "params.cuh"

namespace flash {

// philox4 returns Philox4x32-10 of Random123 at counter (c0, c1, c2, c3)
// under key (k0, k1): ten rounds of two 32×32 multiplications, the key
// bumped by the Weyl constants after each.
__device__ __forceinline__ uint4 philox4(unsigned c0, unsigned c1, unsigned c2, unsigned c3, unsigned k0,
                                         unsigned k1) {
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const unsigned hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const unsigned hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return make_uint4(c0, c1, c2, c3);
}

// philox_word returns word w (0 … 3) of philox4.
__device__ __forceinline__ unsigned philox_word(unsigned c0, unsigned c1, unsigned c2, unsigned c3, unsigned k0,
                                                unsigned k1, int w) {
  const uint4 x = philox4(c0, c1, c2, c3, k0, k1);
  return w == 0 ? x.x : (w == 1 ? x.y : (w == 2 ? x.z : x.w));
}

// Dropout is a launch's dropout: kept(pair, i, j) is kernels.Dropout.Kept
// for query pair `pair` of the call (batch·heads + head), row i and key j:
// a Philox block holds the 16-bit draws of eight keys (each word's low half
// first), compared with the threshold (< 2^16). kept_half compares one
// half of a block's word w: the draw of key 2m (half 0) or 2m + 1 (half 1)
// of word m.
struct Dropout {
  unsigned threshold, k0, k1, offset;
  double scale;

  __device__ __forceinline__ bool on() const { return threshold != 0; }
  __device__ __forceinline__ bool kept_half(unsigned w, int half) const {
    return ((half ? w >> 16 : w) & 0xffffu) >= threshold;
  }
  __device__ __forceinline__ bool kept(long long pair, long long i, long long j) const {
    const unsigned w = philox_word(static_cast<unsigned>(j / 8), static_cast<unsigned>(i), static_cast<unsigned>(pair),
                                   offset, k0, k1, static_cast<int>(j % 8 / 2));
    return kept_half(w, static_cast<int>(j % 2));
  }
  // block_bits returns the keep bits of a Philox block: bit c is key c of
  // its eight (word c/2, half c%2).
  __device__ __forceinline__ unsigned block_bits(const uint4& w) const {
    return pair_bits(w.x) | pair_bits(w.y) << 2 | pair_bits(w.z) << 4 | pair_bits(w.w) << 6;
  }
  // pair_bits returns the keep bits of word w's two draws, low half in bit 0.
  __device__ __forceinline__ unsigned pair_bits(unsigned w) const {
    return (kept_half(w, 0) ? 1u : 0u) | (kept_half(w, 1) ? 2u : 0u);
  }
};

__device__ __forceinline__ Dropout dropout_of(const Params& p) {
  Dropout d;
  d.threshold = static_cast<unsigned>(p.dropout_threshold);
  d.k0 = static_cast<unsigned>(static_cast<unsigned long long>(p.dropout_seed));
  d.k1 = static_cast<unsigned>(static_cast<unsigned long long>(p.dropout_seed) >> 32);
  d.offset = static_cast<unsigned>(p.dropout_offset);
  d.scale = p.dropout_scale;
  return d;
}

}  // namespace flash
