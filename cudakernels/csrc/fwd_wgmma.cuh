// Forward pass for Hopper (sm_90a): warpgroup MMA with operands in shared
// memory, tiles brought in by bulk asynchronous copies. float32 in and out,
// operands in bf16, fp16 or tf32, fp32 accumulation and softmax.
//
// The conversions of sm90.cuh run first and write Q, K and Vᵀ into scratch
// memory as tile images: Q in tiles of 64 rows (one warpgroup's A
// operand), K in tiles of fwd_bk keys, V transposed in tiles of [DP, fwd_bk]
// (for TF32 with the keys of each group of 8 permuted as mma.cuh's
// vt_position, which makes the score accumulators the A fragment of P·V).
// Rows and keys are padded with zeros to whole tiles, columns to DP, so the
// forward never checks a bound while loading.
//
// fwd_rowblock gives each block kFwdRows query rows, 64 per warpgroup. One
// thread issues the bulk copies: Q once, then K and Vᵀ tiles into two
// stages, each with a "full" mbarrier (the bytes have landed) and an "empty"
// one (all threads arrive when done reading: an mbarrier arrive releases
// only the arriving thread's own accesses), so the copy of tile i+2
// overlaps the work on tile i+1. Per tile, each warpgroup computes
// S = Q·Kᵀ (wgmma, both operands in shared memory), the online softmax on
// the accumulators, and O += P·V with P from registers (wgmma).
//
// Variants (variants.cuh; plain and _var kernels as sm90_variants.cuh
// says). Grouped-query attention: K and Vᵀ are imaged once per key head
// and query head bh reads kv_pair(bh)'s. Masks: row i sees keys
// key_lo(i) ≤ j < key_hi(i) of SeqMask (lengths, causal, window); the block
// walks the key tiles from its first row's key_lo to its last real row's
// key_hi (both bounds are nondecreasing in the row), and a tile is masked
// element by element only where one of a thread's rows misses one of its
// keys, so whole tiles inside every row's range keep the unmasked loop.
// Padding rows and rows that see no key get O = 0 and LSE = +inf (a block
// of them walks no tile). Score modifiers: the score goes through the
// softcap and ALiBi (modified, in the log2 units the online softmax works
// in) before the mask.
//
// FP32 on tensor cores (E = mma::TF32x3, 3xTF32; plain problems at DP =
// 64, flash_fwd_wgmma_tf32x3_d64): the images hold each tile's tf32 hi
// values and then its lo values, twice the columns along K. S takes
// split_scores's products (Q_lo·K_hi, Q_hi·K_lo, Q_hi·K_hi, the small ones
// summed apart and added where finite), the softmax works in natural units
// with expf as the CUDA-core FP32 kernels do (score_exp, score_unit), P is
// split in registers (mma::put_frag) and each tile's P·V is summed on its
// own before it joins O, since the tensor cores' sums truncate.
#pragma once
#include "common.cuh"
#include "sm90.cuh"
#include "sm90_variants.cuh"

