// Backward pass on tensor cores (mma.sync, sm_80+): bf16 or fp16 operands,
// fp32 accumulation, float32 gradients out.
//
// The operands are the 16-bit, row-padded copies that to_half_padded makes
// of Q, K, V and dO (fwd_mma.cuh), with the LSE saved by the forward and
// D = rowsum(dO∘O) computed beforehand in fp32. P is recomputed as
// exp2(scale·log2e·Q·Kᵀ − log2e·LSE) and rounded to the storage format
// before it multiplies dO, as the forward rounded it before it multiplied V;
// dS = P∘(dP − D) is rounded the same way before it multiplies Q or K.
//
// Two kernels, each writing every output element from one thread in a fixed
// order, so results are bit-identical from run to run (no atomics):
//   dkdv_1colblock  one block per kBwdBK keys, looping over query tiles:
//                   dV += Pᵀ·dO and dK += dSᵀ·Q, with Sᵀ = K·Qᵀ and
//                   dPᵀ = V·dOᵀ computed transposed so that each warp owns
//                   16 keys and Pᵀ, dSᵀ go from accumulators straight into A
//                   operands;
//   dq_1rowblock    one block per kBwdBQ queries, looping over key tiles:
//                   dQ += dS·K, recomputing S and dP (the price of a
//                   deterministic dQ: two products more than an atomic
//                   accumulation would need).
// Both double buffer the tiles they loop over with cp.async.
#pragma once
#include "fwd_mma.cuh"

