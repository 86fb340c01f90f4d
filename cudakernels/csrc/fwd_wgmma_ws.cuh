// The warp-specialized Hopper forward: the plain problems (fwd_wgmma.cuh's
// plain kernel's: no grouped heads, lengths, left window bound or score
// modifier) of 16-bit operands at DP = 64 and 128 and of TF32 at DP = 128,
// on the same tile images as fwd_rowblock, with a producer warpgroup and two
// consumer ones (three at DP = 64: ws_consumers) instead of two that do
// both. (TF32 at DP = 64 stays on fwd_rowblock, which measured faster
// there: 4.16 against 4.71 ms at N = 8k on the H200, 2026-12-04.)
//
// Why: in fwd_rowblock every warpgroup computes S = Q·Kᵀ, waits for it, runs
// the softmax, computes O += P·V and waits again, and one of its threads
// issues the copies; the tensor cores idle while the softmax runs unless
// the other warpgroup happens to be in a product. Here
//   - warpgroup 0 is the producer: one thread issues the bulk copies of Q
//     and of the K and Vᵀ tiles into kWsStages stages, K and Vᵀ with
//     barriers of their own (a consumer needs K of tile i with Vᵀ of tile
//     i − 1). It gives its registers up (setmaxnreg.dec) to the
//     consumer warpgroups (setmaxnreg.inc), which hold O, S and P at once;
//   - each consumer warpgroup (64 query rows) overlaps its softmax with its
//     own products: it issues S_i = Q·K_iᵀ and O += P_{i−1}·V_{i−1}, waits
//     for S_i alone, runs the softmax of tile i while P·V runs, then waits
//     for P·V, rescales O and packs P_i. The tensor cores see a product
//     queued behind every softmax.
// The epilogue stores O through the warpgroup's part of the Q tile
// (store_wg_rows), which its last S = Q·Kᵀ is done reading.
//
// In the two-consumer kernels (ws_reads_q) Q is not an image: the
// producer warpgroup converts the block's rows of the caller's float32 Q
// into the Q tile itself (q_image), after issuing the first stages'
// copies of K and V and before it gives its registers up, which saves the
// conversion pass over Q that the other kernels need (a read of Q in
// float32, a write and a read of its image); Q is read once per block
// anyway. K and V stay images: every query block reads them, and float32
// tiles would double the main loop's traffic. The three-consumer kernel
// copies a Q image as before: at its 128 registers a thread, the
// conversion's code put spills into the consumers' tile loop (ptxas 12.4:
// 36 bytes stored, 120 loaded, against 8 and 8 after the loop without
// it).
//
// Barriers: q_full (the Q copy's bytes, or the producer's 128 threads,
// each when its part of Q is written), full_k/full_v per stage (a tile's
// bytes, one arrival: the producer's expect_tx), empty_k/empty_v per stage
// (every consumer thread arrives when its products are done reading the
// tile: an arrive releases only the arriving thread's own accesses).
// Parity of use u of a stage is u & 1; the producer refills a stage for use
// u after the release of use u − 1.
#pragma once
#include "common.cuh"
#include "sm90.cuh"
#include "sm90_variants.cuh"