namespace flash {
namespace sm90 {

constexpr int kWarpgroups = 2;
constexpr int kFwdThreads = 128 * kWarpgroups;
constexpr int kFwdRows = 64 * kWarpgroups;  // query rows per block
constexpr int kQTileRows = 64;              // rows of a Q tile image: one warpgroup's

// fwd_bk is the key tile: 128 for 16-bit operands up to DP = 128; 64 for
// TF32 (twice the bytes per element) and at DP = 256, so that Q and two
// stages of K and Vᵀ fit in shared memory; 64 in the _full kernel with its
// bias tiles (kBias), which take shared memory too. The _drop kernel
// (dropout without a bias) has none and keeps _var's tile.
// The split type at DP = 128 (fwd_q_lo_regs) takes 32 keys a tile, half
// of an image tile (fwd_image_bk).
template <typename E, int DP, bool kBias = false> __host__ __device__ constexpr int fwd_bk() {
  if (E::kParts > 1 && DP > 64) return 32;
  return sizeof(typename E::Storage) == 4 || DP > 128 || kBias ? 64 : 128;
}
// fwd_q_lo_regs: the split type at DP = 128 holds Q's lo parts in
// registers, as the A fragments of Q_lo·K_hi, and only Q's hi image in
// shared memory: Q's two parts (128 KB) and two stages of 64-key K and Vᵀ
// tiles with theirs (256 KB) would not fit, Q hi (64 KB) and two stages of
// 32-key tiles (128 KB) do.
template <typename E, int DP> __host__ __device__ constexpr bool fwd_q_lo_regs() { return E::kParts > 1 && DP > 64; }
// fwd_image_bk is the keys of a K and Vᵀ image tile, as the conversions
// write them: fwd_bk, but 64 where fwd_q_lo_regs takes half tiles.
template <typename E, int DP, bool kBias = false> __host__ __device__ constexpr int fwd_image_bk() {
  return fwd_q_lo_regs<E, DP>() ? 64 : fwd_bk<E, DP, kBias>();
}
// Image sizes count both parts of a split type (mma::TF32x3), but Q's
// shared image only its hi part where fwd_q_lo_regs.
template <typename E, int DP> __host__ __device__ constexpr int fwd_q_bytes() {
  return kFwdRows * DP * (fwd_q_lo_regs<E, DP>() ? 1 : E::kParts) * static_cast<int>(sizeof(typename E::Storage));
}
// A K tile and a Vᵀ tile have the same size.
template <typename E, int DP, bool kBias = false> __host__ __device__ constexpr int fwd_kv_bytes() {
  return fwd_bk<E, DP, kBias>() * DP * E::kParts * static_cast<int>(sizeof(typename E::Storage));
}
// fwd_bias_ld is the row stride, in floats, of the _full kernel's bias
// tiles [kFwdRows, fwd_bk]: ≡ 8 words (mod 32), so that the 8-byte reads of
// a warp's 8 rows × 4 lanes take the two wavefronts their 256 bytes need.
template <typename E, int DP> __host__ __device__ constexpr int fwd_bias_ld() { return fwd_bk<E, DP, true>() + 8; }
// fwd_smem_bytes: up to 1024 bytes to align the tiles, Q, two K and two Vᵀ
// stages, with kBias (the _full kernel) two bias tiles (fp32), five
// mbarriers. select.go repeats it (wgmmaFwdSmem).
template <typename E, int DP, bool kBias = false> __host__ __device__ constexpr int fwd_smem_bytes() {
  return 1024 + fwd_q_bytes<E, DP>() + 4 * fwd_kv_bytes<E, DP, kBias>() +
         (kBias ? 2 * kFwdRows * fwd_bias_ld<E, DP>() * 4 : 0) + 5 * 8;
}

// fwd_body is fwd_rowblock for head bh of mask mk (the plain kernel's mask
// too: its rows see keys from 0, so only the upper bounds are compared) and
// score modifiers md (kVar only); blk is the block's place in the grid's
// pair-major order, bh·q_tiles + tile (kVar only: block_order's; the plain
// kernel's is blockIdx.x). kFull (with kVar: the _full kernel) adds the
// bias and dropout as the mma.sync _full forward does: every thread copies
// its share of the next key tile's bias into the other of two shared tiles
// with cp.async while this tile is computed, the bias joins each score
// after the modifiers, dropout zeroes dropped probabilities after they
// entered the row sum, and the epilogue scales O by 1/(1−p). kBias: the
// bias tiles (the _full kernel); without them (the _drop kernel) kFull
// computes dropout alone.
template <typename E, int DP, bool kVar, bool kFull = false, bool kBias = kFull>
__device__ __forceinline__ void fwd_body(const Params& p, long long bh, long long blk, const SeqMask& mk,
                                         const Mods& md) {
  static_assert(kVar || !kFull, "the _full kernel computes the _var variants too");
  static_assert(kFull || !kBias, "the bias tiles belong to the _full kernel");
  static_assert(E::kParts == 1 || !kVar, "the split type computes plain problems");
  using S = typename E::Storage;
  constexpr bool kSplit = E::kParts > 1;
  constexpr bool kQLoRegs = fwd_q_lo_regs<E, DP>();
  constexpr int kW = DP * E::kParts;  // image columns
  const long long nq = p.nq, nk = p.nk;
  const S* __restrict__ q = static_cast<const S*>(p.q);
  const S* __restrict__ k = static_cast<const S*>(p.k);
  const S* __restrict__ vt = static_cast<const S*>(p.v);
  constexpr int BK = fwd_bk<E, DP, kBias>(), kImageBK = fwd_image_bk<E, DP, kBias>();
  constexpr int kQBytes = fwd_q_bytes<E, DP>(), kKVBytes = fwd_kv_bytes<E, DP, kBias>();
  constexpr int kBiasLd = fwd_bias_ld<E, DP>(), kBiasTile = kFwdRows * kBiasLd;  // floats
  constexpr int kNS = BK / 8;  // n8 tiles of scores per warp
  constexpr int kNO = DP / 8;  // n8 tiles of output per warp
  const float kInf = Math<float>::inf();

  // Shared memory: Q, K stages 0 and 1, Vᵀ stages 0 and 1, (kBias) bias
  // tiles 0 and 1, then the mbarriers full[2], empty[2] and q_full.
  const uint32_t sQ = (smem_addr(smem) + 1023u) & ~1023u;
  const uint32_t sK = sQ + kQBytes, sV = sK + 2 * kKVBytes, sB = sV + 2 * kKVBytes;
  const uint32_t bars = sB + (kBias ? 2 * kBiasTile * 4 : 0);
  [[maybe_unused]] float* const bias_tiles = reinterpret_cast<float*>(smem + (sB - smem_addr(smem)));
  auto full = [&](int stage) { return bars + 8 * stage; };
  auto empty = [&](int stage) { return bars + 16 + 8 * stage; };
  const uint32_t q_full = bars + 32;

  const long long q_tiles = (nq + kFwdRows - 1) / kFwdRows;
  const long long q0 = (kVar ? blk : blockIdx.x) % q_tiles * kFwdRows;
  const long long k_head = (nk + kImageBK - 1) / kImageBK * kImageBK * kW;  // elements of a key head's image
  // Block skipping: the block's rows see keys from its first row's first
  // (plain: 0) to its last real row's last, the bounds being nondecreasing
  // in the row; a block of padding rows sees none and only writes O = 0 and
  // LSE = +inf. Tiles t0 … t0 + n_tiles − 1.
  long long kv_begin = 0, kv_end = 0;
  if (q0 < mk.lq) {
    kv_begin = mk.key_lo(q0);
    kv_end = mk.key_hi((q0 + kFwdRows < mk.lq ? q0 + kFwdRows : mk.lq) - 1);
  }
  const int t0 = kVar ? static_cast<int>(kv_begin / BK) : 0;
  const int n_tiles = static_cast<int>((kv_end + BK - 1) / BK) - t0;
  const int wg = warp_uniform(threadIdx.x / 128), warp = warp_uniform(threadIdx.x / 32 % 4), lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  if constexpr (kVar) {
    // No row sees a key (padding rows, or a window past every key): O = 0
    // and LSE = +inf, before any barrier or copy (the Q image of padding
    // rows is not even written: to_image_rows_len).
    if (kv_end <= kv_begin) {
      const long long row_end = q0 + kFwdRows < nq ? q0 + kFwdRows : nq;
      zero_rows<kFwdThreads>(head_of(static_cast<float*>(p.o), bh, p.h, p.o_batch_stride, p.o_head_stride), q0,
                             row_end, p.dim, p.o_row_stride);
      for (long long r = q0 + threadIdx.x; r < row_end; r += kFwdThreads)
        static_cast<float*>(p.lse)[bh * nq + r] = kInf;
      return;
    }
  }

  if (threadIdx.x == 0) {
    mbar_init(full(0), 1);
    mbar_init(full(1), 1);
    mbar_init(empty(0), kFwdThreads);
    mbar_init(empty(1), kFwdThreads);
    mbar_init(q_full, 1);
    mbar_fence_init();
  }
  __syncthreads();
  // Grouped-query attention: the K and Vᵀ images hold one head per key
  // head, which every query head of its group reads.
  const long long kvh = kVar ? kv_pair(p, bh) : bh;
  const typename E::Storage* kh = k + kvh * k_head;
  const typename E::Storage* vh = vt + kvh * k_head;
  auto load_kv = [&](int stage, int tile) {
    mbar_arrive_expect_tx(full(stage), 2 * kKVBytes);
    if constexpr (kQLoRegs) {
      // Half h of image tile t2: in each of K's panels (64 rows of 128
      // bytes) rows 32h … 32h + 31, which keep their swizzle as a panel of
      // 32 rows; of Vᵀ's panels (DP rows of 32 keys: keys 0–31 hi, 32–63
      // hi, 0–31 lo, 32–63 lo) the hi and lo ones of its keys.
      constexpr int kPanel = 32 * 32;  // elements of a 32-row, 128-byte-wide K panel
      const long long t2 = tile / 2, h = tile % 2;
      const typename E::Storage* ks = kh + t2 * kImageBK * kW + h * kPanel;
#pragma unroll
      for (int pn = 0; pn < kW / 32; ++pn)
        bulk_copy(sK + stage * kKVBytes + pn * kPanel * 4, ks + pn * 2 * kPanel, kPanel * 4, full(stage));
      const typename E::Storage* vs = vh + t2 * kImageBK * kW + h * DP * 32;
      bulk_copy(sV + stage * kKVBytes, vs, DP * 32 * 4, full(stage));
      bulk_copy(sV + stage * kKVBytes + DP * 32 * 4, vs + 2 * DP * 32, DP * 32 * 4, full(stage));
    } else {
      bulk_copy(sK + stage * kKVBytes, kh + static_cast<long long>(tile) * BK * kW, kKVBytes, full(stage));
      bulk_copy(sV + stage * kKVBytes, vh + static_cast<long long>(tile) * BK * kW, kKVBytes, full(stage));
    }
  };
  // kBias: the bias tile of key tile t0 + i goes into buffer i % 2; the
  // first comes with Q.
  [[maybe_unused]] const Extras ex = kFull ? extras_of(p, bh) : Extras{};
  [[maybe_unused]] const bool bias_aligned = kBias && mma::bias_tile_aligned(ex.bias, nk);
  auto load_bias = [&](int buf, long long k0) {
    mma::cp_bias_tile<kFwdRows, BK, kBiasLd, kFwdThreads>(bias_tiles + buf * kBiasTile, ex.bias, q0, mk.lq, k0, nk,
                                                          bias_aligned);
    mma::cp_async_commit();
  };
  if constexpr (kBias) {
    if (ex.bias != nullptr && n_tiles > 0) load_bias(0, static_cast<long long>(t0) * BK);
  }
  // The block's Q image: its two 64-row tiles, each the hi panels and
  // then the lo ones.
  const S* const q_blk = q + (kVar ? blk : blockIdx.x) * static_cast<long long>(kFwdRows) * kW;
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(q_full, kQBytes);
    if constexpr (kQLoRegs) {
      // The hi half of each tile.
      for (int w = 0; w < kWarpgroups; ++w)
        bulk_copy(sQ + w * kQBytes / kWarpgroups, q_blk + w * kQTileRows * kW, kQBytes / kWarpgroups, q_full);
    } else {
      bulk_copy(sQ, q_blk, kQBytes, q_full);
    }
    for (int s = 0; s < 2 && s < n_tiles; ++s) load_kv(s, t0 + s);
  }

