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
// modifiers; with them, with and without the softcap, masked and unmasked
// (six copies: the modifiers' unmasked tiles, most of them, skip the
// compares, and ALiBi's bias is one FFMA there: AlibiRow). A whole copy of
// the body for the modifiers, chosen once per block, was tried first: the
// module's PTX grew from 2.1 to 11 MB (7.3 MB with four copies of the
// element-wise loops alone) with the same loops.
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

// Mods holds a query head's ScoreMod in the form the loops use, in the
// softmax's log2 units: a raw score s (Q·Kᵀ, before the scale) becomes
// cap_l2·tanh(cap_in·s) + bias with the softcap c (cap_in = scale/c: a
// product, since a division per score cost more than the tanh; cap_l2 =
// c·log2e), else s·scale·log2e + bias, the ALiBi bias being
// −slope_l2·|a − j| (slope_l2 = slope·log2e; 0 when off, which leaves
// every score as it was: AlibiRow).
struct Mods {
  float cap_in, cap_l2, slope_l2;
  long long shift;
  bool on;      // any modifier: the ScoreMod's on
  bool capped;  // the softcap
};
__device__ __forceinline__ Mods mods_of(const ScoreMod<float>& f, float scale) {
  const bool capped = f.cap != 0.f;
  return Mods{capped ? scale * (1.f / f.cap) : 0.f, f.cap * kLog2e, f.slope * kLog2e, f.shift, f.on, capped};
}

// with_variant calls body(kMasked, kMod, kCap) with compile-time flags
// (MaskFlag): (masked, false, false) without modifiers, (masked, true, cap)
// with them: six copies of the element-wise loop, so that unmasked tiles
// skip the two compares per score with the modifiers too. mod and cap are
// uniform over the block, masked per thread as with_mask.
template <typename F>
__device__ __forceinline__ void with_variant(bool masked, bool mod, bool cap, F&& body) {
  if (mod) {
    if (cap)
      with_mask(masked, [&](auto kMasked) { body(kMasked, MaskFlag<true>{}, MaskFlag<true>{}); });
    else
      with_mask(masked, [&](auto kMasked) { body(kMasked, MaskFlag<true>{}, MaskFlag<false>{}); });
  } else {
    with_mask(masked, [&](auto kMasked) { body(kMasked, MaskFlag<false>{}, MaskFlag<false>{}); });
  }
}

// AlibiRow is the ALiBi bias −slope_l2·|d| (log2 units) of one of a
// thread's rows over one tile. The scores of that row in the tile sit at
// column offsets c = 8j + e (0 ≤ c ≤ span) of the C layout, and their
// aligned distance d = a − j is base + kDir·c (kDir = −1 where the columns
// are keys: forward and dQ; +1 where they are queries: dK/dV). Where every
// column's d has one sign σ (uniform), the bias is k + m·c with
// k = −σ·slope_l2·base and m = −σ·kDir·slope_l2: one FFMA per score, the
// column offset an immediate, no integer work. A row whose tile crosses its
// diagonal a = j (not uniform) needs |d| per score; the loops take the
// masked copy for it, which computes −slope_l2·|base + kDir·c| (a float
// subtraction, exact below 2²⁴, and a multiply with the absolute-value
// modifier). Under the causal mask every score an unmasked tile leaves has
// d ≥ 0, so its tiles are uniform and only the masked ones pay. The
// integer arithmetic of the old code (|d| and its conversion per score)
// cost some 6 instructions per score.
template <int kDir>
struct AlibiRow {
  float k = 0.f, m = 0.f, base = 0.f;

  // set returns whether the row is uniform over c ∈ [0, span].
  __device__ __forceinline__ bool set(int base_i, int span, float slope_l2) {
    const int lo = kDir > 0 ? base_i : base_i - span, hi = kDir > 0 ? base_i + span : base_i;
    const bool pos = lo >= 0;
    const float sg = pos ? 1.f : -1.f;
    base = static_cast<float>(base_i);
    k = -sg * slope_l2 * base;
    m = -sg * static_cast<float>(kDir) * slope_l2;
    return pos || hi <= 0;
  }
  template <bool kMasked>
  __device__ __forceinline__ float bias(int c, float slope_l2) const {
    if constexpr (kMasked)
      return -slope_l2 * fabsf(base + static_cast<float>(kDir * c));
    else
      return fmaf(static_cast<float>(c), m, k);
  }
};

