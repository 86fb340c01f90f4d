// Backward pass on CUDA cores, in the precision of T. Three kernels, each
// writing every output element from exactly one thread in a fixed order, so
// results are bit-identical from run to run (no atomics):
//   dot_do_o          D = rowsum(dO∘O)
//   dkdv_1colblock    dK, dV for one tile of keys, looping over query tiles
//   dq_1rowblock      dQ for one tile of queries, looping over key tiles
// dQ gets its own pass instead of atomics across key tiles; it recomputes P
// and dP once more, the price of determinism on this path.
#pragma once
#include "simt_tile.cuh"
#include "philox.cuh"
#include "variants.cuh"

namespace flash {
namespace simt {

// dot_do_o computes D_i = Σ_d dO_id·O_id − dLSE_i (the LSE gradient,
// where the caller gave one: the LSE's own contribution to dS_ij is
// P_ij·dLSE_i, which folds into D), one thread per query row of the
// b·h·nq rows, with the fma chain the other kernels use for dP = dO·V (see
// simt_tile.cuh). The sizes are read once and the row split in 32 bits (a
// tensor has at most kernels.MaxElements < 2³¹ elements, so b·h·nq fits);
// O and dO are read through the read-only path (__ldg), as the loads of
// restrict-qualified arguments were before Params: each thread walks its
// own row, so a warp's loads are 32 rows apart and gain from that cache.
template <typename T>
__device__ void dot_do_o(const Params& p) {
  const long long rows = p.b * p.h * p.nq, dim = p.dim;
  const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const unsigned nq = static_cast<unsigned>(p.nq);
  const unsigned bh = static_cast<unsigned>(row) / nq, i = static_cast<unsigned>(row) - bh * nq;
  const T* o = head_of(static_cast<const T*>(p.o), bh, p.h, p.o_batch_stride, p.o_head_stride) + i * p.o_row_stride;
  const T* dout =
      head_of(static_cast<const T*>(p.dout), bh, p.h, p.dout_batch_stride, p.dout_head_stride) + i * p.dout_row_stride;
  // Padding rows (past the lengths) get D = 0 whatever dO holds there: their
  // probabilities are 0, and 0 times a NaN D would not be.
  T acc = T(0);
  if (i < seq_mask(p, bh).lq) {
    for (long long d = 0; d < dim; ++d) acc = Math<T>::fma(__ldg(dout + d), __ldg(o + d), acc);
    if (p.dlse != nullptr) acc -= static_cast<const T*>(p.dlse)[row];
  }
  static_cast<T*>(p.delta)[row] = acc;
}

// pair_grad returns dS = P∘(dP·Z − D) of a visible pair, the gradient with
// respect to its score, given pr = P, dp = dO·V and d = D of its row, with
// Z the pair's dropout factor (1/(1−p) kept, 0 dropped; 1 without dropout),
// and turns pr into P·Z, the probability that dV takes. A dropped pair's
// factors are selected, not multiplied, so that an infinite dP stays out.
template <typename T>
__device__ __forceinline__ T pair_grad(T& pr, T dp, T d, const Dropout& drop, long long pair, long long i, long long j) {
  if (!drop.on()) return pr * (dp - d);
  const bool kept = drop.kept(pair, i, j);
  const T ds = pr * ((kept ? dp * T(drop.scale) : T(0)) - d);
  pr = kept ? pr * T(drop.scale) : T(0);
  return ds;
}

// row_products computes, for the thread's query row ty of the shared tiles
// and its keys tx + 8c, s = q·k and dp = dO·v with one fma chain each, in
// the order the forward's products use.
template <typename T, int DP, int TILE>
__device__ __forceinline__ void row_products(T (&s)[TILE / 8], T (&dp)[TILE / 8], const T* sQ, const T* sdO,
                                             const T* sK, const T* sV) {
  constexpr int kLd = ld<DP>();
  const int ty = threadIdx.x / 8, tx = threadIdx.x % 8;
#pragma unroll
  for (int c = 0; c < TILE / 8; ++c) s[c] = dp[c] = T(0);
#pragma unroll 8
  for (int d = 0; d < DP; ++d) {
    const T qd = sQ[ty * kLd + d], dod = sdO[ty * kLd + d];
#pragma unroll
    for (int c = 0; c < TILE / 8; ++c) {
      s[c] = Math<T>::fma(qd, sK[(tx + 8 * c) * kLd + d], s[c]);
      dp[c] = Math<T>::fma(dod, sV[(tx + 8 * c) * kLd + d], dp[c]);
    }
  }
}

// dkdv_1colblock accumulates, for TILE keys j of one key head,
//   dV_j = Σ_h Σ_i P_ij dO_i   and   dK_j = scale · Σ_h Σ_i dS_ij Q_i,
// over the query heads h of its group (one under plain attention, in
// order), with P_ij = exp(s_ij − LSE_i) recomputed from the saved LSE,
// s_ij the scaled and modified score, and dS_ij = P_ij (dO_i·V_j − D_i)
// times the softcap's derivative. Thread rows are keys here.
template <typename T, int DP, int TILE>
__device__ void dkdv_1colblock(const Params& p) {
  using M = Math<T>;
  const long long nq = p.nq, nk = p.nk, dim = p.dim;
  constexpr int kLd = ld<DP>();
  constexpr int kPerS = TILE / 8;
  constexpr int kPerO = DP / 8;
  require_launch(TILE * 8, bwd_smem_elems<DP, TILE>() * sizeof(T));

  T* sK = reinterpret_cast<T*>(smem);
  T* sV = sK + TILE * kLd;
  T* sQ = sV + TILE * kLd;
  T* sdO = sQ + TILE * kLd;
  T* sPt = sdO + TILE * kLd;         // Pᵀ tile [TILE keys, TILE+1]
  T* sdSt = sPt + TILE * (TILE + 1);  // dSᵀ tile
  T* sLse = sdSt + TILE * (TILE + 1);  // LSE of the query tile
  T* sDelta = sLse + TILE;

  const long long tiles = (nk + TILE - 1) / TILE;
  const long long kvh = blockIdx.x / tiles, kv_heads = p.h / p.kv_group;
  const long long k0 = (blockIdx.x % tiles) * TILE;
  const int ty = threadIdx.x / 8, tx = threadIdx.x % 8;
  const long long key = k0 + ty;

  // A group lies in one batch entry, so its heads share the mask. Padding
  // rows and keys (past the lengths) load as zeros, here and below: their
  // probabilities are 0, and 0 times whatever the caller left there could
  // be NaN.
  const SeqMask mask = seq_mask(p, kvh * p.kv_group);
  const Dropout drop = dropout_of(p);
  load_tile<T, DP, TILE>(sK, head_of(static_cast<const T*>(p.k), kvh, kv_heads, p.k_batch_stride, p.k_head_stride),
                         k0, mask.lk, dim, p.k_row_stride);
  load_tile<T, DP, TILE>(sV, head_of(static_cast<const T*>(p.v), kvh, kv_heads, p.v_batch_stride, p.v_head_stride),
                         k0, mask.lk, dim, p.v_row_stride);
  const T sc = T(p.scale);

  T acc_dk[kPerO], acc_dv[kPerO];
#pragma unroll
  for (int c = 0; c < kPerO; ++c) acc_dk[c] = acc_dv[c] = T(0);

  // Only rows from the first that sees key k0 to the last that sees the
  // tile's last real key contribute.
  const long long last_key = (k0 + TILE < mask.lk ? k0 + TILE : mask.lk) - 1;
  const long long q_begin = k0 <= last_key ? mask.query_lo(k0) / TILE * TILE : 0;
  const long long q_end = k0 <= last_key ? mask.query_hi(last_key) : 0;
  for (long long r = 0; r < p.kv_group; ++r) {
    const long long bh = kvh * p.kv_group + r;
    const Scores<T> score = scores_of<T>(p, bh, mask);
    const long long pair = p.pair0 + bh;
    const T* qh = head_of(static_cast<const T*>(p.q), bh, p.h, p.q_batch_stride, p.q_head_stride);
    const T* doh = head_of(static_cast<const T*>(p.dout), bh, p.h, p.dout_batch_stride, p.dout_head_stride);
    const T* lh = static_cast<const T*>(p.lse) + bh * nq;
    const T* dh = static_cast<const T*>(p.delta) + bh * nq;
    for (long long q0 = q_begin; q0 < q_end; q0 += TILE) {
      __syncthreads();
      load_tile<T, DP, TILE>(sQ, qh, q0, mask.lq, dim, p.q_row_stride);
      load_tile<T, DP, TILE>(sdO, doh, q0, mask.lq, dim, p.dout_row_stride);
      if (threadIdx.x < TILE) {
        const long long i = q0 + threadIdx.x;
        // Rows past nq, and rows that see no key (LSE = +inf), are masked
        // below before their LSE is used.
        sLse[threadIdx.x] = i < nq ? lh[i] : T(0);
        sDelta[threadIdx.x] = i < mask.lq ? dh[i] : T(0);
      }
      __syncthreads();

      T s[kPerS], dp[kPerS];
#pragma unroll
      for (int c = 0; c < kPerS; ++c) s[c] = dp[c] = T(0);
#pragma unroll 8
      for (int d = 0; d < DP; ++d) {
        const T kd = sK[ty * kLd + d], vd = sV[ty * kLd + d];
#pragma unroll
        for (int c = 0; c < kPerS; ++c) {
          s[c] = M::fma(sQ[(tx + 8 * c) * kLd + d], kd, s[c]);
          dp[c] = M::fma(sdO[(tx + 8 * c) * kLd + d], vd, dp[c]);
        }
      }
#pragma unroll
      for (int c = 0; c < kPerS; ++c) {
        const int qi = tx + 8 * c;
        const long long i = q0 + qi;
        T pr = T(0), ds = T(0);
        if (i < nq && mask.sees(i, key)) {
          // dK takes the gradient of scale·q·k: dS times the softcap's
          // derivative.
          T dsoft;
          pr = M::exp(score(s[c], i, key, dsoft) - sLse[qi]);
          ds = pair_grad(pr, dp[c], sDelta[qi], drop, pair, i, key) * dsoft;
        }
        sPt[ty * (TILE + 1) + qi] = pr;
        sdSt[ty * (TILE + 1) + qi] = ds;
      }
      __syncwarp();  // row ty of sPt/sdSt is written and read by one warp

      // Only the rows that see this key: a masked pair's zero times a NaN or
      // infinite dO or Q elsewhere in the tile would not be zero.
      const int qi_lo = clamp_tile(mask.query_lo(key) - q0, TILE), qi_hi = clamp_tile(mask.query_hi(key) - q0, TILE);
      for (int qi = qi_lo; qi < qi_hi; ++qi) {
        const T pr = sPt[ty * (TILE + 1) + qi], ds = sdSt[ty * (TILE + 1) + qi];
#pragma unroll
        for (int c = 0; c < kPerO; ++c) {
          acc_dv[c] = M::fma(pr, sdO[qi * kLd + tx + 8 * c], acc_dv[c]);
          acc_dk[c] = M::fma(ds, sQ[qi * kLd + tx + 8 * c], acc_dk[c]);
        }
      }
    }
  }

  if (key < nk) {
    T* dk = head_of(static_cast<T*>(p.dk), kvh, kv_heads, p.dk_batch_stride, p.dk_head_stride);
    T* dv = head_of(static_cast<T*>(p.dv), kvh, kv_heads, p.dv_batch_stride, p.dv_head_stride);
    store_row<T, DP>(dk + key * p.dk_row_stride, acc_dk, sc, dim);
    store_row<T, DP>(dv + key * p.dv_row_stride, acc_dv, T(1), dim);
  }
}

// dq_1rowblock accumulates dQ_i = scale · Σ_j dS_ij K_j for TILE query rows,
// recomputing P and dP exactly as dkdv_1colblock does. Thread rows are
// queries.
template <typename T, int DP, int TILE>
__device__ void dq_1rowblock(const Params& p) {
  using M = Math<T>;
  const long long nq = p.nq, dim = p.dim;
  constexpr int kLd = ld<DP>();
  constexpr int kPerS = TILE / 8;
  constexpr int kPerO = DP / 8;
  require_launch(TILE * 8, bwd_smem_elems<DP, TILE>() * sizeof(T));

  T* sQ = reinterpret_cast<T*>(smem);
  T* sdO = sQ + TILE * kLd;
  T* sK = sdO + TILE * kLd;
  T* sV = sK + TILE * kLd;
  T* sdS = sV + TILE * kLd;  // [TILE queries, TILE+1]

  const long long tiles = (nq + TILE - 1) / TILE;
  const long long bh = blockIdx.x / tiles;
  const long long q0 = (blockIdx.x % tiles) * TILE;
  const int ty = threadIdx.x / 8, tx = threadIdx.x % 8;
  const long long row = q0 + ty;
  const long long kvh = kv_pair(p, bh), kv_heads = p.h / p.kv_group;
  const T* kh = head_of(static_cast<const T*>(p.k), kvh, kv_heads, p.k_batch_stride, p.k_head_stride);
  const T* vh = head_of(static_cast<const T*>(p.v), kvh, kv_heads, p.v_batch_stride, p.v_head_stride);
  const SeqMask mask = seq_mask(p, bh);
  const Scores<T> score = scores_of<T>(p, bh, mask);
  const Dropout drop = dropout_of(p);
  const long long pair = p.pair0 + bh;

  load_tile<T, DP, TILE>(sQ, head_of(static_cast<const T*>(p.q), bh, p.h, p.q_batch_stride, p.q_head_stride), q0, mask.lq,
                         dim, p.q_row_stride);
  load_tile<T, DP, TILE>(sdO, head_of(static_cast<const T*>(p.dout), bh, p.h, p.dout_batch_stride, p.dout_head_stride),
                         q0, mask.lq, dim, p.dout_row_stride);
  const T sc = T(p.scale);
  const long long lo = row < nq ? mask.key_lo(row) : 0, hi = row < nq ? mask.key_hi(row) : 0;
  const long long last = (q0 + TILE < mask.lq ? q0 + TILE : mask.lq) - 1;
  const long long kv_begin = q0 <= last ? mask.key_lo(q0) / TILE * TILE : 0;
  const long long kv_end = q0 <= last ? mask.key_hi(last) : 0;
  // Only read for visible keys, so rows with LSE = +inf never use it.
  const T lse_row = lo < hi ? static_cast<const T*>(p.lse)[bh * nq + row] : T(0);
  const T d_row = row < mask.lq ? static_cast<const T*>(p.delta)[bh * nq + row] : T(0);

  T acc[kPerO];
#pragma unroll
  for (int c = 0; c < kPerO; ++c) acc[c] = T(0);

  for (long long k0 = kv_begin; k0 < kv_end; k0 += TILE) {
    __syncthreads();
    load_tile<T, DP, TILE>(sK, kh, k0, mask.lk, dim, p.k_row_stride);
    load_tile<T, DP, TILE>(sV, vh, k0, mask.lk, dim, p.v_row_stride);
    __syncthreads();

    T s[kPerS], dp[kPerS];
    row_products<T, DP, TILE>(s, dp, sQ, sdO, sK, sV);
#pragma unroll
    for (int c = 0; c < kPerS; ++c) {
      const int kj = tx + 8 * c;
      const long long key = k0 + kj;
      T ds = T(0);
      if (lo <= key && key < hi) {
        T dsoft;
        T pr = M::exp(score(s[c], row, key, dsoft) - lse_row);
        ds = pair_grad(pr, dp[c], d_row, drop, pair, row, key) * dsoft;
      }
      sdS[ty * (TILE + 1) + kj] = ds;
    }
    __syncwarp();

    // Only the keys this row sees (see dkdv_1colblock).
    const int kj_lo = clamp_tile(lo - k0, TILE), kj_hi = clamp_tile(hi - k0, TILE);
    for (int kj = kj_lo; kj < kj_hi; ++kj) {
      const T ds = sdS[ty * (TILE + 1) + kj];
#pragma unroll
      for (int c = 0; c < kPerO; ++c) acc[c] = M::fma(ds, sK[kj * kLd + tx + 8 * c], acc[c]);
    }
  }

  if (row < nq) {
    T* dq = head_of(static_cast<T*>(p.dq), bh, p.h, p.dq_batch_stride, p.dq_head_stride);
    store_row<T, DP>(dq + row * p.dq_row_stride, acc, sc, dim);
  }
}

// dbias_1tile writes dBias for TILE rows × TILE keys of one bias slice:
// the sum of dS = P∘(dP − D) (no softcap derivative: the bias is added
// after the softcap) over every query pair that reads the slice, batch
// entries then heads in order, and 0 where none sees the entry. It
// recomputes S and dP as dq_1rowblock does; the host launches it only when
// the caller wants dBias, and then with the whole call in one launch, so
// that every pair that shares a slice is on the device (pair0 = 0). Thread
// rows are queries.
template <typename T, int DP, int TILE>
__device__ void dbias_1tile(const Params& p) {
  using M = Math<T>;
  const long long nq = p.nq, nk = p.nk, dim = p.dim;
  constexpr int kLd = ld<DP>();
  constexpr int kPerS = TILE / 8;
  require_launch(TILE * 8, bwd_smem_elems<DP, TILE>() * sizeof(T));

  T* sQ = reinterpret_cast<T*>(smem);
  T* sdO = sQ + TILE * kLd;
  T* sK = sdO + TILE * kLd;
  T* sV = sK + TILE * kLd;

  const long long q_tiles = (nq + TILE - 1) / TILE, k_tiles = (nk + TILE - 1) / TILE;
  const long long slice = blockIdx.x / (q_tiles * k_tiles);
  const long long q0 = blockIdx.x / k_tiles % q_tiles * TILE, k0 = blockIdx.x % k_tiles * TILE;
  const int ty = threadIdx.x / 8, tx = threadIdx.x % 8;
  const long long row = q0 + ty;
  const BiasSlice bs = bias_slice(p, slice);
  const long long heads = bs.heads;
  const long long kv_heads = p.h / p.kv_group;
  const Dropout drop = dropout_of(p);

  T acc[kPerS];
#pragma unroll
  for (int c = 0; c < kPerS; ++c) acc[c] = T(0);

  for (long long b = bs.b_lo; b < bs.b_hi; ++b) {
    const SeqMask mask = seq_mask(p, b * heads);
    if (!mask.tile_seen(q0, TILE, k0, TILE)) continue;  // nothing to add for this entry
    const long long lo = row < nq ? mask.key_lo(row) : 0, hi = row < nq ? mask.key_hi(row) : 0;
    for (long long h = bs.h_lo; h < bs.h_hi; ++h) {
      const long long bh = b * heads + h, kvh = kv_pair(p, bh);
      const Scores<T> score = scores_of<T>(p, bh, mask);
      __syncthreads();  // the previous pair's tiles are no longer read
      load_tile<T, DP, TILE>(sQ, head_of(static_cast<const T*>(p.q), bh, p.h, p.q_batch_stride, p.q_head_stride), q0,
                             mask.lq, dim, p.q_row_stride);
      load_tile<T, DP, TILE>(sdO, head_of(static_cast<const T*>(p.dout), bh, p.h, p.dout_batch_stride, p.dout_head_stride),
                             q0, mask.lq, dim, p.dout_row_stride);
      load_tile<T, DP, TILE>(sK, head_of(static_cast<const T*>(p.k), kvh, kv_heads, p.k_batch_stride, p.k_head_stride),
                             k0, mask.lk, dim, p.k_row_stride);
      load_tile<T, DP, TILE>(sV, head_of(static_cast<const T*>(p.v), kvh, kv_heads, p.v_batch_stride, p.v_head_stride),
                             k0, mask.lk, dim, p.v_row_stride);
      __syncthreads();
      if (lo >= hi || hi <= k0 || lo >= k0 + TILE) continue;  // this row sees none of the tile's keys

      T s[kPerS], dp[kPerS];
      row_products<T, DP, TILE>(s, dp, sQ, sdO, sK, sV);
      const T lse_row = static_cast<const T*>(p.lse)[bh * nq + row];
      const T d_row = static_cast<const T*>(p.delta)[bh * nq + row];
#pragma unroll
      for (int c = 0; c < kPerS; ++c) {
        const long long key = k0 + tx + 8 * c;
        if (lo <= key && key < hi) {
          T dsoft;
          T pr = M::exp(score(s[c], row, key, dsoft) - lse_row);
          acc[c] += pair_grad(pr, dp[c], d_row, drop, p.pair0 + bh, row, key);
        }
      }
    }
  }

  if (row < nq) {
    T* out = static_cast<T*>(p.dbias) + bs.sb * p.bias_batch_stride + bs.sh * p.bias_head_stride + row * nk;
#pragma unroll
    for (int c = 0; c < kPerS; ++c)
      if (k0 + tx + 8 * c < nk) out[k0 + tx + 8 * c] = acc[c];
  }
}

}  // namespace simt
}  // namespace flash
