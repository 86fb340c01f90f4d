// The attention variants on the device: which keys a row sees (per-sequence
// lengths, the causal mask, the window), the score modifiers (softcap,
// ALiBi) and grouped-query head addressing, read from Params. They mirror
// kernels.Mask and kernels.ModifyScore of the Go side one for one, so that
// every kernel family computes the function the float64 reference does.
#pragma once
#include "params.cuh"

namespace flash {

// SeqMask is what the masks leave visible in one batch entry: rows i < lq
// and keys j < lk are real, row i is aligned at a = i + shift (shift =
// lk − lq, bottom-right), and it sees the keys from a − left to a + right
// (−1: unbounded on that side) that are real. Every row sees one contiguous
// range of keys and every key is seen by one contiguous range of rows; all
// four bounds are nondecreasing, which is what block skipping relies on.
struct SeqMask {
  long long lq, lk, shift, left, right;

  // key_lo and key_hi bound the keys row i sees: key_lo(i) ≤ j < key_hi(i).
  // Padding rows (i ≥ lq) see none and get lo = hi = lk, keeping the order.
  __device__ __forceinline__ long long key_lo(long long i) const {
    if (i >= lq) return lk;
    if (left < 0) return 0;
    const long long lo = i + shift - left;
    return lo < 0 ? 0 : (lo > lk ? lk : lo);
  }
  __device__ __forceinline__ long long key_hi(long long i) const {
    if (i >= lq) return lk;
    if (right < 0) return lk;
    const long long lo = key_lo(i);
    long long hi = i + shift + right + 1;
    hi = hi > lk ? lk : hi;
    return hi < lo ? lo : hi;
  }
  // query_lo and query_hi bound the rows that see key j; padding keys
  // (j ≥ lk) are seen by none and get lo = hi = lq.
  __device__ __forceinline__ long long query_lo(long long j) const {
    if (j >= lk) return lq;
    if (right < 0) return 0;
    const long long lo = j - right - shift;
    return lo < 0 ? 0 : (lo > lq ? lq : lo);
  }
  __device__ __forceinline__ long long query_hi(long long j) const {
    if (j >= lk) return lq;
    if (left < 0) return lq;
    const long long lo = query_lo(j);
    long long hi = j + left - shift + 1;
    hi = hi > lq ? lq : hi;
    return hi < lo ? lo : hi;
  }
  __device__ __forceinline__ bool sees(long long i, long long j) const { return key_lo(i) <= j && j < key_hi(i); }
  // tile_seen reports whether some row of [q0, q0 + rows) sees some key
  // of [k0, k0 + cols): the bounds grow with the row, so the first and
  // the last real row decide it.
  __device__ __forceinline__ bool tile_seen(long long q0, long long rows, long long k0, long long cols) const {
    const long long last = (q0 + rows < lq ? q0 + rows : lq) - 1;
    return q0 <= last && key_lo(q0) < k0 + cols && key_hi(last) > k0;
  }
};

// batch_of and head_of_pair split query pair bh of a launch into the batch
// entry and query head of its call.
__device__ __forceinline__ long long batch_of(const Params& p, long long bh) { return (p.pair0 + bh) / p.heads; }
__device__ __forceinline__ long long head_of_pair(const Params& p, long long bh) { return (p.pair0 + bh) % p.heads; }

// seq_mask returns the mask of query pair bh's batch entry.
__device__ __forceinline__ SeqMask seq_mask(const Params& p, long long bh) {
  SeqMask m;
  m.lq = p.nq;
  m.lk = p.nk;
  if (p.q_lens != nullptr || p.k_lens != nullptr) {
    const long long b = batch_of(p, bh);
    if (p.q_lens != nullptr) m.lq = static_cast<const int*>(p.q_lens)[b];
    if (p.k_lens != nullptr) m.lk = static_cast<const int*>(p.k_lens)[b];
  }
  m.shift = m.lk - m.lq;
  m.left = p.mask_left;
  m.right = p.mask_right;
  return m;
}

// kv_pair is the key pair (of the launch's b·h / kv_group) that query pair
// bh reads.
__device__ __forceinline__ long long kv_pair(const Params& p, long long bh) {
  return static_cast<long long>(static_cast<unsigned>(bh) / static_cast<unsigned>(p.kv_group));
}

// ScoreMod applies the softcap and ALiBi, in that order, to a scaled score
// (natural units) of one query head, as kernels.ModifyScore does: the
// softcap c·tanh(s/c) with its derivative 1 − tanh², then − slope·|a − j|
// with a = i + shift the row's aligned position. tanh is the accurate
// library function in both precisions, not tanh.approx, whose 2⁻¹¹ error
// would exceed the float32 path's tolerance.
template <typename T>
struct ScoreMod {
  T cap, slope;
  long long shift;
  bool on;

