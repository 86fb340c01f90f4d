// The attention variants in the tensor-core kernels of both families
// (fwd_mma.cuh and bwd_mma.cuh for mma.sync, fwd_wgmma.cuh and
// bwd_wgmma.cuh for Hopper), on top of variants.cuh (SeqMask, ScoreMod,
// kv_pair): how a plain kernel refuses a variant, a row's key range, the
// score modifiers in the softmax's log2 units with the compile-time copies
// of the element-wise loops, the block order of the _var grids, and the
// outputs of blocks with nothing to compute. Every tensor-core kernel holds
// scores in the C layout of m16n8 accumulators (mma.cuh), so the same
// element-wise code serves both families; sm90_variants.cuh explains why
// the loops come in six copies.
#pragma once
#include "common.cuh"
#include "philox.cuh"
#include "variants.cuh"

namespace flash {

constexpr float kLog2e = 1.4426950408889634f;

// require_plain traps when a plain entry point is launched on a problem
// only the _var one computes (the host picks the same way, pickVariant): it
// must fail loudly, not compute plain attention. kRightBound says whether
// the plain kernel computes a window's right bound (Hopper's do, through
// SeqMask); the mma.sync ones compute the causal mask alone, from p.causal.
template <bool kRightBound = true>
__device__ __forceinline__ void require_plain(const Params& p) {
  if (p.kv_group != 1 || p.mask_left >= 0 || p.q_lens != nullptr || p.k_lens != nullptr || p.softcap != 0.0 ||
      p.alibi != nullptr || (!kRightBound && p.mask_right >= 0 && p.causal == 0))
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

// with_variant_of is with_variant for a kernel that computes the bias and
// dropout too (kFull): there, only the masked copy with the modifiers, the
// softcap a flag, two copies rather than six. A bias's loads and
// dropout's Philox blocks cost more per score than the compares the
// unmasked copies save, and six copies of the _full loops made the
// module's PTX half again as large. The masked copy computes unmasked
// tiles too, and the modifiers with ALiBi off and no softcap leave every
// score as it was.
template <bool kFull, typename F>
__device__ __forceinline__ void with_variant_of(bool masked, bool mod, bool cap, F&& body) {
  if constexpr (kFull) {
    if (cap)
      body(MaskFlag<true>{}, MaskFlag<true>{}, MaskFlag<true>{});
    else
      body(MaskFlag<true>{}, MaskFlag<true>{}, MaskFlag<false>{});
  } else {
    with_variant(masked, mod, cap, body);
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
#ifdef FLASH_EMU  // the correctly rounded tanh, for the emulation's sake
    y = tanhf(x);
#else
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
#endif
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
// blocks is the number of blocks (or a persistent kernel's items) in all:
// gridDim.x in the overload without it.
__device__ __forceinline__ void block_order(unsigned b, unsigned tiles, unsigned blocks, bool descending,
                                            long long& pair, long long& tile) {
  const unsigned pairs = blocks / tiles, per = kOrderPairs * tiles, group = b / per, r = b - group * per;
  const unsigned in_group = pairs - group * kOrderPairs < kOrderPairs ? pairs - group * kOrderPairs : kOrderPairs;
  const unsigned i = r / in_group;
  pair = group * kOrderPairs + (r - i * in_group);
  tile = descending ? tiles - 1 - i : i;
}
__device__ __forceinline__ void block_order(unsigned b, unsigned tiles, bool descending, long long& pair,
                                            long long& tile) {
  block_order(b, tiles, gridDim.x, descending, pair, tile);
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

// zero_key_grads writes dK = dV = 0 for keys [k0, k_end) of key head kvh,
// with every thread of a block of kThreads: the _var dK/dV blocks whose
// keys no row sees (padding keys, or keys no row's window reaches) write
// that and return before any copy. k-like tensors have p.h / p.kv_group
// heads per batch entry.
template <int kThreads>
__device__ __forceinline__ void zero_key_grads(const Params& p, long long kvh, long long k0, long long k_end) {
  const long long kv_heads = p.h / p.kv_group;
  zero_rows<kThreads>(head_of(static_cast<float*>(p.dk), kvh, kv_heads, p.dk_batch_stride, p.dk_head_stride), k0,
                      k_end, p.dim, p.dk_row_stride);
  zero_rows<kThreads>(head_of(static_cast<float*>(p.dv), kvh, kv_heads, p.dv_batch_stride, p.dv_head_stride), k0,
                      k_end, p.dim, p.dv_row_stride);
}

// Extras are what the _full kernels compute beyond _var's variants: the
// additive bias and dropout. bias is the query pair's slice (bias_rows:
// rows nk apart, natural units) or null, which the kernels copy tile by
// tile into shared memory (cp_bias_tile) and add from there; pair numbers
// the pair for the dropout counter (p.pair0 + bh), as the CUDA-core
// kernels and the CPU number it, so that every kernel drops the same
// entries.
struct Extras {
  const float* bias;
  long long pair;
  Dropout drop;

  __device__ __forceinline__ float drop_scale() const { return static_cast<float>(drop.scale); }
};
__device__ __forceinline__ Extras extras_of(const Params& p, long long bh) {
  return Extras{bias_rows<float>(p, bh), p.pair0 + bh, dropout_of(p)};
}

// drop_by_row multiplies x, scores in the C layout whose element e of
// tile j is row rows[e/2] and key k0 + 8j + 2t + e%2 (forward, dQ, dBias),
// by sc where the entry is kept and by 0 where it is dropped: sc is the
// dropout factor 1/(1−p) for dP (dQ, dBias), 1 for the forward's P, whose
// factor finish_row applies. k0 is a multiple of 8.
//
// A Philox block covers the eight keys of a tile in one row, so the four
// lanes t = 0 … 3 of a row pair (g) need the same two blocks per tile, one
// per row. Each draws a quarter of them, rows[t&1]'s blocks of the tiles j
// ≡ t>>1 (mod 2), and packs their keep bits, 8 per block (block_bits); a
// lane takes its two keys' bits (2t, 2t+1 of each block) from the four
// packings in four shuffles (eight at NS = 16, whose packings take two
// words): a quarter of the Philox work of drawing every block in every
// lane, the same bits. Every lane of the warp must call.
template <int NS>
__device__ __forceinline__ void drop_by_row(float (&x)[NS][4], const Extras& ex, const long long (&rows)[2],
                                            long long k0, int t, float sc) {
  static_assert(NS % 2 == 0 && NS <= 16, "8 keep bits per drawn block, NS/2 blocks in one or two 32-bit words");
  constexpr int kW = NS > 8 ? 2 : 1;  // words of drawn bits: blocks jj < 4 in the first
  const unsigned row = static_cast<unsigned>(t & 1 ? rows[1] : rows[0]);  // a select: rows stays in registers
  const int par = t >> 1;
  uint32_t drawn[kW] = {};  // bits 8(jj%4) … 8(jj%4)+7 of word jj/4: tile 2jj + par of row t&1
#pragma unroll
  for (int jj = 0; jj < NS / 2; ++jj) {
    const uint4 w = philox4(static_cast<unsigned>(k0 / 8) + 2 * jj + par, row, static_cast<unsigned>(ex.pair),
                            ex.drop.offset, ex.drop.k0, ex.drop.k1);
    drawn[jj / 4] |= ex.drop.block_bits(w) << (8 * (jj % 4));
  }
  // The packings of the quad's lanes s (row s&1, tiles ≡ s>>1), word by
  // word: from[h][s].
  uint32_t from[kW][4];
#pragma unroll
  for (int h = 0; h < kW; ++h)
#pragma unroll
    for (int s = 0; s < 4; ++s) from[h][s] = __shfl_sync(0xffffffffu, drawn[h], s, 4);
#pragma unroll
  for (int j = 0; j < NS; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t bits = from[j / 8][(e >> 1) | ((j & 1) << 1)];
      x[j][e] = (bits >> (8 * ((j >> 1) % 4) + 2 * t + (e & 1))) & 1u ? x[j][e] * sc : 0.f;
    }
}

// zero_unseen sets dS to exactly 0 at the pairs a thread's rows do not see
// (element e of tile j: key base + 8j + 2t + e%2, outside row e/2's [lo,
// hi)), as the CUDA-core kernels leave them: there dS =
// 0·(dP − D) would be NaN where dP or D is not finite (an infinite value,
// or D of a row whose every key a −inf bias removed), which dBias must not
// take at a pair no row sees, nor dQ of a row that sees no key.
//
// The same serves dSᵀ (dK/dV), whose columns are queries: base is then
// the step's first query, and [lo, hi) the rows that see key e/2.
template <int NS>
__device__ __forceinline__ void zero_unseen(float (&ds)[NS][4], long long base, int t, const int (&lo)[2],
                                            const int (&hi)[2]) {
#pragma unroll
  for (int j = 0; j < NS; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const long long c = base + 8 * j + 2 * t + (e & 1);
      if (c < lo[e >> 1] || c >= hi[e >> 1]) ds[j][e] = 0.f;
    }
}

// store_dbias writes a dBias kernel's sums into slice bs of p.dbias: acc in
// the C layout (element e of tile j: row rows[e/2], key k0 + 8j + 2t +
// e%2), rows ≥ nq and keys ≥ nk left out. Both families' dBias kernels
// end with it.
template <int NS>
__device__ __forceinline__ void store_dbias(const Params& p, const BiasSlice& bs, const float (&acc)[NS][4],
                                            const long long (&rows)[2], long long k0, int t) {
  const long long nq = p.nq, nk = p.nk;
  float* out = static_cast<float*>(p.dbias) + bs.sb * p.bias_batch_stride + bs.sh * p.bias_head_stride;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (rows[h] >= nq) continue;
#pragma unroll
    for (int j = 0; j < NS; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const long long key = k0 + 8 * j + 2 * t + e;
        if (key < nk) out[rows[h] * nk + key] = acc[j][2 * h + e];
      }
  }
}

// Log2Lse reads LSE values stored in natural units as log2 units.
struct Log2Lse {
  const float* lse;
  __device__ __forceinline__ float operator[](int c) const { return lse[c] * kLog2e; }
};

// keep_bits_dkdv returns the dropout keep bits of a dK/dV step: bit 4j + e
// is Dropout::kept(pair, query q0 + 8j + 2t + e%2, key key0 + 8·(e/2)) for
// element e of score tile j (probs_dkdv's layout), t = lane % 4.
//
// A Philox block covers eight consecutive keys of one query, and key0 is
// k0 + 16·warp + g (k0 a multiple of 16): the eight lanes g = 0 … 7 with the
// same t need the same four blocks per tile (queries 2t, 2t+1; keys 0 … 7
// and 8 … 15 of the warp's 16). Lane g draws an eighth of them: query 2t +
// (g&1), keys 8·((g>>1)&1) on, tiles j ≡ g>>2 (mod 2), packing 8 keep bits
// per block (block_bits, bit c for key c of the block); a lane takes its
// key's bit (c = g) from the eight packings in eight shuffles: an eighth of
// the Philox work of drawing every block in every lane, the same bits.
// Every lane of the warp must call.
template <int NS>
__device__ __forceinline__ uint32_t keep_bits_dkdv(const Extras& ex, long long q0, long long key0, int lane) {
  static_assert(NS % 2 == 0 && NS <= 8, "four keep bits per tile in 32 bits");
  const int t = lane % 4, g = (lane / 4) % 8;
  const unsigned block = static_cast<unsigned>((key0 - g) / 8) + ((g >> 1) & 1);
  const int par = g >> 2;
  uint32_t drawn = 0u;  // bits 8jj … 8jj+7: tile 2jj + par
#pragma unroll
  for (int jj = 0; jj < NS / 2; ++jj) {
    const uint4 x = philox4(block, static_cast<unsigned>(q0 + 8 * (2 * jj + par) + 2 * t + (g & 1)),
                            static_cast<unsigned>(ex.pair), ex.drop.offset, ex.drop.k0, ex.drop.k1);
    drawn |= ex.drop.block_bits(x) << (8 * jj);
  }
  uint32_t bits = 0u;
#pragma unroll
  for (int s = 0; s < 8; ++s) {
    // Lane (s, t) drew query 2t + (s&1), key half (s>>1)&1, tiles ≡ s>>2:
    // elements e = (s&1) | (((s>>1)&1) << 1) of tiles j ≡ s>>2.
    const uint32_t from = __shfl_sync(0xffffffffu, drawn, 4 * s + t);
    const int e = (s & 1) | (((s >> 1) & 1) << 1);
#pragma unroll
    for (int jj = 0; jj < NS / 2; ++jj) {
      const int j = 2 * jj + (s >> 2);
      bits |= ((from >> (8 * jj + g)) & 1u) << (4 * j + e);
    }
  }
  return bits;
}

// probs_dkdv turns Sᵀ (element e of tile j: key key0 + 8·(e/2), query
// q0 + 8j + 2t + e%2) into Pᵀ = exp2(scale_log2·s − lt[query]) and its A
// fragments pf, 0 where masked (kMasked) and the query does not see the
// key: plain, query < qlo[key] (its rows see keys from 0); _var, outside
// [qlo, qhi). With kMod the scores go through the modifiers first
// (modified; ar: each key's ALiBi bias over the step's queries) and s is
// left holding Pᵀ·dsoft, the factor dSᵀ takes, once pf holds Pᵀ: E::kK
// keys at a time, so that dsoft lives for one fragment only (Pᵀ and
// Pᵀ·dsoft at once would cost 32 registers more). lt[c] is the LSE of the
// step's query c in log2 units: a pointer to them (Hopper: prep_stats
// writes them so), or Log2Lse over the natural ones (mma.sync). For the
// split type (E::kExact) scale_log2 and lt are in natural units and the
// exponential is expf (score_exp), and pf holds the hi fragments and then
// the lo ones (mma::put_frag).
//
// kFull (the mma.sync _full dK/dV kernel) adds the bias to each score
// before the exponential, from sb, the step's bias tile in shared memory
// (rows: queries, kLd floats apart) at this thread's first score (query
// 2t, key 16·warp + g), null without a bias; the tile holds zeros past the
// sequence and past nk, and scores the thread's keys do not see are set
// to 0 whatever their bias. The thread's second key (g + 8) is sb_h1
// floats from its first in every row: 8 in a padded tile, ±8 in the Hopper
// kernel's swizzled one (bwd_wgmma.cuh, DkdvBiasSwizzle). With dropout
// (drop_on) it builds pf, the probabilities dV takes, from Pᵀ∘Z (zbits:
// keep_bits_dkdv's; without the factor 1/(1−p), which the caller applies
// to dV in float32 as the forward does to O) while s keeps Pᵀ(·dsoft).
template <typename E, bool kVar, bool kMod, bool kMasked, bool kCap, int NS, typename Lse, bool kFull = false,
          int kLd = 0>
__device__ __forceinline__ void probs_dkdv(float (&s)[NS][4], uint32_t (&pf)[mma::frag_count<E, NS * 8>()][4],
                                           float scale_log2,
                                           Lse lt, int q0, int t, const int (&qlo)[2], const int (&qhi)[2],
                                           const Mods& md, const AlibiRow<1> (&ar)[2], const float* sb = nullptr,
                                           bool drop_on = false, uint32_t zbits = 0u, int sb_h1 = 8) {
  static_assert(!kFull || kVar, "the _full kernels compute the _var variants too");
  constexpr int kT = E::kK / 8;  // score tiles per fragment
#pragma unroll
  for (int kk = 0; kk < NS / kT; ++kk) {
    float dsoft[kT][4];
    [[maybe_unused]] float pr[kT][4];
#pragma unroll
    for (int c = 0; c < kT; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = kk * kT + c, col = 8 * j + 2 * t + (e & 1), h = e >> 1;
        float x = modified<E, kMod, kCap, kMasked>(s[j][e], scale_log2, md, ar[h], 8 * j + (e & 1), dsoft[c][e]);
        const bool seen = !kMasked || (q0 + col >= qlo[h] && q0 + col < qhi[h]);
        if constexpr (kFull) {
          if (sb != nullptr) x = fmaf(sb[(8 * j + (e & 1)) * kLd + (h ? sb_h1 : 0)], kLog2e, x);
        }
        float p = score_exp<E::kExact>(x - lt[col]);
        if constexpr (kVar) {
          if (!seen) p = 0.f, dsoft[c][e] = 0.f;
        } else {
          if (kMasked && q0 + col < qlo[h]) p = 0.f;
        }
        s[j][e] = p;
        if constexpr (kFull) {
          pr[c][e] = p;
          if (drop_on && !((zbits >> (4 * j + e)) & 1u)) s[j][e] = 0.f;
        }
      }
    mma::put_frag<E>(pf, s, kk);
    if constexpr (kFull) {
#pragma unroll
      for (int c = 0; c < kT; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[kk * kT + c][e] = kMod ? pr[c][e] * dsoft[c][e] : pr[c][e];
    } else if constexpr (kMod) {
#pragma unroll
      for (int c = 0; c < kT; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[kk * kT + c][e] *= dsoft[c][e];
    }
  }
}

// drop_by_bits multiplies dPᵀ by the dropout factor of the entries
// probs_dkdv drew: 1/(1−p) where bit 4j + e of zbits is set, else 0.
template <int NS>
__device__ __forceinline__ void drop_by_bits(float (&x)[NS][4], uint32_t zbits, float scale) {
#pragma unroll
  for (int j = 0; j < NS; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) x[j][e] = (zbits >> (4 * j + e)) & 1u ? x[j][e] * scale : 0.f;
}

// row_bias_pairs reads the bias of score tile j of a thread's two rows in
// the C layout (element e: row g + 8·(e/2), key 8j + 2t + e%2) from a bias
// tile in shared memory whose rows are kLd floats apart (kLd even), sb
// pointing at the thread's first score (row g, key 2t): b[h] holds row
// g + 8h's two keys, each row's pair in one 8-byte read. In a tile whose
// 8-key groups are swizzled by the row (bwd_wgmma.cuh's DqBiasSwizzle),
// tile j of the thread's rows lies at group j ^ jx (jx = g); padded tiles
// take jx = 0.
template <int kLd>
__device__ __forceinline__ void row_bias_pairs(const float* sb, int j, float2 (&b)[2], int jx = 0) {
#pragma unroll
  for (int h = 0; h < 2; ++h) b[h] = *reinterpret_cast<const float2*>(sb + 8 * h * kLd + 8 * (j ^ jx));
}

// probs_dq turns S (element e of tile j: row e/2, key k0 + 8j + 2t + e%2)
// into P = exp2(scale_log2·s − lse2[row]), 0 where masked (kMasked) and the
// key lies outside the row's [lo, hi); with kMod the scores go through the
// modifiers first (modified; ar: each row's ALiBi bias over the step's keys)
// and s holds P·dsoft, the factor dS takes.
//
// kFull (the mma.sync _full kernels) adds the bias to each score before
// the exponential, from sb, the step's bias tile in shared memory (rows:
// the block's query rows, kLd floats apart; kLd even) at this thread's
// first score (row g of the warp's 16, key 2t), null without a bias; the
// tile holds zeros past the sequence and past nk, and unseen scores are
// set to 0 whatever their bias (jx: row_bias_pairs's swizzle). kSoft =
// false leaves out the softcap's derivative (the dBias kernel: the bias is
// added after the softcap).
template <typename E, bool kMod, bool kMasked, bool kCap, int NS, bool kFull = false, bool kSoft = true, int kLd = 0>
__device__ __forceinline__ void probs_dq(float (&s)[NS][4], float scale_log2, const float (&lse2)[2], int k0, int t,
                                         const int (&lo)[2], const int (&hi)[2], const Mods& md,
                                         const AlibiRow<-1> (&ar)[2], const float* sb = nullptr, int jx = 0) {
#pragma unroll
  for (int j = 0; j < NS; ++j) {
    [[maybe_unused]] float2 b[2];
    if constexpr (kFull) {
      if (sb != nullptr) row_bias_pairs<kLd>(sb, j, b, jx);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = k0 + 8 * j + 2 * t + (e & 1), h = e >> 1;
      float dsoft;
      float x = modified<E, kMod, kCap, kMasked>(s[j][e], scale_log2, md, ar[h], 8 * j + (e & 1), dsoft);
      const bool seen = !kMasked || (key >= lo[h] && key < hi[h]);
      if constexpr (kFull) {
        if (sb != nullptr) x = fmaf(e & 1 ? b[h].y : b[h].x, kLog2e, x);
      }
      float p = ex2_ftz(x - lse2[h]);
      if constexpr (kCap && kSoft) p *= dsoft;
      if (!seen) p = 0.f;
      s[j][e] = p;
    }
  }
}

}  // namespace flash
