// The attention variants in the Hopper kernels (fwd_wgmma.cuh,
// bwd_wgmma.cuh): what the plain and the variant instantiations share on top
// of variants.cuh (SeqMask, ScoreMod, kv_pair).
//
// Every Hopper attention kernel is compiled twice (hopper.cu): plain
// (kVar = false: no grouped heads, no lengths, no window bound on the left,
// no modifier; the causal mask and a right bound are fine) and _var (every
// variant). The plain one keeps its tuned loops as they were: masks compare
// a key with the row's one upper bound, since its rows see keys from 0. The
// _var one compares with both bounds, and compiles the element-wise work on
// the scores (scale, modifiers, mask, exp) four times, picked per tile by
// with_variant: without modifiers masked and unmasked, as the plain kernel
// does, so that grouped heads and masks alone pay nothing for the
// modifiers; with them, with and without the softcap, both masked (a tanh
// per score costs far more than two compares, and a fifth and sixth copy
// of the loop would only lengthen the module). A whole copy of the body for
// the modifiers, chosen once per block, was tried first: the module's PTX
// grew from 2.1 to 11 MB (7.3 MB this way) with the same loops.
#pragma once
#include "common.cuh"
#include "variants.cuh"

namespace flash {
namespace sm90 {

constexpr float kLog2e = 1.4426950408889634f;

// require_plain traps when a plain entry point is launched on a problem
// only the _var one computes (the host picks the same way, pickVariant): it
// must fail loudly, not compute plain attention.
__device__ __forceinline__ void require_plain(const Params& p) {
  if (p.kv_group != 1 || p.mask_left >= 0 || p.q_lens != nullptr || p.k_lens != nullptr || p.softcap != 0.0 ||
      p.alibi != nullptr)
    __trap();
}

// row_keys returns the keys row i sees, lo ≤ j < hi, with lo = hi = 0 for a
// row that sees none (padding rows, rows ≥ nq, rows whose window misses
// every key): one upper bound then decides "no key" (hi = 0), and a plain
// kernel, whose rows see keys from 0, compares with hi alone.
__device__ __forceinline__ void row_keys(const SeqMask& m, long long i, long long& lo, long long& hi) {
  lo = m.key_lo(i);
  hi = m.key_hi(i);
  if (lo >= hi) lo = hi = 0;
}

// Mods holds a query head's ScoreMod in the form the loops use: the softcap
// c and 1/c (scores are multiplied by 1/c rather than divided by c: a
// division per score cost more than the tanh, and the two differ by an ulp
// of the tanh's argument, far below the operands' rounding) and the ALiBi
// slope (0 when off: subtracting 0·|a − j| leaves every score as it was, so
// ALiBi needs no branch of its own).
struct Mods {
  float cap, inv_cap, slope;
  long long shift;
  bool on;  // any modifier: the ScoreMod's on
};
__device__ __forceinline__ Mods mods_of(const ScoreMod<float>& f) {
  return Mods{f.cap, f.cap != 0.f ? 1.f / f.cap : 0.f, f.slope, f.shift, f.on};
}

// with_variant calls body(kMasked, kMod, kCap) with compile-time flags
// (MaskFlag): (masked, false, false) without modifiers, (true, true, cap)
// with them. mod and cap are uniform over the block, masked per thread as
// with_mask.
template <typename F>
__device__ __forceinline__ void with_variant(bool masked, bool mod, bool cap, F&& body) {
  if (mod) {
    if (cap)
      body(MaskFlag<true>{}, MaskFlag<true>{}, MaskFlag<true>{});
    else
      body(MaskFlag<true>{}, MaskFlag<true>{}, MaskFlag<false>{});
  } else {
    with_mask(masked, [&](auto kMasked) { body(kMasked, MaskFlag<false>{}, MaskFlag<false>{}); });
  }
}

// modify applies the softcap (kCap) and ALiBi to a scaled score x (natural
// units) whose row is d keys after its key (d = a − j, a the row's aligned
// position), as ScoreMod::apply does, and sets dsoft to the softcap's
// derivative (1 without it).
template <bool kCap>
__device__ __forceinline__ float modify(float x, const Mods& md, int d, float& dsoft) {
  dsoft = 1.f;
  if constexpr (kCap) {
    const float t = tanhf(x * md.inv_cap);
    x = md.cap * t;
    dsoft = 1.f - t * t;
  }
  return x - md.slope * static_cast<float>(d < 0 ? -d : d);
}

// offset_of is a − j for row i, key j of a mask's shift, in 32 bits; the
// loops add the score's column to it. The arithmetic wraps as unsigned:
// only the final difference, at most max(nq, nk), must fit an int.
__device__ __forceinline__ int offset_of(long long i, long long shift, long long j) {
  return static_cast<int>(static_cast<unsigned>(i) + static_cast<unsigned>(shift) - static_cast<unsigned>(j));
}

// zero_rows writes 0 into rows [row0, row_end) of y (row stride ld),
// columns below dim, with every thread of a block of kThreads: warps take
// rows, lanes consecutive columns, so each store instruction writes one
// contiguous run. The _var kernels' blocks with nothing to compute (every
// row padding, or seeing no key; every key padding, or seen by no row)
// write their outputs with it and return before setting up barriers or
// loading a tile.
template <int kThreads>
__device__ __forceinline__ void zero_rows(float* y, long long row0, long long row_end, long long dim, long long ld) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (long long r = row0 + warp; r < row_end; r += kThreads / 32) {
    float* yr = y + r * ld;
    for (long long c = lane; c < dim; c += 32) yr[c] = 0.f;
  }
}

}  // namespace sm90
}  // namespace flash
