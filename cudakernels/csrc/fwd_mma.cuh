// Forward pass on tensor cores (mma.sync, sm_80+): float32 in and out,
// operands in bf16, fp16 or tf32, fp32 accumulation and softmax.
//
// Conversion kernels run first. to_storage_padded converts Q, K and V (Q
// and K for TF32) once into scratch buffers of the operand type with rows
// padded to DP columns (zeros past dim), so every row is 16-byte aligned and
// the forward never checks columns; for TF32, to_vt_tf32 writes V transposed
// with its keys permuted (mma.cuh explains why). fwd_1rowblock then gives each block of kFwdWarps warps fwd_bq
// query rows, fwd_mt m16 tiles per warp that share every K and V fragment
// read from shared memory, and walks key tiles of BK rows: tiles
// are copied into shared memory by cp.async (K and V double buffered, the
// next tile landing while this one computes) and operand fragments are read
// with ldmatrix (.trans for V). Scores live only in registers: S = Q·Kᵀ as
// mma accumulators, the online softmax on those registers, then P re-packed
// as the A operand of O += P·V.
#pragma once
#include "common.cuh"
#include "mma.cuh"
#include "tc_variants.cuh"

namespace flash {
namespace mma {

constexpr int kFwdWarps = 4;
constexpr int kFwdThreads = 32 * kFwdWarps;

// fwd_mt is the number of m16 tiles (16 query rows each) per warp: two, which
// share every K and V fragment read from shared memory, up to DP = 128; one
// at DP = 256, where two would need 256 fp32 output accumulators per thread.
// The _full kernel (kFull) takes one at every DP: its bias tile in shared
// memory (fwd_bias_ld) then fits beside the others with two blocks per
// SM, and its registers, which its bias and dropout fill, fit without
// spilling. fwd_bq is a block's query rows. select.go repeats both
// (mmaFwdRows).
template <int DP, bool kFull = false> __host__ __device__ constexpr int fwd_mt() {
  return DP > 128 || kFull ? 1 : 2;
}
template <int DP, bool kFull = false> __host__ __device__ constexpr int fwd_bq() {
  return 16 * fwd_mt<DP, kFull>() * kFwdWarps;
}

// Row stride of the shared tiles in elements of type S: 16 bytes of
// padding make the stride ≡ 16 bytes (mod 128), so the 8 row addresses of
// one ldmatrix 8×8 matrix fall in 8 different 16-byte bank groups.
template <typename S, int COLS> __host__ __device__ constexpr int ld_of() {
  return COLS + 16 / static_cast<int>(sizeof(S));
}

// fwd_bk is the key tile: 64, or 32 for TF32 above DP = 64, whose 32-bit
// tiles would otherwise not fit shared memory next to a 128-row Q tile.
template <typename E, int DP> __host__ __device__ constexpr int fwd_bk() {
  return sizeof(typename E::Storage) == 4 && DP > 64 ? 32 : 64;
}

// A V tile in elements: [BK keys, DP] padded like the others, or for TF32
// the transposed [DP, BK keys] with rows padded by 16 bytes.
template <typename E, int DP> __host__ __device__ constexpr int fwd_v_tile() {
  using S = typename E::Storage;
  return E::kVTransposed ? DP * ld_of<S, fwd_bk<E, DP>()>() : fwd_bk<E, DP>() * ld_of<S, DP>();
}

// fwd_bias_ld is the row stride, in floats, of the _full kernel's bias
// tile [fwd_bq rows, BK keys]: 8 floats of padding make it ≡ 8 words (mod
// 32), so that the float2 reads of a warp's 8 rows × 4 lanes take the two
// wavefronts their 256 bytes need.
template <typename E, int DP> __host__ __device__ constexpr int fwd_bias_ld() { return fwd_bk<E, DP>() + 8; }

// fwd_smem_bytes is the shared-memory layout: Q, then two K and two V
// buffers, and for kFull one bias tile (fp32). select.go repeats it
// (mmaFwdSmem).
template <typename E, int DP, bool kFull = false> __host__ __device__ constexpr int fwd_smem_bytes() {
  using S = typename E::Storage;
  return ((fwd_bq<DP, kFull>() + 2 * fwd_bk<E, DP>()) * ld_of<S, DP>() + 2 * fwd_v_tile<E, DP>()) * sizeof(S) +
         (kFull ? fwd_bq<DP, kFull>() * fwd_bias_ld<E, DP>() * 4 : 0);
}

// to_storage_padded writes y[r, c] = round(x[r, c]) for c < dim and 0 for
// dim ≤ c < dp, rows r < rows: x is [rows, dim] fp32, y is [rows, dp] of
// E's storage type. Each thread converts 16 bytes' worth of elements.
template <typename E>
__device__ void to_storage_padded(const float* __restrict__ x, uint4* __restrict__ y, long long rows, long long dim,
                                  long long dp) {
  constexpr int kVec = StorageOf<E>::kVec;
  const long long chunks = dp / kVec, n = rows * chunks;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const long long r = i / chunks, c0 = (i % chunks) * kVec;
    float f[kVec];
    load_chunk(f, x + r * dim + c0, true, c0, dim);
    y[i] = StorageOf<E>::convert(f);
  }
}

// to_vt_tf32 writes the TF32 copy of V transposed: y[bh, d, vt_position(j)]
// = round(x[bh, j, d]) for j < nk and d < dim, zero elsewhere; y is
// [bh, dp, nkp] with nkp = nk rounded up to 8. Tiles of 32 keys × 32 columns
// go through shared memory so that reads and writes are both coalesced;
// blocks are 32 × 8 threads and stride over the tiles.
__device__ void to_vt_tf32(const float* __restrict__ x, float* __restrict__ y, long long bhs, long long nk,
                           long long dim, long long dp) {
  __shared__ float tile[32][33];
  const long long nkp = (nk + 7) / 8 * 8;
  const long long key_tiles = (nkp + 31) / 32, d_tiles = dp / 32;
  const long long n = bhs * key_tiles * d_tiles;
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  for (long long b = blockIdx.x; b < n; b += gridDim.x) {
    const long long bh = b / (key_tiles * d_tiles);
    const long long j0 = (b / d_tiles) % key_tiles * 32, d0 = b % d_tiles * 32;
    for (int i = ty; i < 32; i += 8) {
      const long long j = j0 + i, d = d0 + tx;
      tile[i][tx] = j < nk && d < dim ? x[(bh * nk + j) * dim + d] : 0.f;
    }
    __syncthreads();
    for (int i = ty; i < 32; i += 8) {
      const long long d = d0 + i, j = j0 + tx;
      if (j < nkp) y[(bh * dp + d) * nkp + vt_position(j)] = TF32::round(tile[tx][i]);
    }
    __syncthreads();
  }
}

// cp_rows starts copying rows [r0, r0+ROWS) of a [n, DP] matrix of S into a
// [ROWS, ld_of<S, DP>] shared tile, zero-filling rows past n.
template <int ROWS, int DP, typename S>
__device__ __forceinline__ void cp_rows(S* dst, const S* src, long long r0, long long n) {
  constexpr int kVec = 16 / sizeof(S);
  constexpr int kChunks = DP / kVec;  // 16-byte chunks per row
  for (int c = threadIdx.x; c < ROWS * kChunks; c += kFwdThreads) {
    const int r = c / kChunks, col = c % kChunks * kVec;
    const bool ok = r0 + r < n;
#ifdef FLASH_EMU  // cp_async16 gives the same copy, but other PTX
    cp_async16(dst + r * ld_of<S, DP>() + col, ok ? src + (r0 + r) * DP + col : src, ok);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst + r * ld_of<S, DP>() + col)),
                 "l"(ok ? src + (r0 + r) * DP + col : src), "r"(ok ? 16 : 0));