  // Rows of this thread: g and g + 8 of its warp's 16, and the keys each
  // sees, lo[r] ≤ j < vis[r] (row_keys: 0 and 0 for none), found once here:
  // the loop then compares key indices with registers instead of redoing
  // the mask per tile.
  auto row_of = [&](int r) { return q0 + wg * 64 + warp * 16 + g + 8 * r; };
  long long vis[2], lo[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) row_keys(mk, row_of(r), lo[r], vis[r]);
  // A tile needs no mask when both rows see all its keys: plain, the tiles
  // below the fewer keys either row sees; _var, loop steps u_lo … u_hi − 1.
  const int n_unmasked = static_cast<int>((vis[0] < vis[1] ? vis[0] : vis[1]) / BK);
  const long long lo_max = lo[0] > lo[1] ? lo[0] : lo[1];
  const int u_lo = static_cast<int>((lo_max + BK - 1) / BK) - t0, u_hi = n_unmasked - t0;
  // The _var masks in 32 bits (keys and rows fit: kernels.MaxElements).
  const int lo32[2] = {static_cast<int>(lo[0]), static_cast<int>(lo[1])};
  const int hi32[2] = {static_cast<int>(vis[0]), static_cast<int>(vis[1])};

  // The scores' unit: log2, or for the split type natural (score_unit).
  const float scale_log2 = score_unit<E::kExact>(p.scale);
  float m[2] = {-kInf, -kInf}, l[2] = {0.f, 0.f};  // l: this thread's partial sums
  float acc[kNO][4];
#pragma unroll
  for (int n = 0; n < kNO; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  const uint64_t q_desc = desc_sw128(sQ + wg * (kQBytes / kWarpgroups));
  // kQLoRegs: Q_lo·K_hi's A fragments, k-slice kc of this thread's rows
  // (warp·16 + g, + 8) and columns (8kc + t, + 4), read from the lo
  // panels of the warpgroup's Q tile in global memory.
  [[maybe_unused]] uint32_t q_lo[kQLoRegs ? DP / E::kK : 1][4];
  if constexpr (kQLoRegs) {
    const S* tile = q_blk + wg * kQTileRows * kW;
    const int r0 = warp * 16 + g;
#pragma unroll
    for (int kc = 0; kc < DP / E::kK; ++kc)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = r0 + 8 * (i & 1), c = DP + 8 * kc + t + 4 * (i >> 1);  // image column of the lo value
        q_lo[kc][i] = __float_as_uint(tile[image_chunk(r, c / 4, kQTileRows) * 4 + c % 4]);
      }
  }
  mbar_wait(q_full, 0);