namespace flash {
namespace mma {

constexpr int kBwdWarps = 4;
constexpr int kBwdThreads = 32 * kBwdWarps;  // cp_rows copies with kFwdThreads threads
constexpr int kBwdBK = 16 * kBwdWarps;       // keys per dkdv block: 16 per warp
constexpr int kBwdBQ = 16 * kBwdWarps;       // queries per dq block: 16 per warp
constexpr int kBwdStep = 64;                 // rows of the tiles each kernel loops over
static_assert(kBwdThreads == kFwdThreads, "cp_rows strides by kFwdThreads");

// bwd_step is the rows of the tiles the dK/dV and dQ kernels loop over:
// kBwdStep, or 32 in the _full kernels. There the step's bias tile (fp32)
// is double-buffered with the streamed tiles, which at 64 rows would leave
// one block per SM (the dK/dV layout would take 124 KB at DP = 128), and
// half the scores per step leave registers for the bias and dropout.
template <bool kFull> __host__ __device__ constexpr int bwd_step() { return kFull ? 32 : kBwdStep; }

// The _full kernels' bias tile strides, in floats. dK/dV's tile [step
// queries, kBwdBK keys] is read across its rows (one load: 8 keys × 4
// queries 2 apart), so a stride ≡ 4 (mod 32) words puts the 32 reads in 32
// banks; dQ's [kBwdBQ rows, step keys] and dBias's [kBwdBQ, kBwdStep] are
// read along rows in 8-byte pairs, as the forward's (fwd_bias_ld): ≡ 8.
constexpr int kDkdvBiasLd = kBwdBK + 4;
template <int COLS> __host__ __device__ constexpr int row_bias_ld() { return COLS + 8; }

// Shared-memory layouts, repeated in select.go (mmaBwdSmem, mmaBwdFullSmem):
// two fixed tiles of 16-bit rows (K and V, or Q and dO), two
// double-buffered streamed tiles, for dkdv the streamed queries' LSE and D
// in fp32, and in the _full kernels two bias tiles.
template <int DP, bool kFull = false> __host__ __device__ constexpr int bwd_dkdv_smem_bytes() {
  constexpr int step = bwd_step<kFull>();
  return (2 * kBwdBK + 4 * step) * ld_of<uint16_t, DP>() * 2 + 4 * step * 4 +
         (kFull ? 2 * step * kDkdvBiasLd * 4 : 0);
}
template <int DP, bool kFull = false> __host__ __device__ constexpr int bwd_dq_smem_bytes() {
  constexpr int step = bwd_step<kFull>();
  return (2 * kBwdBQ + 4 * step) * ld_of<uint16_t, DP>() * 2 +
         (kFull ? 2 * kBwdBQ * row_bias_ld<step>() * 4 : 0);
}

// ldmatrix addresses of one lane (see ldsm_x4), as offsets in 16-bit
// elements from a tile's start:
//   a_off: A operand, rows 16·warp + l%16 at column 8·(l/16), for a row-major
//          tile whose rows are the product's rows;
//   b_off: B operand from a row-major [n, k] tile (rows are the product's
//          columns): rows 8·(l/16) + l%8 at column 8·((l/8)%2), giving the
//          fragments of two n8 tiles;
//   bt_off: B operand from a row-major [k, n] tile through ldmatrix.trans:
//          rows l%8 + 8·((l/8)%2) at column 8·(l/16).
template <int DP> __device__ __forceinline__ int a_off(int warp, int lane) {
  return (warp * 16 + lane % 16) * ld_of<uint16_t, DP>() + (lane / 16) * 8;
}
template <int DP> __device__ __forceinline__ int b_off(int lane) {
  return ((lane / 16) * 8 + lane % 8) * ld_of<uint16_t, DP>() + ((lane / 8) % 2) * 8;
}
template <int DP> __device__ __forceinline__ int bt_off(int lane) {
  return (lane % 8 + ((lane / 8) % 2) * 8) * ld_of<uint16_t, DP>() + (lane / 16) * 8;
}

// mma_abt accumulates c[j] += A·Bᵀ for one warp: A is the warp's 16 rows of a
// row-major [*, DP] tile (at a, from a_off), B the NT·8 rows of another (at
// b, from b_off), the product running over all DP columns.
template <typename E, int DP, int NT>
__device__ __forceinline__ void mma_abt(float (&c)[NT][4], const uint16_t* a, const uint16_t* b) {
  constexpr int kLd = ld_of<uint16_t, DP>();
#pragma unroll
  for (int kc = 0; kc < DP / 16; ++kc) {
    uint32_t af[4];
    ldsm_x4(af, a + kc * 16);
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
      uint32_t bf[4];
      ldsm_x4(bf, b + j * 8 * kLd + kc * 16);
      E::mma(c[j], af, bf[0], bf[1]);
      E::mma(c[j + 1], af, bf[2], bf[3]);
    }
  }
}

// mma_pb accumulates c[n] += P·B for one warp, P being 16 rows × KT·8
// columns held in the C layout of mma accumulators (p[j], as left by
// mma_abt) and B a row-major [KT·8, DP] tile read through ldmatrix.trans
// (at b, from bt_off). Two adjacent accumulator tiles are exactly one A
// fragment, so P never goes through shared memory; it is rounded to E here.
template <typename E, int DP, int KT>
__device__ __forceinline__ void mma_pb(float (&c)[DP / 8][4], const float (&p)[KT][4], const uint16_t* b) {
  constexpr int kLd = ld_of<uint16_t, DP>();
#pragma unroll
  for (int kk = 0; kk < KT / 2; ++kk) {
    uint32_t a[4];
    E::p_frag(a, p, kk);
#pragma unroll
    for (int n = 0; n < DP / 8; n += 2) {
      uint32_t bf[4];
      ldsm_x4_t(bf, b + kk * 16 * kLd + n * 8);
      E::mma(c[n], a, bf[0], bf[1]);
      E::mma(c[n + 1], a, bf[2], bf[3]);
    }
  }
}

// mma_fb is mma_pb with the A fragments of P made beforehand (frags[kk]:
// keys 16kk … 16kk + 15, as E::p_frag builds them), for the _var dK/dV
// kernel, which scales its scores by the softcap's derivative once their
// fragments are taken (probs_dkdv).
template <typename E, int DP, int KF>
__device__ __forceinline__ void mma_fb(float (&c)[DP / 8][4], const uint32_t (&frags)[KF][4], const uint16_t* b) {
  constexpr int kLd = ld_of<uint16_t, DP>();
#pragma unroll
  for (int kk = 0; kk < KF; ++kk) {
#pragma unroll
    for (int n = 0; n < DP / 8; n += 2) {
      uint32_t bf[4];
      ldsm_x4_t(bf, b + kk * 16 * kLd + n * 8);
      E::mma(c[n], frags[kk], bf[0], bf[1]);
      E::mma(c[n + 1], frags[kk], bf[2], bf[3]);
    }
  }
}

// cp_floats starts copying x[r0 .. r0+n) into dst[0 .. n), zero past rows.
template <int N>
__device__ __forceinline__ void cp_floats(float* dst, const float* x, long long r0, long long rows) {
  for (int i = threadIdx.x; i < N; i += kBwdThreads) {
    const bool ok = r0 + i < rows;
    cp_async4(dst + i, ok ? x + r0 + i : x, ok);
  }
}

// store_rows writes scale·c, the accumulators of a warp's 16 rows, into
// rows 0 … rows−1 of the [*, dim] matrix at y with row stride ld: the
// thread's rows are g and g+8.
template <int DP>
__device__ __forceinline__ void store_rows(float* y, const float (&c)[DP / 8][4], long long rows, long long dim,
                                           long long ld, float scale) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long row = g + 8 * h;
    if (row >= rows) continue;
    float* yr = y + row * ld;
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) {
      const int col = n * 8 + 2 * t;
      if (col < dim) yr[col] = c[n][2 * h] * scale;
      if (col + 1 < dim) yr[col + 1] = c[n][2 * h + 1] * scale;
    }
  }
}