// approx_tanh reports whether the softcap of operand type E uses the
// hardware tanh.approx.f32 (one MUFU.TANH; maximum relative error
// 2^-10.987, PTX ISA) rather than the library's tanhf (~20 instructions
// with a data-dependent branch, taken per score: the softcap ran at 0.33×
// the plain forward). For BF16 and FP16 the approximation is below the
// rounding the scores carry anyway: each score comes from operands
// rounded to 8 or 11 significant bits, and the reference of those
// precisions (kernels/conformance, precision.go) rounds every result,
// tanh's included, to them, so its own tanh is off by up to 2^-9 (BF16) or
// 2^-11 (FP16) relative; FP16 is the close case, at the same order. TF32
// keeps tanhf: its reference rounds only the products' inputs and computes
// tanh in float32, so a 2^-11 error there would be new error, not hidden
// in rounding already made.
template <typename E> __host__ __device__ constexpr bool approx_tanh() { return sizeof(typename E::Storage) == 2; }

// tanh_of is the softcap's tanh for operand type E (approx_tanh).
template <typename E>
__device__ __forceinline__ float tanh_of(float x) {
  if constexpr (approx_tanh<E>()) {
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
  } else {
    return tanhf(x);
  }
}

// modified returns a raw score s in log2 units through the modifiers (kMod;
// kCap: the softcap, tanh_of<E>) with the ALiBi bias of row ar at column
// offset c (see Mods), and sets dsoft to the softcap's derivative 1 − tanh²
// (1 without it); without modifiers, s·scale_log2.
template <typename E, bool kMod, bool kCap, bool kMasked, int kDir>
__device__ __forceinline__ float modified(float s, float scale_log2, const Mods& md, const AlibiRow<kDir>& ar, int c,
                                          float& dsoft) {
  dsoft = 1.f;
  if constexpr (kCap) {
    const float th = tanh_of<E>(s * md.cap_in);
    dsoft = 1.f - th * th;
    return fmaf(th, md.cap_l2, ar.template bias<kMasked>(c, md.slope_l2));
  } else if constexpr (kMod) {
    return fmaf(s, scale_log2, ar.template bias<kMasked>(c, md.slope_l2));
  } else {
    return s * scale_log2;
  }
}

// offset_of is a − j for row i, key j of a mask's shift, in 32 bits; the
// loops add the score's column to it. The arithmetic wraps as unsigned:
// only the final difference, at most max(nq, nk), must fit an int.
__device__ __forceinline__ int offset_of(long long i, long long shift, long long j) {
  return static_cast<int>(static_cast<unsigned>(i) + static_cast<unsigned>(shift) - static_cast<unsigned>(j));
}