  for (int it = 0; it < n_tiles; ++it) {
    const int stage = it & 1;
    const unsigned parity = (it >> 1) & 1;
    const long long k0 = static_cast<long long>(t0 + it) * BK;
    if constexpr (kBias) {
      if (ex.bias != nullptr) {
        // This tile's bias has landed for every thread, and every thread is
        // done with the last tile's buffer, which takes the next one.
        mma::cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < n_tiles) load_bias((it + 1) & 1, k0 + BK);
      }
    }
    mbar_wait(full(stage), parity);

    // S = Q·Kᵀ: 64 rows × BK keys per warpgroup.
    float s[kNS][4];
    [[maybe_unused]] float small[kNS][4];
    const uint64_t k_desc = desc_sw128(sK + stage * kKVBytes);
    wgmma_fence();
    [[maybe_unused]] float rest[kNS][4];  // kQLoRegs: the big products' second chain (big_rest)
    if constexpr (kQLoRegs) {
      split_scores_rs<E, BK, DP / E::kK>(reinterpret_cast<float(&)[BK / 2]>(s),
                                         reinterpret_cast<float(&)[BK / 2]>(small), q_lo, q_desc, kQTileRows, k_desc,
                                         BK);
      big_rest<E, BK, DP / E::kK>(rest, q_desc, kQTileRows, k_desc, BK);
    } else if constexpr (kSplit) {
      split_scores<E, BK, DP / E::kK, true>(reinterpret_cast<float(&)[BK / 2]>(s),
                                            reinterpret_cast<float(&)[BK / 2]>(small), q_desc, kQTileRows, k_desc, BK);
    } else {
#pragma unroll
      for (int kc = 0; kc < DP / E::kK; ++kc)
        Wgmma<E, BK>::ss(reinterpret_cast<float(&)[BK / 2]>(s), desc_advance(q_desc, k_slice_offset(kc, kQTileRows)),
                         desc_advance(k_desc, k_slice_offset(kc, BK)), kc > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    if constexpr (kQLoRegs) {
      static_assert(halved_big<DP / E::kK>(), "the forward with Q's lo parts in registers takes two chains");
      add_small(s, small);
      add_rest(s, rest);
    } else if constexpr (kSplit) {
      static_assert(!halved_big<DP / E::kK>(), "two chains need big_rest");
      add_small(s, small);
    }

    // Online softmax in log2 units, as in fwd_mma.cuh: element e of tile j
    // is row e/2, key k0 + 8j + 2t + (e & 1).
    const bool masked = kVar ? it < u_lo || it >= u_hi : it >= n_unmasked;
    if constexpr (!kVar) {
      with_mask(masked, [&](auto kMasked) {
#pragma unroll
        for (int j = 0; j < kNS; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[j][e] *= scale_log2;
            if (kMasked && k0 + j * 8 + 2 * t + (e & 1) >= vis[e / 2]) s[j][e] = -kInf;
          }
      });
    } else {
      // The modifiers act on the scaled score before the mask (modified).
      // ALiBi: the bias of each row over this tile (a − k0 − 2t: the
      // distance at column offset 0); a row crossing its diagonal takes the
      // masked copy.
      AlibiRow<-1> ar[2];
      bool uniform = true;
      if (md.slope_l2 != 0.f) {
#pragma unroll
        for (int r = 0; r < 2; ++r)
          uniform &= ar[r].set(offset_of(row_of(r), md.shift, k0) - 2 * t, BK - 7, md.slope_l2);
      }
      // kFull: this thread's first score in the tile's bias (row g of its
      // warp's 16, key 2t), null without a bias; masked scores become −inf
      // whatever their bias.
      [[maybe_unused]] const float* sb = nullptr;
      if constexpr (kBias) {
        if (ex.bias != nullptr) sb = bias_tiles + (it & 1) * kBiasTile + (wg * 64 + warp * 16 + g) * kBiasLd + 2 * t;
      }
      with_variant_of<kFull>(masked || !uniform, md.on, md.capped, [&](auto kMasked, auto kMod, auto kCap) {
#pragma unroll
        for (int j = 0; j < kNS; ++j) {
          [[maybe_unused]] float2 b[2];
          if constexpr (kBias) {
            if (sb != nullptr) row_bias_pairs<kBiasLd>(sb, j, b);
          }
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float dsoft;
            float x = modified<E, kMod, kCap, kMasked>(s[j][e], scale_log2, md, ar[e / 2], 8 * j + (e & 1), dsoft);
            if constexpr (kBias) {
              if (sb != nullptr) x = fmaf(e & 1 ? b[e / 2].y : b[e / 2].x, kLog2e, x);
            }
            const int key = static_cast<int>(k0) + j * 8 + 2 * t + (e & 1);
            if (kMasked && (key < lo32[e / 2] || key >= hi32[e / 2])) x = -kInf;
            s[j][e] = x;
          }
        }
      });
    }
    float ref[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float v[kNS];
#pragma unroll
      for (int j = 0; j < kNS; ++j) v[j] = fmaxf(s[j][2 * r], s[j][2 * r + 1]);
      float mx = tree_reduce(v, [](float a, float b) { return fmaxf(a, b); });
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      // A row with no visible key so far keeps m = −inf; its reference is 0.
      ref[r] = m_new == -kInf ? 0.f : m_new;
      const float alpha = score_exp<E::kExact>(m[r] - ref[r]);
      m[r] = m_new;
      if (alpha != 1.f) {
        l[r] *= alpha;
#pragma unroll
        for (int n = 0; n < kNO; ++n) acc[n][2 * r] *= alpha, acc[n][2 * r + 1] *= alpha;
      }
    }
#pragma unroll
    for (int j = 0; j < kNS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = score_exp<E::kExact>(s[j][e] - ref[e / 2]);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float part[kNS];
#pragma unroll
      for (int j = 0; j < kNS; ++j) part[j] = s[j][2 * r] + s[j][2 * r + 1];
      l[r] += tree_reduce(part, [](float a, float b) { return a + b; });
    }
    if constexpr (kFull) {
      if (ex.drop.on()) {
        const long long rows[2] = {row_of(0), row_of(1)};
        drop_by_row(s, ex, rows, k0, t, 1.f);
      }
    }

    // O += P·V: P from the score registers, E::kK keys per wgmma (the
    // split type's tile summed apart: step_product).
    uint32_t p[mma::frag_count<E, BK>()][4];
#pragma unroll
    for (int kk = 0; kk < BK / E::kK; ++kk) mma::put_frag<E>(p, s, kk);
    const uint64_t v_desc = desc_sw128(sV + stage * kKVBytes);
    if constexpr (kQLoRegs) {
      // In two halves of 64 columns, each summed apart (step_product), so
      // that the partial sum takes 32 registers, not 64, beside Q's lo
      // fragments.
      static_assert(DP == 128, "two halves of 64 columns");
#pragma unroll
      for (int h = 0; h < 2; ++h)
        step_product<E, 64, 0>(reinterpret_cast<float(&)[8][4]>(acc[8 * h]), [&](auto& c) {
          rs_product<E, 64, BK / E::kK>(reinterpret_cast<float(&)[32]>(c), p, desc_advance(v_desc, h * 64 * 128), DP);
        });
    } else {
      step_product<E, DP, 0>(acc, [&](auto& c) {
        rs_product<E, DP, BK / E::kK>(reinterpret_cast<float(&)[DP / 2]>(c), p, v_desc, DP);
      });
    }

    // This thread is done with the stage; once all are, tile it + 2 goes
    // there.
    mbar_arrive(empty(stage));
    if (threadIdx.x == 0 && it + 2 < n_tiles) {
      mbar_wait(empty(stage), parity);
      load_kv(stage, t0 + it + 2);
    }
  }
  if constexpr (kBias) mma::cp_async_wait<0>();  // nothing may still be landing in shared memory at exit