#endif
  }
}

// cp_cols starts copying columns [c0, c0+COLS) of a [ROWS, n] matrix of S
// (n a multiple of 16 bytes' worth of elements) into a [ROWS,
// ld_of<S, COLS>] shared tile, zero-filling columns past n.
template <int ROWS, int COLS, typename S>
__device__ __forceinline__ void cp_cols(S* dst, const S* src, long long c0, long long n) {
  constexpr int kVec = 16 / sizeof(S);
  constexpr int kChunks = COLS / kVec;
  for (int c = threadIdx.x; c < ROWS * kChunks; c += kFwdThreads) {
    const int r = c / kChunks, col = c % kChunks * kVec;
    const bool ok = c0 + col < n;
#ifdef FLASH_EMU
    cp_async16(dst + r * ld_of<S, COLS>() + col, ok ? src + r * n + c0 + col : src, ok);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst + r * ld_of<S, COLS>() + col)),
                 "l"(ok ? src + r * n + c0 + col : src), "r"(ok ? 16 : 0));
#endif
  }
}

// query_block returns the query pair bh and first row q0 of this block of
// a grid over blocks of ROWS query rows (forward, dQ). _var: longest blocks
// first (block_order; with a right bound, causal, the last rows see the
// most keys). Plain: pair-major, the plain kernel checking first that it
// computes the problem (require_plain: the mma.sync plain kernels compute
// the causal mask alone).
template <bool kVar, int ROWS>
__device__ __forceinline__ void query_block(const Params& p, long long& bh, long long& q0) {
  const long long tiles = (p.nq + ROWS - 1) / ROWS;
  if constexpr (kVar) {
    long long tile;
    block_order(blockIdx.x, static_cast<unsigned>(tiles), p.mask_right >= 0, bh, tile);
    q0 = tile * ROWS;
  } else {
    require_plain<false>(p);
    bh = blockIdx.x / tiles;
    q0 = (blockIdx.x % tiles) * ROWS;
  }
}