namespace flash {
namespace sm90 {

constexpr int kWsStages = 2;
// ws_consumers is the block's consumer warpgroups (NC), 64 query rows
// each, by default: three at DP = 64, where per score the softmax does as
// much as at 128 against half the tensor work, so more warps hide it
// (FlashAttention 3 takes 192-row blocks there too); two at DP = 128, whose
// O, S and P fill 240 registers a thread. DP = 64 also has a two-consumer
// kernel, for short causal problems, where 192-row blocks leave too few
// blocks (select.go's wgmmaWSConsumers). ws_threads adds the producer
// warpgroup, ws_rows is the block's rows.
template <int DP> __host__ __device__ constexpr int ws_consumers() { return DP == 64 ? 3 : 2; }
template <int NC> __host__ __device__ constexpr int ws_threads() { return 128 * (NC + 1); }
template <int NC> __host__ __device__ constexpr int ws_rows() { return 64 * NC; }
// ws_reads_q: the kernel converts the caller's float32 Q itself (the
// two-consumer kernels; select.go repeats it: wgmmaWSReadsQ).
template <int NC> __host__ __device__ constexpr bool ws_reads_q() { return NC == 2; }
// Registers per thread after setmaxnreg: 24 × 128 + 240 × 256 or
// 24 × 128 + 160 × 384, 64512 of the SM's 65536 (the block is alone on its
// SM).
constexpr int kWsProducerRegs = 24;
template <int NC> __host__ __device__ constexpr int ws_consumer_regs() { return NC == 3 ? 160 : 240; }

// ws_built reports whether the warp-specialized forward serves precision E
// at DP (select.go repeats it: wgmmaWSBuilt).
template <typename E, int DP> __host__ __device__ constexpr bool ws_built() {
  return sizeof(typename E::Storage) == 2 ? DP == 64 || DP == 128 : DP == 128;
}
// ws_smem_bytes: up to 1024 bytes to align the tiles, Q (ws_rows rows),
// kWsStages stages of a K and a Vᵀ tile of fwd_bk keys, 1 + 4·kWsStages
// mbarriers. select.go repeats it (wgmmaWSSmem).
template <typename E, int DP, int NC> __host__ __device__ constexpr int ws_smem_bytes() {
  return 1024 + ws_rows<NC>() * DP * static_cast<int>(sizeof(typename E::Storage)) +
         2 * kWsStages * fwd_kv_bytes<E, DP>() + (1 + 4 * kWsStages) * 8;
}

#ifdef FLASH_EMU  // no register file to share out on the host
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {}
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {}
#else
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
#endif

// fence_regs pins the registers of x at this point of the program: the
// compiler may not move their reads or writes across it. wgmma writes its
// accumulators asynchronously, which the compiler does not know; reads of
// them must stay after the wgmma_wait that completes them, and writes
// before the wgmma_fence that precedes the next product.
template <int N> __device__ __forceinline__ void fence_regs(float (&x)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
#ifdef FLASH_EMU  // emulated wgmma writes at the wait, which the compiler sees
      (void)x[i][e];
#else
      asm volatile("" : "+f"(x[i][e])::"memory");
#endif
    }
}

// q_image converts rows r0 … r0 + ROWS − 1 of head bh of the caller's
// float32 Q (p.q with its strides) into the block's Q tile at shared
// address tile: ROWS / 64 images of 64 rows, each K-major with the
// 128-byte swizzle as to_image_rows lays one out, zero past nq and past
// dim. The 128 threads of the producer warpgroup (tid its thread) share
// the work and each arrives on q_full when its stores are visible to
// wgmma.
template <typename E, int DP, int ROWS>
__device__ __forceinline__ void q_image(uint32_t tile, const Params& p, long long bh, long long r0, uint32_t q_full,
                                        int tid) {
  constexpr int kVec = mma::StorageOf<E>::kVec, kRowChunks = DP / kVec;
  constexpr int kTileBytes = kQTileRows * DP * static_cast<int>(sizeof(typename E::Storage));
  const float* qh = head_of(static_cast<const float*>(p.q), bh, p.h, p.q_batch_stride, p.q_head_stride);
  // 16-byte loads where every row of the head starts on a 16-byte boundary.
  const bool vec = p.dim % 4 == 0 && p.q_row_stride % 4 == 0 && reinterpret_cast<uintptr_t>(qh) % 16 == 0;
  unsigned char* const base = smem + (tile - smem_addr(smem));
  // Each thread converts kPer chunks, kBatch at a time with all of a
  // batch's loads issued before its first store: one chunk after another,
  // each load waited for before the next issued, kept the consumers' first
  // product waiting 16 DRAM round trips at DP = 128 (the block's whole
  // prologue; +60–90 µs over the forward's 15 waves of blocks, H100
  // 2026-12-05).
  constexpr int kPer = ROWS * kRowChunks / 128, kBatch = kPer < 8 ? kPer : 8;
  static_assert(kPer % kBatch == 0, "whole batches of chunks per thread");
#pragma unroll 1
  for (int b0 = 0; b0 < kPer; b0 += kBatch) {
    float f[kBatch][kVec];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = tid + (b0 + j) * 128, r = i / kRowChunks, c = i % kRowChunks;
      const long long row = r0 + r, c0 = static_cast<long long>(c) * kVec;
      const float* src = qh + row * p.q_row_stride + c0;
      if (vec && row < p.nq && c0 + kVec <= p.dim) {
#pragma unroll
        for (int e = 0; e < kVec; e += 4) {
          const float4 a = *reinterpret_cast<const float4*>(src + e);
          f[j][e] = a.x, f[j][e + 1] = a.y, f[j][e + 2] = a.z, f[j][e + 3] = a.w;
        }
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) f[j][e] = row < p.nq && c0 + e < p.dim ? src[e] : 0.f;
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = tid + (b0 + j) * 128, r = i / kRowChunks, c = i % kRowChunks;
      const int at = r / kQTileRows * kTileBytes + image_chunk(r % kQTileRows, c, kQTileRows) * 16;
      *reinterpret_cast<uint4*>(base + at) = mma::StorageOf<E>::convert(f[j]);
    }
  }
  fence_proxy_async();  // the generic stores, before wgmma reads them
  mbar_arrive(q_full);
}