  // Epilogue: O = acc / l and LSE, row by row; rows that see no key get
  // O = 0 and LSE = +inf.
  if constexpr (!kVar) {
#pragma unroll
    for (int r = 0; r < 2; ++r) finish_row<kNO, E::kExact>(p, bh, row_of(r), vis[r] > 0, acc, r, m[r], l[r]);
  } else {
    // As finish_row, with O stored through the warpgroup's Q tile
    // (store_wg_rows), which its last S = Q·Kᵀ is done reading.
    // Dropout's factor 1/(1−p) in float32 here, as finish_row's o_scale.
    float inv[2];
    finish_wg_rows(p, bh, nq, row_of(0), vis, m, l, kFull && ex.drop.on() ? ex.drop_scale() : 1.f, t, inv);
    float* o = head_of(static_cast<float*>(p.o), bh, p.h, p.o_batch_stride, p.o_head_stride);
    constexpr int kWgQBytes = kQTileRows * DP * static_cast<int>(sizeof(typename E::Storage));
    store_wg_rows<DP, kWgQBytes>(o, p.o_row_stride, q0 + wg * 64, nq, p.dim, sQ + wg * kWgQBytes, acc, inv, wg,
                                 rows_vec(o, p.o_row_stride, p.dim));
  }
}

// fwd_rowblock reads the images p.q, p.k and p.v (Vᵀ) and writes p.o and
// p.lse. kVar: the _var entry point (every variant; see sm90_variants.cuh);
// kFull with it: the _full one, which adds the bias and dropout, or with
// kBias false the _drop one, dropout without a bias (it traps on a bias).
template <typename E, int DP, bool kVar, bool kFull = false, bool kBias = kFull>
__device__ void fwd_rowblock(const Params& p) {
  require_launch(kFwdThreads, fwd_smem_bytes<E, DP, kBias>());
  if constexpr (kFull && !kBias) {
    if (p.bias != nullptr) __trap();
  }
  if constexpr (!kVar) {
    const long long bh = blockIdx.x / ((p.nq + kFwdRows - 1) / kFwdRows);
    const SeqMask mk = seq_mask(p, bh);
    require_plain(p);
    fwd_body<E, DP, false>(p, bh, 0, mk, Mods{});
  } else {
    // Longest blocks first (block_order): with a right bound (causal) the
    // last rows see the most keys.
    const long long q_tiles = (p.nq + kFwdRows - 1) / kFwdRows;
    long long bh, tile;
    block_order(blockIdx.x, static_cast<unsigned>(q_tiles), p.mask_right >= 0, bh, tile);
    const SeqMask mk = seq_mask(p, bh);
    fwd_body<E, DP, true, kFull, kBias>(p, bh, bh * q_tiles + tile, mk,
                          mods_of(score_mod<float>(p, bh, mk), static_cast<float>(p.scale)));
  }
}

}  // namespace sm90
}  // namespace flash