// fwd_1rowblock reads the converted copies p.q, p.k and p.v (rows of DP
// elements, V transposed for TF32) and writes p.o and p.lse. kVar: the _var
// entry point, which computes every variant of tc_variants.cuh (grouped
// heads, lengths, windows, softcap, ALiBi); the plain one (kVar = false)
// computes the causal mask alone and traps on the others (require_plain),
// so that its code stays as it was tuned. In the _var kernel query head bh
// reads the K and V copies of key head kv_pair(bh) (converted once per key
// head); each row sees keys key_lo ≤ j < key_hi of its SeqMask, the block
// walks the key tiles from its first row's key_lo to its last real row's
// key_hi, and a tile is masked element by element only for the threads one
// of whose rows misses one of its keys; the scores go through the
// modifiers (modified, in log2 units) before the mask. Copies of padding
// rows and keys load as zeros. Blocks run longest first (block_order).
// kFull (with kVar: the _full entry point) adds the bias to every visible
// score after the modifiers, and with dropout zeroes the dropped
// probabilities that meet V after l has summed them (the softmax is over
// every visible key; dropout drops from its result), finish_row applying
// the factor 1/(1−p) to O.
template <typename E, int DP, bool kVar, bool kFull = false>
__device__ void fwd_1rowblock(const Params& p) {
  static_assert(kVar || !kFull, "the _full kernels compute the _var variants too");
  using S = typename E::Storage;
  const long long nq = p.nq, nk = p.nk;
  const bool causal = p.causal != 0;
  const S* __restrict__ q = static_cast<const S*>(p.q);
  const S* __restrict__ k = static_cast<const S*>(p.k);
  const S* __restrict__ v = static_cast<const S*>(p.v);
  constexpr int BK = fwd_bk<E, DP>();
  constexpr int kVec = 16 / sizeof(S);  // elements per 16 bytes
  constexpr int kLd = ld_of<S, DP>();
  constexpr int kLdVt = ld_of<S, BK>();  // TF32's transposed V tile
  constexpr int kFwdMT = fwd_mt<DP, kFull>();
  constexpr int kFwdBQ = fwd_bq<DP, kFull>();
  constexpr int kBiasLd = fwd_bias_ld<E, DP>();
  constexpr int kNS = BK / 8;  // n8 tiles of scores per m16 tile
  constexpr int kNO = DP / 8;  // n8 tiles of output per m16 tile
  constexpr int kR = 2 * kFwdMT;  // rows per thread: g and g+8 of each m16 tile
  static_assert(kNS % 2 == 0 && kNO % 2 == 0, "ldmatrix.x4 loads two n8 tiles");
  require_launch(kFwdThreads, fwd_smem_bytes<E, DP, kFull>());

  S* sQ = reinterpret_cast<S*>(smem);
  S* sK = sQ + kFwdBQ * kLd;  // 2 buffers
  S* sV = sK + 2 * BK * kLd;  // 2 buffers of fwd_v_tile elements
  [[maybe_unused]] float* sB = reinterpret_cast<float*>(sV + 2 * fwd_v_tile<E, DP>());  // kFull: the bias tile

  long long bh, q0;
  query_block<kVar, kFwdBQ>(p, bh, q0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  // The variants: the batch entry's mask (its real rows lq and keys lk
  // bound the copies: rows past them load as zeros), the key head, the
  // modifiers.
  const SeqMask mk = seq_mask(p, bh);
  const long long q_real = kVar ? mk.lq : nq, k_real = kVar ? mk.lk : nk;
  const long long kvh = kVar ? kv_pair(p, bh) : bh;
  const S* kh = k + kvh * nk * DP;
  // V is [nk, DP] per head, or for TF32 the transposed [DP, nkp].
  const long long nkp = (nk + 7) / 8 * 8;
  const S* vh = E::kVTransposed ? v + kvh * DP * nkp : v + kvh * nk * DP;
  auto load_v = [&](S* dst, long long k0) {
    if constexpr (E::kVTransposed) {
      cp_cols<DP, BK>(dst, vh, k0, nkp);
    } else {
      cp_rows<BK, DP>(dst, vh, k0, k_real);
    }
  };

  // Row r of this thread: m16 tile r/2 of the warp, row g (+8 for odd r).
  // Recomputed where needed rather than held in registers.
  auto row_of = [&](int r) { return q0 + (warp * kFwdMT + r / 2) * 16 + g + (r % 2) * 8; };
  auto vis_of = [&](int r) {
    const long long row = row_of(r);
    return row < nq ? visible_keys(row, nq, nk, causal) : 0;
  };
  // The fewest keys any of the thread's rows sees: visible_keys is
  // nondecreasing in the row and r orders the rows, but rows past nq see
  // none.
  const long long n_vis_min = row_of(kR - 1) >= nq ? 0 : vis_of(0);
  // Block skipping: the block's rows see keys from its first row's first
  // (plain: 0) to its last real row's last, both bounds nondecreasing in
  // the row; tiles t0 … t0 + n_tiles − 1.
  long long kv_begin = 0, kv_end = 0;
  if constexpr (kVar) {
    if (q0 < mk.lq) {
      kv_begin = mk.key_lo(q0);
      kv_end = mk.key_hi((q0 + kFwdBQ < mk.lq ? q0 + kFwdBQ : mk.lq) - 1);
    }
    // No row sees a key (padding rows, or a window past every key): O = 0
    // and LSE = +inf, before any copy.
    if (kv_end <= kv_begin) {
      const long long row_end = q0 + kFwdBQ < nq ? q0 + kFwdBQ : nq;
      zero_rows<kFwdThreads>(head_of(static_cast<float*>(p.o), bh, p.h, p.o_batch_stride, p.o_head_stride), q0,
                             row_end, p.dim, p.o_row_stride);
      for (long long r = q0 + threadIdx.x; r < row_end; r += kFwdThreads)
        static_cast<float*>(p.lse)[bh * nq + r] = Math<float>::inf();
      return;
    }
  } else {
    kv_end = visible_keys((q0 + kFwdBQ < nq ? q0 + kFwdBQ : nq) - 1, nq, nk, causal);
  }
  const int t0 = static_cast<int>(kv_begin / BK);
  const int n_tiles = static_cast<int>((kv_end + BK - 1) / BK) - t0;
  // The _var masks: the keys each of the thread's rows sees, lo ≤ j < hi
  // (row_keys: 0 and 0 for none), in 32 bits (kernels.MaxElements), and
  // the range of key tiles every one of them sees whole.
  int lo32[kR], hi32[kR], lo_max = 0, hi_min = 0;
  if constexpr (kVar) {
    lo_max = 0, hi_min = static_cast<int>(nk);
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      long long lo, hi;
      row_keys(mk, row_of(r), lo, hi);
      lo32[r] = static_cast<int>(lo), hi32[r] = static_cast<int>(hi);
      lo_max = lo32[r] > lo_max ? lo32[r] : lo_max;
      hi_min = hi32[r] < hi_min ? hi32[r] : hi_min;
    }
  }
  const Mods md = kVar ? mods_of(score_mod<float>(p, bh, mk), static_cast<float>(p.scale)) : Mods{};
  [[maybe_unused]] const Extras ex = kFull ? extras_of(p, bh) : Extras{};

  // Prologue: Q and the first K/V tile in one cp.async group.
  cp_rows<kFwdBQ, DP>(sQ, q + bh * nq * DP, q0, q_real);
  if (n_tiles > 0) {
    cp_rows<BK, DP>(sK, kh, static_cast<long long>(t0) * BK, k_real);
    load_v(sV, static_cast<long long>(t0) * BK);
  }
  // The bias tile: one buffer, refilled for the next tile once every warp
  // has added this one (below), so that it lands during P·V and the next
  // products; the first comes with Q.
  [[maybe_unused]] const bool bias_aligned = kFull && bias_tile_aligned(ex.bias, nk);
  if constexpr (kFull) {
    if (ex.bias != nullptr && n_tiles > 0)
      cp_bias_tile<kFwdBQ, BK, kBiasLd, kFwdThreads>(sB, ex.bias, q0, q_real, static_cast<long long>(t0) * BK, nk, bias_aligned);
  }
  cp_async_commit();

  const float scale_log2 = static_cast<float>(p.scale) * 1.4426950408889634f;
  float m[kR], l[kR];  // l: this thread's partial row sums; reduced at the end
#pragma unroll
  for (int r = 0; r < kR; ++r) m[r] = -Math<float>::inf(), l[r] = 0.f;
  float acc[kFwdMT][kNO][4];
#pragma unroll
  for (int mt = 0; mt < kFwdMT; ++mt)
#pragma unroll
    for (int n = 0; n < kNO; ++n) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.f;

  // Per-lane ldmatrix addresses (see ldsm_x4), in units of 16 bytes (kVec
  // elements) across a row: Q rows l%16 at unit l/16; K keys 8·(l/16) + l%8
  // at unit (l/8)%2; V keys l%8 + 8·((l/8)%2) at unit l/16 (through .trans),
  // or for TF32's transposed V, columns d = 8·(l/16) + l%8 at unit (l/8)%2.
  const S* qa = sQ + (warp * kFwdMT * 16 + lane % 16) * kLd + (lane / 16) * kVec;
  const int k_off = ((lane / 16) * 8 + lane % 8) * kLd + ((lane / 8) % 2) * kVec;
  const int v_off = E::kVTransposed ? ((lane / 16) * 8 + lane % 8) * kLdVt + ((lane / 8) % 2) * kVec
                                    : (lane % 8 + ((lane / 8) % 2) * 8) * kLd + (lane / 16) * 8;

  for (int it = 0; it < n_tiles; ++it) {
    const long long k0 = static_cast<long long>(t0 + it) * BK;
    // Start the next tile into the other buffer (freed by the barrier that
    // ended the previous iteration), then wait for this one.
    if (it + 1 < n_tiles) {
      const int nb = (it + 1) % 2;
      cp_rows<BK, DP>(sK + nb * BK * kLd, kh, k0 + BK, k_real);
      load_v(sV + nb * fwd_v_tile<E, DP>(), k0 + BK);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const S* kt = sK + (it % 2) * BK * kLd + k_off;
    const S* vt = sV + (it % 2) * fwd_v_tile<E, DP>() + v_off;

    // S = Q·Kᵀ for this warp's rows and BK keys; each K fragment feeds
    // every m16 tile.
    float s[kFwdMT][kNS][4];
#pragma unroll
    for (int mt = 0; mt < kFwdMT; ++mt)
#pragma unroll
      for (int j = 0; j < kNS; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;
#pragma unroll
    for (int kc = 0; kc < DP / E::kK; ++kc) {
      uint32_t a[kFwdMT][4];
#pragma unroll
      for (int mt = 0; mt < kFwdMT; ++mt) ldsm_x4(a[mt], qa + mt * 16 * kLd + kc * E::kK);
#pragma unroll
      for (int j = 0; j < kNS; j += 2) {
        uint32_t b[4];
        ldsm_x4(b, kt + j * 8 * kLd + kc * E::kK);
#pragma unroll
        for (int mt = 0; mt < kFwdMT; ++mt) {
          E::mma(s[mt][j], a[mt], b[0], b[1]);
          E::mma(s[mt][j + 1], a[mt], b[2], b[3]);
        }
      }
    }

    // Online softmax in log2 units. Element e of tile (mt, j) is row
    // r = 2mt + e/2, key k0 + 8j + 2t + (e & 1). Only tiles reaching past
    // some row's last visible key need the mask (after the scaling, so a
    // negative scale cannot turn it into +inf).
    float tile_max[kR];
    if constexpr (!kVar) {
#pragma unroll
      for (int mt = 0; mt < kFwdMT; ++mt)
#pragma unroll
        for (int j = 0; j < kNS; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][j][e] *= scale_log2;
      if (k0 + BK > n_vis_min) {
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          const long long nv = vis_of(r);
#pragma unroll
          for (int j = 0; j < kNS; ++j)
#pragma unroll
            for (int c = 0; c < 2; ++c)
              if (k0 + j * 8 + 2 * t + c >= nv) s[r / 2][j][(r % 2) * 2 + c] = -Math<float>::inf();
        }
      }
    } else {
      // The modifiers, then the mask. ALiBi: each row's bias over this
      // tile (a − k0 − 2t: the distance at column offset 0); a row crossing
      // its diagonal takes the masked copy (AlibiRow).
      const bool masked = k0 < lo_max || k0 + BK > hi_min;
      AlibiRow<-1> ar[kR];
      bool uniform = true;
      if (md.slope_l2 != 0.f) {
#pragma unroll
        for (int r = 0; r < kR; ++r)
          uniform &= ar[r].set(offset_of(row_of(r), md.shift, k0) - 2 * t, BK - 7, md.slope_l2);
      }
      with_variant_of<kFull>(masked || !uniform, md.on, md.capped, [&](auto kMasked, auto kMod, auto kCap) {
#pragma unroll
        for (int mt = 0; mt < kFwdMT; ++mt)
#pragma unroll
          for (int j = 0; j < kNS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int r = 2 * mt + e / 2;
              float dsoft;
              float x = modified<E, kMod, kCap, kMasked>(s[mt][j][e], scale_log2, md, ar[r], 8 * j + (e & 1), dsoft);
              const int key = static_cast<int>(k0) + j * 8 + 2 * t + (e & 1);
              const bool seen = !kMasked || (key >= lo32[r] && key < hi32[r]);
              if constexpr (kFull) {
                if (ex.bias != nullptr && seen)
                  x = fmaf(sB[(row_of(r) - q0) * kBiasLd + (key - static_cast<int>(k0))], kLog2e, x);
              }
              if (!seen) x = -Math<float>::inf();
              s[mt][j][e] = x;
            }
      });
    }
    if constexpr (kFull) {
      // Every warp has added this tile's bias: refill the buffer with the
      // next tile's (landing by the next iteration's wait).
      if (ex.bias != nullptr && it + 1 < n_tiles) {
        __syncthreads();
        cp_bias_tile<kFwdBQ, BK, kBiasLd, kFwdThreads>(sB, ex.bias, q0, q_real, k0 + BK, nk, bias_aligned);
        cp_async_commit();
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      float v[kNS];
#pragma unroll
      for (int j = 0; j < kNS; ++j) v[j] = fmaxf(s[r / 2][j][2 * (r % 2)], s[r / 2][j][2 * (r % 2) + 1]);
      tile_max[r] = tree_reduce(v, [](float a, float b) { return fmaxf(a, b); });
    }
    float ref[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      // The 4 lanes with the same g share a row.
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float m_new = fmaxf(m[r], tile_max[r]);
      // A row with no visible key so far keeps m = −inf; (−inf) − (−inf)
      // would be NaN, so its reference is 0 (all its p are 0 anyway).
      ref[r] = m_new == -Math<float>::inf() ? 0.f : m_new;
      const float alpha = ex2_ftz(m[r] - ref[r]);
      m[r] = m_new;
      // Once the row maximum settles, alpha is 1 and the rescale is skipped.
      if (alpha != 1.f) {
        l[r] *= alpha;
#pragma unroll
        for (int n = 0; n < kNO; ++n) {
          acc[r / 2][n][2 * (r % 2)] *= alpha;
          acc[r / 2][n][2 * (r % 2) + 1] *= alpha;
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < kFwdMT; ++mt)
#pragma unroll
      for (int j = 0; j < kNS; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][j][e] = ex2_ftz(s[mt][j][e] - ref[2 * mt + e / 2]);
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      float part[kNS];
#pragma unroll
      for (int j = 0; j < kNS; ++j) part[j] = s[r / 2][j][2 * (r % 2)] + s[r / 2][j][2 * (r % 2) + 1];
      l[r] += tree_reduce(part, [](float a, float b) { return a + b; });
    }
    if constexpr (kFull) {
      if (ex.drop.on()) {
#pragma unroll
        for (int mt = 0; mt < kFwdMT; ++mt) {
          const long long rows[2] = {row_of(2 * mt), row_of(2 * mt + 1)};
          drop_by_row(s[mt], ex, rows, k0, t, 1.f);
        }
      }
    }

    // O += P·V, P taken from the score registers E::kK keys at a time;
    // each V fragment feeds every m16 tile.
#pragma unroll
    for (int kk = 0; kk < BK / E::kK; ++kk) {
      uint32_t a[kFwdMT][4];
#pragma unroll
      for (int mt = 0; mt < kFwdMT; ++mt) E::p_frag(a[mt], s[mt], kk);
#pragma unroll
      for (int n = 0; n < kNO; n += 2) {
        uint32_t b[4];
        if constexpr (E::kVTransposed) {
          ldsm_x4(b, vt + n * 8 * kLdVt + kk * E::kK);
        } else {
          ldsm_x4_t(b, vt + kk * 16 * kLd + n * 8);
        }
#pragma unroll
        for (int mt = 0; mt < kFwdMT; ++mt) {
          E::mma(acc[mt][n], a[mt], b[0], b[1]);
          E::mma(acc[mt][n + 1], a[mt], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this buffer before it refills
  }
  cp_async_wait<0>();  // nothing may still be landing in shared memory at exit

  // Epilogue: O = acc / l and LSE, row by row.
#pragma unroll
  for (int r = 0; r < kR; ++r)
    finish_row(p, bh, row_of(r), kVar ? hi32[r] > 0 : vis_of(r) > 0, acc[r / 2], r % 2, m[r], l[r],
               kFull && ex.drop.on() ? ex.drop_scale() : 1.f);
}

}  // namespace mma
}  // namespace flash