// fwd_ws is the kernel's body (see the top of this file): p.q, p.k and p.v
// are the images fwd_rowblock reads (Q padded to a multiple of ws_rows
// rows), the grid B·H·q_tiles blocks of ws_rows rows, in block_order's
// order.
template <typename E, int DP, int NC = ws_consumers<DP>()> __device__ void fwd_ws(const Params& p) {
  static_assert(ws_built<E, DP>(), "the warp-specialized forward is not built for this operand type and DP");
  static_assert(NC == 2 || NC == 3, "two or three consumer warpgroups");
  require_launch(ws_threads<NC>(), ws_smem_bytes<E, DP, NC>());
  require_plain(p);
  using S = typename E::Storage;
  constexpr int BK = fwd_bk<E, DP>();
  constexpr int kRows = ws_rows<NC>(), kConsumerThreads = ws_threads<NC>() - 128;
  constexpr int kQBytes = kRows * DP * static_cast<int>(sizeof(S)), kKVBytes = fwd_kv_bytes<E, DP>();
  constexpr int kNS = BK / 8, kNO = DP / 8;
  const float kInf = Math<float>::inf();
  const long long nq = p.nq, nk = p.nk;
  // Longest blocks first (block_order): with a right bound (causal) the
  // last rows see the most keys.
  const long long q_tiles = (nq + kRows - 1) / kRows;
  long long bh, tile;
  block_order(blockIdx.x, static_cast<unsigned>(q_tiles), p.mask_right >= 0, bh, tile);
  const long long q0 = tile * kRows;
  const SeqMask mk = seq_mask(p, bh);
  // The block's rows see keys 0 … key_hi of its last real row (plain
  // problems: from key 0, bounds nondecreasing in the row).
  const long long kv_end = q0 < mk.lq ? mk.key_hi((q0 + kRows < mk.lq ? q0 + kRows : mk.lq) - 1) : 0;
  const int n_tiles = static_cast<int>((kv_end + BK - 1) / BK);

  const uint32_t sQ = (smem_addr(smem) + 1023u) & ~1023u;
  const uint32_t sK = sQ + kQBytes, sV = sK + kWsStages * kKVBytes, bars = sV + kWsStages * kKVBytes;
  const uint32_t q_full = bars;
  auto full_k = [&](int st) { return bars + 8 * (1 + st); };
  auto full_v = [&](int st) { return bars + 8 * (1 + kWsStages + st); };
  auto empty_k = [&](int st) { return bars + 8 * (1 + 2 * kWsStages + st); };
  auto empty_v = [&](int st) { return bars + 8 * (1 + 3 * kWsStages + st); };
  if (threadIdx.x == 0) {
    mbar_init(q_full, ws_reads_q<NC>() ? 128 : 1);
    for (int st = 0; st < kWsStages; ++st) {
      mbar_init(full_k(st), 1);
      mbar_init(full_v(st), 1);
      mbar_init(empty_k(st), kConsumerThreads);
      mbar_init(empty_v(st), kConsumerThreads);
    }
    mbar_fence_init();
  }
  __syncthreads();

  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    // A block whose rows see no key loads nothing (no copy may still be
    // landing when the block exits).
    const S* kh = static_cast<const S*>(p.k) + bh * ((nk + BK - 1) / BK) * BK * DP;
    const S* vh = static_cast<const S*>(p.v) + bh * ((nk + BK - 1) / BK) * BK * DP;
    auto load = [&](int it) {
      const int st = it % kWsStages;
      const unsigned prev = ((it / kWsStages) & 1) ^ 1;  // parity of the stage's last release
      const long long off = static_cast<long long>(it) * BK * DP;
      if (it >= kWsStages) mbar_wait(empty_k(st), prev);
      mbar_arrive_expect_tx(full_k(st), kKVBytes);
      bulk_copy(sK + st * kKVBytes, kh + off, kKVBytes, full_k(st));
      if (it >= kWsStages) mbar_wait(empty_v(st), prev);
      mbar_arrive_expect_tx(full_v(st), kKVBytes);
      bulk_copy(sV + st * kKVBytes, vh + off, kKVBytes, full_v(st));
    };
    if constexpr (ws_reads_q<NC>()) {
      if (n_tiles > 0) {
        // The first stages' copies go out first, and land while the
        // warpgroup converts Q with the registers it has before giving
        // them up.
        if (threadIdx.x == 0)
          for (int it = 0; it < kWsStages && it < n_tiles; ++it) load(it);
        q_image<E, DP, kRows>(sQ, p, bh, q0, q_full, threadIdx.x);
      }
      setmaxnreg_dec<kWsProducerRegs>();
      if (threadIdx.x == 0)
        for (int it = kWsStages; it < n_tiles; ++it) load(it);
    } else {
      setmaxnreg_dec<kWsProducerRegs>();
      if (threadIdx.x == 0 && n_tiles > 0) {
        mbar_arrive_expect_tx(q_full, kQBytes);
        // The Q image's rows are padded to a multiple of kRows (wgmmaForward.padded).
        bulk_copy(sQ, head_of(static_cast<const S*>(p.q), bh, p.h, p.q_batch_stride, p.q_head_stride) + q0 * DP,
                  kQBytes, q_full);
        for (int it = 0; it < n_tiles; ++it) load(it);
      }
    }
    return;
  }
  setmaxnreg_inc<ws_consumer_regs<NC>()>();

  const int cw = wg - 1, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  auto row_of = [&](int r) { return q0 + cw * 64 + warp * 16 + g + 8 * r; };
  long long vis[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    long long lo;
    row_keys(mk, row_of(r), lo, vis[r]);
  }
  // Tiles below the fewer keys either row sees need no mask.
  const int n_unmasked = static_cast<int>((vis[0] < vis[1] ? vis[0] : vis[1]) / BK);
  const float scale_log2 = static_cast<float>(p.scale) * 1.4426950408889634f;
  float m[2] = {-kInf, -kInf}, l[2] = {0.f, 0.f};  // l: this thread's partial sums
  float acc[kNO][4];