// block_order maps block b of a _var kernel's grid, over pairs × tiles
// blocks (pairs: query heads, or key heads for dK/dV; tiles: its blocks
// per pair), to its pair and tile. The plain grids run pair-major, tiles
// ascending. Under a causal mask the work of a tile grows (forward, dQ) or
// shrinks (dK/dV) with its index, so the block scheduler, which starts
// blocks in index order, started the shortest first or mixed, and the
// longest ones ran alone at the end; with grouped-query attention the
// dK/dV grid has only B·Hkv·N/128 blocks (256 at 2 key heads, N = 8192),
// each looping over the group's heads, and the tail was most of the
// kernel. Here blocks go in groups of kOrderPairs pairs, tile-major inside
// a group, longest tiles first (descending: the tiles' work grows with
// the index); a list-scheduling model of 132 SMs puts the GQA dK/dV at
// N = 8192 from 1.5× its ideal time to within 2 %, and causal forwards
// from +7 % to ideal. Grouping keeps a few pairs in flight at once, ~33
// blocks each on 132 SMs, so that they share their pair's K and V (Q and
// dO in dK/dV) in L2 as the pair-major order does.
constexpr unsigned kOrderPairs = 4;
__device__ __forceinline__ void block_order(unsigned b, unsigned tiles, bool descending, long long& pair,
                                            long long& tile) {
  const unsigned pairs = gridDim.x / tiles, per = kOrderPairs * tiles, group = b / per, r = b - group * per;
  const unsigned in_group = pairs - group * kOrderPairs < kOrderPairs ? pairs - group * kOrderPairs : kOrderPairs;
  const unsigned i = r / in_group;
  pair = group * kOrderPairs + (r - i * in_group);
  tile = descending ? tiles - 1 - i : i;
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

// wg_bar synchronises the 128 threads of warpgroup wg (named barrier
// 1 + wg; barrier 0 is __syncthreads).
__device__ __forceinline__ void wg_bar(int wg) { asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory"); }

// store_wg_rows writes a warpgroup's fp32 accumulators c of DP columns
// (64 rows: warp w holds rows 16w + g and 16w + g + 8, scaled by s[0] and
// s[1]; n8 tile n holds columns 8n + 2t and 8n + 2t + 1) to rows row0 …
// row0 + 63 of y (row stride ld; rows ≥ n and columns ≥ dim skipped)
// through BYTES of shared memory at the shared address region, which no
// other warpgroup touches. Stored straight from the accumulators, each
// 4-byte store instruction of a warp hits 8 rows (8 lines, 8 cycles of the
// L1 for 128 bytes); here the columns go through shared memory in passes of
// W = BYTES / 256, in 16-byte chunks swizzled by row (chunk c of row r at
// c ⊕ 2(r mod 4), so that a half-warp's 8-byte writes hit 32 distinct
// banks, and 8 lanes' 16-byte reads of one row too), and come back a row
// at a time: each warp stores 512 contiguous bytes per instruction (float4
// where y, ld and dim allow: vec). Every thread of the warpgroup calls it;
// it starts with a warpgroup barrier, so the region may still be in use by
// the warpgroup (its wgmma must be complete) up to the call.
template <int DP, int BYTES>
__device__ __forceinline__ void store_wg_rows(float* y, long long ld, long long row0, long long n, long long dim,
                                              uint32_t region, const float (&c)[DP / 8][4], const float (&s)[2],
                                              int wg, bool vec) {
  constexpr int W = BYTES / 256 < DP ? BYTES / 256 : DP;  // columns per pass
  static_assert(W % 32 == 0 && DP % W == 0, "whole groups of 8 chunks per staged row, whole passes");
  constexpr int kChunks = W / 4;  // 16-byte chunks per staged row
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int pass = 0; pass < DP / W; ++pass) {
    wg_bar(wg);  // the region's earlier readers (wgmma, the last pass) are done
#pragma unroll
    for (int j = 0; j < W / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp * 16 + g + 8 * h, col = 8 * j + 2 * t, n8 = pass * (W / 8) + j;
        const uint32_t a = region + (r * kChunks + ((col / 4) ^ (2 * (r & 3)))) * 16 + (col & 3) * 4;
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"(c[n8][2 * h] * s[h]),
                     "f"(c[n8][2 * h + 1] * s[h])
                     : "memory");
      }
    wg_bar(wg);
#pragma unroll
    for (int i = tid; i < 64 * kChunks; i += 128) {
      const int r = i / kChunks, c4 = i % kChunks;
      float4 v;
      asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                   : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                   : "r"(region + (r * kChunks + (c4 ^ (2 * (r & 3)))) * 16)
                   : "memory");
      const long long row = row0 + r;
      const int col = pass * W + 4 * c4;
      if (row >= n || col >= dim) continue;
      float* yr = y + row * ld + col;
      if (vec) {  // asm: nvcc merged a plain float4 store with the scalar ones below into 4 scalar stores
        asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(yr), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                     : "memory");
      } else {
        yr[0] = v.x;
        if (col + 1 < dim) yr[1] = v.y;
        if (col + 2 < dim) yr[2] = v.z;
        if (col + 3 < dim) yr[3] = v.w;
      }
    }
  }
}

// rows_vec reports whether rows of y (row stride ld) take 16-byte stores
// of 4 columns up to dim: store_wg_rows' vec.
__device__ __forceinline__ bool rows_vec(const float* y, long long ld, long long dim) {
  return (reinterpret_cast<unsigned long long>(y) & 15) == 0 && ld % 4 == 0 && dim % 4 == 0;
}

}  // namespace sm90
}  // namespace flash