// dkdv_1colblock and dq_1rowblock read the 16-bit copies p.q, p.k, p.v and
// p.dout (rows of DP elements), p.lse and p.delta, and write p.dk, p.dv or
// p.dq. kVar: the _var entry points, which compute the variants of
// tc_variants.cuh as the forward does (fwd_1rowblock); the plain ones trap
// on them. The _var dK/dV block of key head kvh sums the gradients of the
// kv_group query heads that read it, kvh·kv_group + r for r = 0, 1, … in
// that order, in its registers (deterministic: no atomics), walking for
// each the query steps whose rows see its keys; the softcap's derivative
// scales dS. Copies of padding rows and keys load as zeros, and a block
// with nothing to compute writes zeros. kFull (with kVar: the _full entry
// points) adds the bias and dropout as the forward does: dV takes P∘Z, and
// dS = P∘(Z∘dP − D) (probs_dkdv, drop_by_bits, drop_by_row). dBias is
// dbias_1tile's.
template <typename E, int DP, bool kVar, bool kFull = false>
__device__ void dkdv_1colblock(const Params& p) {
  static_assert(kVar || !kFull, "the _full kernels compute the _var variants too");
  const long long nq = p.nq, nk = p.nk;
  const bool causal = p.causal != 0;
  const uint16_t* __restrict__ q = static_cast<const uint16_t*>(p.q);
  const uint16_t* __restrict__ k = static_cast<const uint16_t*>(p.k);
  const uint16_t* __restrict__ v = static_cast<const uint16_t*>(p.v);
  const uint16_t* __restrict__ dout = static_cast<const uint16_t*>(p.dout);
  constexpr int kLd = ld_of<uint16_t, DP>();
  constexpr int kStep = bwd_step<kFull>();
  constexpr int kNS = kStep / 8;  // n8 tiles of Sᵀ per warp: queries
  constexpr int kND = DP / 8;     // n8 tiles of dK and dV per warp
  static_assert(kNS % 2 == 0 && kND % 2 == 0, "ldmatrix.x4 loads two n8 tiles");
  require_launch(kBwdThreads, bwd_dkdv_smem_bytes<DP, kFull>());

  uint16_t* sK = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sV = sK + kBwdBK * kLd;
  uint16_t* sQ = sV + kBwdBK * kLd;     // 2 buffers
  uint16_t* sdO = sQ + 2 * kStep * kLd;  // 2 buffers
  float* sL = reinterpret_cast<float*>(sdO + 2 * kStep * kLd);  // 2 buffers
  float* sD = sL + 2 * kStep;                                    // 2 buffers
  [[maybe_unused]] float* sB = sD + 2 * kStep;  // kFull: 2 bias tiles [kStep queries, kDkdvBiasLd]

  const long long tiles = (nk + kBwdBK - 1) / kBwdBK;
  // The key head (_var: its group's first query head gives the mask: a
  // group lies in one batch entry) and the first key of the block.
  long long kvh, k0;
  if constexpr (kVar) {
    // Longest blocks first: under a causal mask (a right bound) the first
    // keys see the most rows; under a left bound alone, the last.
    long long tile;
    block_order(blockIdx.x, static_cast<unsigned>(tiles), p.mask_right < 0 && p.mask_left >= 0, kvh, tile);
    k0 = tile * kBwdBK;
  } else {
    require_plain<false>(p);
    kvh = blockIdx.x / tiles;
    k0 = (blockIdx.x % tiles) * kBwdBK;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const SeqMask mk = seq_mask(p, kVar ? kvh * p.kv_group : kvh);
  const long long q_real = kVar ? mk.lq : nq, k_real = kVar ? mk.lk : nk;
  // Query steps it0 … it0 + n_per − 1 of each of the group's query heads
  // bh0, bh0 + 1, …: step i of the loop is head bh0 + i / n_per.
  // Plain: causal block skipping (query tiles before the first row that
  // sees key k0 contribute nothing), one head.
  int it0, n_per;
  const int group = kVar ? static_cast<int>(p.kv_group) : 1;
  const long long bh0 = kvh * group;
  // The last key of the block the outputs hold (keys past nk are not
  // stored).
  const long long k_last = (k0 + kBwdBK < nk ? k0 + kBwdBK : nk) - 1;
  if constexpr (kVar) {
    it0 = n_per = 0;
    if (k0 < mk.lk) {
      const long long q_lo = mk.query_lo(k0), q_hi = mk.query_hi((k0 + kBwdBK < mk.lk ? k0 + kBwdBK : mk.lk) - 1);
      it0 = static_cast<int>(q_lo / kStep);
      if (q_hi > q_lo) n_per = static_cast<int>((q_hi + kStep - 1) / kStep) - it0;
    }
    // No key is seen: dK = dV = 0, before any copy.
    if (n_per <= 0) {
      zero_key_grads<kBwdThreads>(p, kvh, k0, k_last + 1);
      return;
    }
  } else {
    const long long first = first_query_seeing(k0, nq, nk, causal);
    it0 = static_cast<int>(first / kBwdStep);
    n_per = static_cast<int>((nq + kBwdStep - 1) / kBwdStep) - it0;
  }
  const int n_steps = group * n_per;

  // load_step starts copying query step it of query head bh into buffer
  // buf, with (kFull) the bias of its queries and the block's keys, the
  // head's slice being its own or shared with others.
  auto load_step = [&](long long bh, int it, int buf) {
    const long long r0 = static_cast<long long>(it) * kStep;
    cp_rows<kStep, DP>(sQ + buf * kStep * kLd, q + bh * nq * DP, r0, q_real);
    cp_rows<kStep, DP>(sdO + buf * kStep * kLd, dout + bh * nq * DP, r0, q_real);
    cp_floats<kStep>(sL + buf * kStep, static_cast<const float*>(p.lse) + bh * nq, r0, nq);
    cp_floats<kStep>(sD + buf * kStep, static_cast<const float*>(p.delta) + bh * nq, r0, nq);
    if constexpr (kFull) {
      const float* bias = bias_rows<float>(p, bh);
      if (bias != nullptr)
        cp_bias_tile<kStep, kBwdBK, kDkdvBiasLd, kBwdThreads>(sB + buf * kStep * kDkdvBiasLd, bias, r0, q_real, k0, nk,
                                                 bias_tile_aligned(bias, nk));
    }
  };
  cp_rows<kBwdBK, DP>(sK, k + kvh * nk * DP, k0, k_real);
  cp_rows<kBwdBK, DP>(sV, v + kvh * nk * DP, k0, k_real);
  if (n_steps > 0) load_step(bh0, it0, 0);
  cp_async_commit();

  const float scale_log2 = static_cast<float>(p.scale) * kLog2e;
  float acc_dk[kND][4], acc_dv[kND][4];
#pragma unroll
  for (int n = 0; n < kND; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[n][e] = acc_dv[n][e] = 0.f;

  const uint16_t* ka = sK + a_off<DP>(warp, lane);
  const uint16_t* va = sV + a_off<DP>(warp, lane);
  // This thread's keys: rows g and g+8 of the warp's 16, and (_var) the
  // queries that see each, qlo ≤ i < qhi, in 32 bits.
  const long long key0 = k0 + warp * 16 + g;
  int qlo[2] = {0, 0}, qhi[2] = {0, 0};
  if constexpr (kVar) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      qlo[h] = static_cast<int>(mk.query_lo(key0 + 8 * h));
      qhi[h] = static_cast<int>(mk.query_hi(key0 + 8 * h));
    }
  }
  // The modifiers: one choice for the whole group (the softcap is the
  // problem's; the ALiBi slope, read per query head below, may be 0 for
  // some heads, which leaves their scores as they are).
  const bool mod = kVar && (p.softcap != 0.0 || p.alibi != nullptr);
  Mods md{};
  [[maybe_unused]] Extras ex{};
  [[maybe_unused]] uint32_t zbits = 0u;

  // Step i is query step it of query head bh; the next step is the next
  // query step, or (_var) the next head's first.
  long long bh = bh0;
  for (int i = 0, it = it0; i < n_steps; ++i, ++it) {
    if (kVar && it == it0 + n_per) it = it0, ++bh;
    const int buf = i % 2;
    if (i + 1 < n_steps) {
      const bool next_head = kVar && it + 1 == it0 + n_per;
      load_step(next_head ? bh + 1 : bh, next_head ? it0 : it + 1, 1 - buf);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if constexpr (kVar) {
      if (mod && it == it0) md = mods_of(score_mod<float>(p, bh, mk), static_cast<float>(p.scale));
      if (kFull && it == it0) ex = extras_of(p, bh);
    }
    const long long q0 = static_cast<long long>(it) * kStep;
    const uint16_t* qt = sQ + buf * kStep * kLd;
    const uint16_t* dot = sdO + buf * kStep * kLd;
    const float* lt = sL + buf * kStep;
    const float* dt = sD + buf * kStep;

    // Pᵀ: element e of tile j is key key0 + 8·(e/2), query q0 + 8j + 2t + e%2.
    // Rows past nq were zero-filled (Q, dO, LSE, D), so they add nothing.
    float s[kNS][4];
#pragma unroll
    for (int j = 0; j < kNS; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
    mma_abt<E, DP, kNS>(s, ka, qt + b_off<DP>(lane));
    if constexpr (!kVar) {
      // Only tiles where the first query misses some of the block's keys
      // need the causal mask.
      const bool masked = causal && visible_keys(q0, nq, nk, causal) < k0 + kBwdBK;
      with_mask(masked, [&](auto kMasked) {
#pragma unroll
        for (int j = 0; j < kNS; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = 8 * j + 2 * t + (e & 1);
            float p = ex2_ftz(s[j][e] * scale_log2 - lt[col] * kLog2e);
            if (kMasked && key0 + 8 * (e >> 1) >= visible_keys(q0 + col, nq, nk, true)) p = 0.f;
            s[j][e] = p;
          }
      });
      mma_pb<E, DP, kNS>(acc_dv, s, dot + bt_off<DP>(lane));
    } else {
      // Only steps where some row misses some of the block's keys need the
      // mask: every row of [q0, q_last] sees every key of [k0, k_last] when
      // the last row's first key is at most k0 and the first row's last key
      // at least k_last. A key whose queries cross its diagonal in this step
      // takes the masked copy (AlibiRow).
      const long long q_last = (q0 + kStep < nq ? q0 + kStep : nq) - 1;
      const bool masked = !(k_last < mk.key_hi(q0) && mk.key_lo(q_last) <= k0);
      AlibiRow<1> ar[2];
      bool uniform = true;
      if (md.slope_l2 != 0.f) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
          uniform &= ar[h].set(offset_of(q0, md.shift, key0 + 8 * h) + 2 * t, kStep - 7, md.slope_l2);
      }
      uint32_t pf[kStep / E::kK][4];
      [[maybe_unused]] const float* sb = nullptr;  // this thread's first score in the step's bias tile
      if constexpr (kFull) {
        if (ex.drop.on()) zbits = keep_bits_dkdv<kNS>(ex, q0, key0, lane);  // the warp together, before the dispatch
        if (ex.bias != nullptr) sb = sB + buf * kStep * kDkdvBiasLd + 2 * t * kDkdvBiasLd + warp * 16 + g;
      }
      with_variant_of<kFull>(masked || !uniform, mod, md.capped, [&](auto kMasked, auto kMod, auto kCap) {
        probs_dkdv<E, true, kMod, kMasked, kCap, kNS, Log2Lse, kFull, kDkdvBiasLd>(
            s, pf, scale_log2, Log2Lse{lt}, static_cast<int>(q0), t, qlo, qhi, md, ar, sb, kFull && ex.drop.on(),
            zbits);
      });
      mma_fb<E, DP>(acc_dv, pf, dot + bt_off<DP>(lane));  // with kMod, s now holds Pᵀ·dsoft
    }

    float dp[kNS][4];
#pragma unroll
    for (int j = 0; j < kNS; ++j) dp[j][0] = dp[j][1] = dp[j][2] = dp[j][3] = 0.f;
    mma_abt<E, DP, kNS>(dp, va, dot + b_off<DP>(lane));
    if constexpr (kFull) {
      if (ex.drop.on()) drop_by_bits(dp, zbits, ex.drop_scale());
    }
    ds_by_col(dp, s, dt, t);
    if constexpr (kFull) zero_unseen(dp, q0, t, qlo, qhi);
    mma_pb<E, DP, kNS>(acc_dk, dp, qt + bt_off<DP>(lane));
    __syncthreads();  // every warp is done with this buffer before it refills
  }
  cp_async_wait<0>();

  // dK and dV of key head kvh: k-like tensors have p.h / p.kv_group heads
  // per batch entry (their strides are per key head).
  const long long warp_key = k0 + warp * 16, kv_heads = kVar ? p.h / p.kv_group : p.h;
  if (warp_key < nk) {
    float* dk = head_of(static_cast<float*>(p.dk), kvh, kv_heads, p.dk_batch_stride, p.dk_head_stride);
    float* dv = head_of(static_cast<float*>(p.dv), kvh, kv_heads, p.dv_batch_stride, p.dv_head_stride);
    store_rows<DP>(dk + warp_key * p.dk_row_stride, acc_dk, nk - warp_key, p.dim, p.dk_row_stride,
                   static_cast<float>(p.scale));
    // dV's dropout factor, here rather than in Pᵀ∘Z (probs_dkdv).
    const Dropout drop = dropout_of(p);
    const float dv_scale = kFull && drop.on() ? static_cast<float>(drop.scale) : 1.f;
    store_rows<DP>(dv + warp_key * p.dv_row_stride, acc_dv, nk - warp_key, p.dim, p.dv_row_stride, dv_scale);
  }
}

template <typename E, int DP, bool kVar, bool kFull = false>
__device__ void dq_1rowblock(const Params& p) {
  static_assert(kVar || !kFull, "the _full kernels compute the _var variants too");
  const long long nq = p.nq, nk = p.nk;
  const bool causal = p.causal != 0;
  const uint16_t* __restrict__ q = static_cast<const uint16_t*>(p.q);
  const uint16_t* __restrict__ k = static_cast<const uint16_t*>(p.k);
  const uint16_t* __restrict__ v = static_cast<const uint16_t*>(p.v);
  const uint16_t* __restrict__ dout = static_cast<const uint16_t*>(p.dout);
  constexpr int kLd = ld_of<uint16_t, DP>();
  constexpr int kStep = bwd_step<kFull>();
  constexpr int kNS = kStep / 8;  // n8 tiles of S per warp: keys
  constexpr int kND = DP / 8;
  constexpr int kBiasLd = row_bias_ld<kStep>();
  require_launch(kBwdThreads, bwd_dq_smem_bytes<DP, kFull>());

  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sdO = sQ + kBwdBQ * kLd;
  uint16_t* sK = sdO + kBwdBQ * kLd;    // 2 buffers
  uint16_t* sV = sK + 2 * kStep * kLd;  // 2 buffers
  [[maybe_unused]] float* sB = reinterpret_cast<float*>(sV + 2 * kStep * kLd);  // kFull: 2 bias tiles [kBwdBQ, kBiasLd]

  long long bh, q0;
  query_block<kVar, kBwdBQ>(p, bh, q0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const SeqMask mk = seq_mask(p, bh);
  const long long q_real = kVar ? mk.lq : nq, k_real = kVar ? mk.lk : nk;
  const long long kvh = kVar ? kv_pair(p, bh) : bh;
  const uint16_t* kh = k + kvh * nk * DP;
  const uint16_t* vh = v + kvh * nk * DP;

  // This thread's rows g and g+8 of the warp's 16: keys they see (plain:
  // 0 … vis − 1; _var: lo … hi − 1, row_keys), LSE in log2 units and D.
  // Rows past nq (_var: past the length) see no key (and rows past nq are
  // not stored).
  long long vis[2] = {0, 0};
  int lo32[2] = {0, 0}, hi32[2] = {0, 0};
  float lse2[2], dr[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long row = q0 + warp * 16 + g + 8 * h;
    const bool ok = row < q_real;
    if constexpr (kVar) {
      long long lo, hi;
      row_keys(mk, row, lo, hi);
      lo32[h] = static_cast<int>(lo), hi32[h] = static_cast<int>(hi);
    } else {
      vis[h] = ok ? visible_keys(row, nq, nk, causal) : 0;
    }
    // __ldg: read-only for the whole kernel, which nvcc cannot prove
    // when the pointers come from p (it did from __restrict__ arguments).
    lse2[h] = ok ? __ldg(static_cast<const float*>(p.lse) + bh * nq + row) * kLog2e : Math<float>::inf();
    dr[h] = ok ? __ldg(static_cast<const float*>(p.delta) + bh * nq + row) : 0.f;
  }
  // Block skipping: the block's rows see keys from its first row's first
  // (plain: 0) to its last real row's last; steps t0 … t0 + n_it − 1.
  long long kv_begin = 0, kv_end = 0;
  if constexpr (kVar) {
    if (q0 < mk.lq) {
      kv_begin = mk.key_lo(q0);
      kv_end = mk.key_hi((q0 + kBwdBQ < mk.lq ? q0 + kBwdBQ : mk.lq) - 1);
    }
  } else {
    kv_end = visible_keys((q0 + kBwdBQ < nq ? q0 + kBwdBQ : nq) - 1, nq, nk, causal);
  }
  const int t0 = static_cast<int>(kv_begin / kStep);
  const int n_it = kv_end > kv_begin ? static_cast<int>((kv_end + kStep - 1) / kStep) - t0 : 0;
  const long long vis_min = kVar ? 0 : (vis[0] < vis[1] ? vis[0] : vis[1]);
  // _var: the keys both rows see, and the modifiers.
  const int lo_max = lo32[0] > lo32[1] ? lo32[0] : lo32[1], hi_min = hi32[0] < hi32[1] ? hi32[0] : hi32[1];
  const Mods md = kVar ? mods_of(score_mod<float>(p, bh, mk), static_cast<float>(p.scale)) : Mods{};
  [[maybe_unused]] const Extras ex = kFull ? extras_of(p, bh) : Extras{};
  const long long rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};

  // load_step starts copying key step k0's K and V into buffer buf, with
  // (kFull) the bias of the block's rows and the step's keys.
  [[maybe_unused]] const bool bias_aligned = kFull && bias_tile_aligned(ex.bias, nk);
  auto load_step = [&](long long k0, int buf) {
    cp_rows<kStep, DP>(sK + buf * kStep * kLd, kh, k0, k_real);
    cp_rows<kStep, DP>(sV + buf * kStep * kLd, vh, k0, k_real);
    if constexpr (kFull) {
      if (ex.bias != nullptr)
        cp_bias_tile<kBwdBQ, kStep, kBiasLd, kBwdThreads>(sB + buf * kBwdBQ * kBiasLd, ex.bias, q0, q_real, k0, nk, bias_aligned);
    }
  };
  cp_rows<kBwdBQ, DP>(sQ, q + bh * nq * DP, q0, q_real);
  cp_rows<kBwdBQ, DP>(sdO, dout + bh * nq * DP, q0, q_real);
  if (n_it > 0) load_step(static_cast<long long>(t0) * kStep, 0);
  cp_async_commit();

  const float scale_log2 = static_cast<float>(p.scale) * kLog2e;
  float acc[kND][4];
#pragma unroll
  for (int n = 0; n < kND; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  const uint16_t* qa = sQ + a_off<DP>(warp, lane);
  const uint16_t* doa = sdO + a_off<DP>(warp, lane);

  for (int it = 0; it < n_it; ++it) {
    const int buf = it % 2;
    const long long k0 = static_cast<long long>(t0 + it) * kStep;
    if (it + 1 < n_it) {
      load_step(k0 + kStep, 1 - buf);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint16_t* kt = sK + buf * kStep * kLd;
    const uint16_t* vt = sV + buf * kStep * kLd;

    // P: element e of tile j is row g + 8·(e/2), key k0 + 8j + 2t + e%2.
    // Keys past a row's last visible one (past nk too: those K rows were
    // zero-filled) are masked where a tile reaches them.
    float s[kNS][4];
#pragma unroll
    for (int j = 0; j < kNS; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
    mma_abt<E, DP, kNS>(s, qa, kt + b_off<DP>(lane));
    if constexpr (!kVar) {
      probs_by_row(s, scale_log2, lse2, k0 + kStep > vis_min, k0, t, vis);
    } else {
      // With kMod, s holds P·dsoft (probs_dq). A row crossing its diagonal
      // in this step takes the masked copy (AlibiRow).
      const bool masked = k0 < lo_max || k0 + kStep > hi_min;
      AlibiRow<-1> ar[2];
      bool uniform = true;
      if (md.slope_l2 != 0.f) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
          uniform &= ar[h].set(offset_of(q0 + warp * 16 + g + 8 * h, md.shift, k0) - 2 * t, kStep - 7, md.slope_l2);
      }
      [[maybe_unused]] const float* sb = nullptr;  // this thread's first score in the step's bias tile
      if constexpr (kFull) {
        if (ex.bias != nullptr) sb = sB + buf * kBwdBQ * kBiasLd + (warp * 16 + g) * kBiasLd + 2 * t;
      }
      with_variant_of<kFull>(masked || !uniform, md.on, md.capped, [&](auto kMasked, auto kMod, auto kCap) {
        probs_dq<E, kMod, kMasked, kCap, kNS, kFull, true, kBiasLd>(s, scale_log2, lse2, static_cast<int>(k0), t,
                                                                     lo32, hi32, md, ar, sb);
      });
    }
    float dp[kNS][4];
#pragma unroll
    for (int j = 0; j < kNS; ++j) dp[j][0] = dp[j][1] = dp[j][2] = dp[j][3] = 0.f;
    mma_abt<E, DP, kNS>(dp, doa, vt + b_off<DP>(lane));
    if constexpr (kFull) {
      if (ex.drop.on()) drop_by_row(dp, ex, rows, k0, t, ex.drop_scale());
    }
    ds_by_row(dp, s, dr);
    if constexpr (kFull) zero_unseen(dp, k0, t, lo32, hi32);
    mma_pb<E, DP, kNS>(acc, dp, kt + bt_off<DP>(lane));
    __syncthreads();
  }
  cp_async_wait<0>();

  const long long warp_row = q0 + warp * 16;
  if (warp_row < nq) {
    float* dq = head_of(static_cast<float*>(p.dq), bh, p.h, p.dq_batch_stride, p.dq_head_stride);
    store_rows<DP>(dq + warp_row * p.dq_row_stride, acc, nq - warp_row, p.dim, p.dq_row_stride,
                   static_cast<float>(p.scale));
  }
}

// The dBias kernel's shared memory: Q, dO, K and V tiles of kBwdStep rows,
// one buffer each, and the block's bias tile (fp32). select.go repeats it
// (mmaDbiasSmem).
template <int DP> __host__ __device__ constexpr int bwd_dbias_smem_bytes() {
  return 4 * kBwdStep * ld_of<uint16_t, DP>() * 2 + kBwdBQ * row_bias_ld<kBwdStep>() * 4;
}

// dbias_1tile writes dBias for kBwdBQ rows × kBwdStep keys of one bias
// slice on tensor cores: the sum of dS = P∘(Z∘dP − D) (no softcap
// derivative: the bias is added after the softcap) over every query pair
// that reads the slice, batch entries then heads in order, in registers,
// and 0 where no pair sees the entry. It recomputes S = Q·Kᵀ and
// dP = dO·Vᵀ from the 16-bit copies as dq_1rowblock does, a pair at a
// time, so that each entry is written once, by one thread, in a fixed
// order (no atomics, no scratch: the bias gradient of a slice broadcast
// over B·H pairs is summed where it is computed). The host launches it
// only when the caller wants dBias, with the whole call in one launch
// (pair0 = 0), over slices × row tiles × key tiles.
template <typename E, int DP>
__device__ void dbias_1tile(const Params& p) {
  const long long nq = p.nq, nk = p.nk;
  const uint16_t* __restrict__ q = static_cast<const uint16_t*>(p.q);
  const uint16_t* __restrict__ k = static_cast<const uint16_t*>(p.k);
  const uint16_t* __restrict__ v = static_cast<const uint16_t*>(p.v);
  const uint16_t* __restrict__ dout = static_cast<const uint16_t*>(p.dout);
  constexpr int kLd = ld_of<uint16_t, DP>();
  constexpr int kNS = kBwdStep / 8;  // n8 tiles of S per warp: keys
  static_assert(kBwdBQ == kBwdStep, "one tile shape for rows and keys");
  require_launch(kBwdThreads, bwd_dbias_smem_bytes<DP>());

  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sdO = sQ + kBwdStep * kLd;
  uint16_t* sK = sdO + kBwdStep * kLd;
  uint16_t* sV = sK + kBwdStep * kLd;
  float* sB = reinterpret_cast<float*>(sV + kBwdStep * kLd);  // the bias tile [kBwdBQ, kBiasLd]
  constexpr int kBiasLd = row_bias_ld<kBwdStep>();

  const long long q_tiles = (nq + kBwdBQ - 1) / kBwdBQ, k_tiles = (nk + kBwdStep - 1) / kBwdStep;
  const long long slice = blockIdx.x / (q_tiles * k_tiles);
  const long long q0 = blockIdx.x / k_tiles % q_tiles * kBwdBQ, k0 = blockIdx.x % k_tiles * kBwdStep;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const long long rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  const BiasSlice bs = bias_slice(p, slice);
  const long long heads = bs.heads;
  const float scale_log2 = static_cast<float>(p.scale) * kLog2e;
  const uint16_t* qa = sQ + a_off<DP>(warp, lane);
  const uint16_t* doa = sdO + a_off<DP>(warp, lane);

  float acc[kNS][4];
#pragma unroll
  for (int j = 0; j < kNS; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

  // Every pair that reads the slice adds the same bias tile: one copy, which
  // lands with the first pair's tiles (zeros past nq and nk: those rows
  // and keys are seen by no pair).
  const float* bias = static_cast<const float*>(p.bias) + bs.sb * p.bias_batch_stride + bs.sh * p.bias_head_stride;
  cp_bias_tile<kBwdBQ, kBwdStep, kBiasLd, kBwdThreads>(sB, bias, q0, nq, k0, nk, bias_tile_aligned(bias, nk));
  const float* sb = sB + (warp * 16 + g) * kBiasLd + 2 * t;  // this thread's first score

  // The pairs that add to the tile, batch entries then heads in order:
  // entries whose sequence lengths leave the tile unseen add nothing.
  // seen_from returns the first such entry from b on (bs.b_hi: none left).
  auto seen_from = [&](long long b) {
    while (b < bs.b_hi && !seq_mask(p, b * heads).tile_seen(q0, kBwdBQ, k0, kBwdStep)) ++b;
    return b;
  };
  // load_pair starts copying pair (b, h)'s tiles.
  auto load_pair = [&](long long b, long long h) {
    const SeqMask mk = seq_mask(p, b * heads);
    const long long bh = b * heads + h, kvh = kv_pair(p, bh);
    cp_rows<kBwdStep, DP>(sQ, q + bh * nq * DP, q0, mk.lq);
    cp_rows<kBwdStep, DP>(sdO, dout + bh * nq * DP, q0, mk.lq);
    cp_rows<kBwdStep, DP>(sK, k + kvh * nk * DP, k0, mk.lk);
    cp_rows<kBwdStep, DP>(sV, v + kvh * nk * DP, k0, mk.lk);
  };
  long long b = seen_from(bs.b_lo), h = bs.h_lo;
  if (b < bs.b_hi) load_pair(b, h);
  cp_async_commit();  // with the bias tile

  while (b < bs.b_hi) {
    const SeqMask mk = seq_mask(p, b * heads);
    const long long bh = b * heads + h;
    int lo32[2], hi32[2];
    float lse2[2], dr[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      long long lo, hi;
      row_keys(mk, rows[i], lo, hi);
      lo32[i] = static_cast<int>(lo), hi32[i] = static_cast<int>(hi);
      const bool ok = rows[i] < mk.lq;
      lse2[i] = ok ? __ldg(static_cast<const float*>(p.lse) + bh * nq + rows[i]) * kLog2e : Math<float>::inf();
      dr[i] = ok ? __ldg(static_cast<const float*>(p.delta) + bh * nq + rows[i]) : 0.f;
    }
    const int lo_max = lo32[0] > lo32[1] ? lo32[0] : lo32[1], hi_min = hi32[0] < hi32[1] ? hi32[0] : hi32[1];
    const bool masked = k0 < lo_max || k0 + kBwdStep > hi_min;
    const Mods md = mods_of(score_mod<float>(p, bh, mk), static_cast<float>(p.scale));
    const Extras ex = extras_of(p, bh);
    cp_async_wait<0>();
    __syncthreads();

    // Both products first, so that the next pair's tiles load while this
    // one's scores go through the softmax, dropout and dS.
    float s[kNS][4], dp[kNS][4];
#pragma unroll
    for (int j = 0; j < kNS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.f;
    mma_abt<E, DP, kNS>(s, qa, sK + b_off<DP>(lane));
    mma_abt<E, DP, kNS>(dp, doa, sV + b_off<DP>(lane));
    long long nb = b, nh = h + 1;
    if (nh == bs.h_hi) nb = seen_from(b + 1), nh = bs.h_lo;
    __syncthreads();  // every warp has read this pair's tiles
    if (nb < bs.b_hi) {
      load_pair(nb, nh);
      cp_async_commit();
    }

    AlibiRow<-1> ar[2];
    bool uniform = true;
    if (md.slope_l2 != 0.f) {
#pragma unroll
      for (int i = 0; i < 2; ++i)
        uniform &= ar[i].set(offset_of(rows[i], md.shift, k0) - 2 * t, kBwdStep - 7, md.slope_l2);
    }
    with_variant_of<true>(masked || !uniform, md.on, md.capped, [&](auto kMasked, auto kMod, auto kCap) {
      probs_dq<E, kMod, kMasked, kCap, kNS, true, false, kBiasLd>(s, scale_log2, lse2, static_cast<int>(k0), t, lo32,
                                                                   hi32, md, ar, sb);
    });
    if (ex.drop.on()) drop_by_row(dp, ex, rows, k0, t, ex.drop_scale());
    ds_by_row(dp, s, dr);
    zero_unseen(dp, k0, t, lo32, hi32);
#pragma unroll
    for (int j = 0; j < kNS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] += dp[j][e];
    b = nb, h = nh;
  }
  cp_async_wait<0>();  // the bias tile's copies, where no pair saw the tile

  store_dbias(p, bs, acc, rows, k0, t);
}

}  // namespace mma
}  // namespace flash