#pragma unroll
  for (int n = 0; n < kNO; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  float s[kNS][4];
  uint32_t pf[BK / E::kK][4];  // P of the last tile, the A operand of its P·V
  const uint64_t q_desc = desc_sw128(sQ + cw * kQTileRows * DP * static_cast<uint32_t>(sizeof(S)));

  // qk issues S = Q·K_itᵀ for the tile in stage st.
  auto qk = [&](int st) {
    const uint64_t k_desc = desc_sw128(sK + st * kKVBytes);
#pragma unroll
    for (int kc = 0; kc < DP / E::kK; ++kc)
      Wgmma<E, BK>::ss(reinterpret_cast<float(&)[BK / 2]>(s), q_desc + (k_slice_offset(kc, kQTileRows) >> 4),
                       k_desc + (k_slice_offset(kc, BK) >> 4), kc > 0);
    wgmma_commit();
  };
  // pv issues O += P·V for the tile in stage st.
  auto pv = [&](int st) {
    const uint64_t v_desc = desc_sw128(sV + st * kKVBytes);
#pragma unroll
    for (int kk = 0; kk < BK / E::kK; ++kk)
      Wgmma<E, DP>::rs(reinterpret_cast<float(&)[DP / 2]>(acc), pf[kk], v_desc + (k_slice_offset(kk, DP) >> 4));
    wgmma_commit();
  };
  // softmax turns the scores of tile it into probabilities in s (online, in
  // log2 units, element e of n8 tile j being row e/2, key 8j + 2t + (e & 1)
  // of the tile), updates m and l, and returns each row's factor for O.
  // Unmasked tiles take the row's extremum of the raw scores and fold the
  // scale into the exponential's argument, exp2(s·scale − m) in one FFMA:
  // one multiplication less per score than scaling first, which counts
  // where the softmax, not the tensor cores, bounds the loop (D = 64). The
  // extremum is the minimum for a negative scale. Masked tiles scale
  // first, so that a masked score is −inf whatever the scale's sign. The
  // exponential flushes results below 2^−126 to zero (ex2_ftz).
  auto softmax = [&](int it, float (&alpha)[2]) {
    const long long k0 = static_cast<long long>(it) * BK;
    with_mask(it >= n_unmasked, [&](auto kMasked) {
      float mult = scale_log2;  // what multiplies s in the exponential
      if constexpr (kMasked) {
#pragma unroll
        for (int j = 0; j < kNS; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[j][e] *= scale_log2;
            if (k0 + j * 8 + 2 * t + (e & 1) >= vis[e / 2]) s[j][e] = -kInf;
          }
        mult = 1.f;
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx;
        if (kMasked || scale_log2 >= 0.f) {
          mx = -kInf;
#pragma unroll
          for (int j = 0; j < kNS; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
        } else {
          mx = kInf;
#pragma unroll
          for (int j = 0; j < kNS; ++j) mx = fminf(mx, fminf(s[j][2 * r], s[j][2 * r + 1]));
        }
        mx *= mult;
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[r], mx);
        // A row with no visible key so far keeps m = −inf; its reference is 0.
        const float ref = m_new == -kInf ? 0.f : m_new;
        alpha[r] = ex2_ftz(m[r] - ref);
        m[r] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < kNS; ++j) {
          s[j][2 * r] = ex2_ftz(fmaf(s[j][2 * r], mult, -ref));
          s[j][2 * r + 1] = ex2_ftz(fmaf(s[j][2 * r + 1], mult, -ref));
          sum += s[j][2 * r] + s[j][2 * r + 1];
        }
        l[r] = l[r] * alpha[r] + sum;
      }
    });
  };
  auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < BK / E::kK; ++kk) E::p_frag(pf[kk], s, kk);
  };

  if (n_tiles > 0) {
    mbar_wait(q_full, 0);
    mbar_wait(full_k(0), 0);
    wgmma_fence();
    qk(0);
    wgmma_wait<0>();
    fence_regs(s);
    mbar_arrive(empty_k(0));
    float alpha[2];
    softmax(0, alpha);  // alpha multiplies an O of zeros: nothing to rescale
    pack_p();
    for (int it = 1; it < n_tiles; ++it) {
      const int st = it % kWsStages, pst = (it - 1) % kWsStages;
      mbar_wait(full_k(st), (it / kWsStages) & 1);
      mbar_wait(full_v(pst), ((it - 1) / kWsStages) & 1);
      fence_regs(acc);
      wgmma_fence();
      qk(st);
      pv(pst);
      wgmma_wait<1>();  // S of tile it; P·V of tile it − 1 still running
      fence_regs(s);
      mbar_arrive(empty_k(st));
      softmax(it, alpha);
      wgmma_wait<0>();
      fence_regs(acc);
      mbar_arrive(empty_v(pst));
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (alpha[r] != 1.f) {
#pragma unroll
          for (int n = 0; n < kNO; ++n) acc[n][2 * r] *= alpha[r], acc[n][2 * r + 1] *= alpha[r];
        }
      pack_p();
    }
    const int last = (n_tiles - 1) % kWsStages;
    mbar_wait(full_v(last), ((n_tiles - 1) / kWsStages) & 1);
    fence_regs(acc);
    wgmma_fence();
    pv(last);
    wgmma_wait<0>();
    fence_regs(acc);
  }

  // Epilogue: O = acc / l and LSE; rows that see no key get O = 0 and
  // LSE = +inf (finish_row's conventions).
  float inv[2];
  finish_wg_rows(p, bh, nq, row_of(0), vis, m, l, 1.f, t, inv);
  // O = 0 exactly for a row without keys, whatever its zero probabilities
  // met (0·NaN from a non-finite V is NaN).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (vis[r] <= 0) {
#pragma unroll
      for (int n = 0; n < kNO; ++n) acc[n][2 * r] = acc[n][2 * r + 1] = 0.f;
    }
  }
  float* o = head_of(static_cast<float*>(p.o), bh, p.h, p.o_batch_stride, p.o_head_stride);
  constexpr int kWgQBytes = kQTileRows * DP * static_cast<int>(sizeof(S));
  store_wg_rows<DP, kWgQBytes>(o, p.o_row_stride, q0 + cw * 64, nq, p.dim, sQ + cw * kWgQBytes, acc, inv, cw,
                               rows_vec(o, p.o_row_stride, p.dim));
}

}  // namespace sm90
}  // namespace flash