  __device__ __forceinline__ T apply(T s, long long i, long long j, T& dsoft) const {
    dsoft = T(1);
    if (cap != T(0)) {
      const T t = tanh_of(s / cap);
      s = cap * t;
      dsoft = T(1) - t * t;
    }
    if (slope != T(0)) {
      const long long d = i + shift - j;
      s -= slope * static_cast<T>(d < 0 ? -d : d);
    }
    return s;
  }

 private:
  static __device__ __forceinline__ float tanh_of(float x) { return tanhf(x); }
  static __device__ __forceinline__ double tanh_of(double x) { return ::tanh(x); }
};

// score_mod returns query pair bh's ScoreMod for a row mask m.
template <typename T>
__device__ __forceinline__ ScoreMod<T> score_mod(const Params& p, long long bh, const SeqMask& m) {
  ScoreMod<T> f;
  f.cap = static_cast<T>(p.softcap);
  f.slope = p.alibi != nullptr ? static_cast<T>(static_cast<const double*>(p.alibi)[head_of_pair(p, bh)]) : T(0);
  f.shift = m.shift;
  f.on = f.cap != T(0) || f.slope != T(0);
  return f;
}

// bias_rows returns the bias slice of query pair bh (rows nk apart), or
// null without a bias.
template <typename T>
__device__ __forceinline__ const T* bias_rows(const Params& p, long long bh) {
  if (p.bias == nullptr) return nullptr;
  const long long pair = p.pair0 + bh;
  return static_cast<const T*>(p.bias) + pair / p.heads * p.bias_batch_stride + pair % p.heads * p.bias_head_stride;
}

// BiasSlice is the part of a dBias launch's work that slice `slice` of
// the bias is: its batch entry sb and head sh (0 in a broadcast
// dimension), and the batch entries [b_lo, b_hi) and heads [h_lo, h_hi)
// of the pairs that read it, one of each or all of a broadcast dimension
// (stride 0). heads is the call's query heads per batch entry; the launch
// holds the whole call (pair0 = 0).
struct BiasSlice {
  long long sb, sh, b_lo, b_hi, h_lo, h_hi, heads;
};
__device__ __forceinline__ BiasSlice bias_slice(const Params& p, long long slice) {
  BiasSlice s;
  s.heads = p.heads;
  const long long batches = p.b * p.h / s.heads;
  const long long slice_heads = p.bias_head_stride != 0 ? s.heads : 1;
  s.sb = slice / slice_heads, s.sh = slice % slice_heads;
  s.b_lo = p.bias_batch_stride != 0 ? s.sb : 0, s.b_hi = p.bias_batch_stride != 0 ? s.sb + 1 : batches;
  s.h_lo = p.bias_head_stride != 0 ? s.sh : 0, s.h_hi = p.bias_head_stride != 0 ? s.sh + 1 : s.heads;
  return s;
}

// Scores turns the product q·k of query pair bh's row i and key j into
// the score its softmax sees: scaled, then the softcap and ALiBi
// (ScoreMod), then the bias; dsoft receives the softcap's derivative. The
// CUDA-core kernels call it per element, for visible pairs only, so a
// masked pair's bias is never read.
template <typename T>
struct Scores {
  T scale;
  ScoreMod<T> mod;
  const T* bias;
  long long nk;

  __device__ __forceinline__ T operator()(T qk, long long i, long long j, T& dsoft) const {
    dsoft = T(1);
    T s = qk * scale;
    if (mod.on) s = mod.apply(s, i, j, dsoft);
    if (bias != nullptr) s += bias[i * nk + j];
    return s;
  }
};

template <typename T>
__device__ __forceinline__ Scores<T> scores_of(const Params& p, long long bh, const SeqMask& m) {
  return Scores<T>{static_cast<T>(p.scale), score_mod<T>(p, bh, m), bias_rows<T>(p, bh), p.nk};
}

}  // namespace flash
