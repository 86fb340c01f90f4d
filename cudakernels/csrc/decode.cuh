// Split-KV decoding (Flash-Decoding) on CUDA cores: the forward of a
// problem with few query rows per key head, a decode step's, against keys
// and values that are dense or paged (kernels.Pages), in the caller's
// float32 or float64 or in a key/value cache's storage format (bf16, fp16).
//
// Work: one warp is one unit, (key head, tile of up to R query rows of its
// group, key split). A key head's rows are its group's H/Hkv query heads
// times nq rows, contiguous in q ([b, h, nq, dim]), row r being row r mod nq
// of query head kvh·group + r / nq; a unit's keys are split s of p.splits of
// the union of its rows' visible ranges (SeqMask, bottom-right aligned
// per sequence). The warps of a block are independent units (Layout's
// kUnits of them), so no barrier but __syncwarp is needed, and a launch has
// ⌈units / kUnits⌉ blocks. Every key and value row a unit reads is read once for
// all its rows: the reason a group's rows share a unit.
//
// A unit loops over its keys in chunks of kChunk, double buffered in its
// warp's shared memory by cp.async: 16 keys of K and of V. The 32 lanes
// hold two lanes per key for the scores (each half of the row's 16-byte
// pieces, then one shuffle), and D/32 columns each for O += P·V, with the
// chunk's probabilities passed through shared memory. The softmax is
// online, in log2 units. With one split the unit writes o and lse; with
// more it writes its normalised partial output and (lse, seen) to
// p.part_o and p.part_lse, and decode_merge combines them as
// kernels.MergePartials does.
#pragma once
#include "common.cuh"
#include "mma.cuh"
#include "variants.cuh"

namespace flash {
namespace decode {

using mma::cp_async16;
using mma::cp_async_commit;
using mma::cp_async_wait;

constexpr int kChunk = 16;  // keys per chunk
constexpr int kPad = 16;    // bytes after each shared row: 8 keys' 16-byte reads fall in distinct banks
constexpr int kSmemBudget = 200 * 1024;  // a block's shared memory at most (Hopper allows 227 KiB)

__device__ __forceinline__ long long lmin(long long a, long long b) { return a < b ? a : b; }
__device__ __forceinline__ long long lmax(long long a, long long b) { return a > b ? a : b; }

// max_nan is the maximum that keeps a NaN, as Go's max: fmax drops it, and a
// NaN score must make its row NaN.
template <typename F>
__device__ __forceinline__ F max_nan(F a, F b) {
  return (a != a || a > b) ? a : b;
}
__device__ __forceinline__ float exp2_of(float x) { return exp2f(x); }
__device__ __forceinline__ double exp2_of(double x) { return ::exp2(x); }
__device__ __forceinline__ float log2_of(float x) { return log2f(x); }
__device__ __forceinline__ double log2_of(double x) { return ::log2(x); }

// modified is ScoreMod::apply out of line: the softcap's tanh and ALiBi
// are rare in decoding, and inlined into every row of every chunk loop they
// were most of a kernel's code. It takes the modifier's fields by value: a
// ScoreMod passed by reference would live in local memory, and the
// structure holding it with it.
template <typename F>
__device__ __noinline__ F modified_at(F cap, F slope, long long shift, F s, long long i, long long j) {
  F dsoft;
  return ScoreMod<F>{cap, slope, shift, true}.apply(s, i, j, dsoft);
}
template <typename F>
__device__ __forceinline__ F modified(const ScoreMod<F>& mod, F s, long long i, long long j) {
  return modified_at(mod.cap, mod.slope, mod.shift, s, i, j);
}

// row_range returns the keys row i sees, lo ≤ j < hi (lo = hi when none).
__device__ __forceinline__ void row_range(const SeqMask& m, long long i, long long& lo, long long& hi) {
  lo = m.key_lo(i);
  hi = m.key_hi(i);
  if (lo >= hi) lo = hi = 0;
}

// Elem converts a storage element to the compute type F.
template <typename F, typename S>
__device__ __forceinline__ F to_f(S x) {
  return static_cast<F>(x);
}
template <>
__device__ __forceinline__ float to_f<float, __nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float to_f<float, __half>(__half x) {
  return __half2float(x);
}

// from_f rounds a compute value to the storage type (the cache's append).
template <typename S, typename F>
__device__ __forceinline__ S from_f(F x) {
  return static_cast<S>(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16, float>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f<__half, float>(float x) {
  return __float2half_rn(x);
}

// Layout is a unit's shared memory, in bytes: two buffers of kChunk K and V
// rows of DP elements (+ kPad), R query rows of DP compute elements, and
// R × kChunk probabilities.
template <typename F, typename S, int DP, int R>
struct Layout {
  static constexpr int kRowBytes = DP * static_cast<int>(sizeof(S)) + kPad;
  static constexpr int kBuf = 2 * kChunk * kRowBytes;  // K then V
  static constexpr int kQ = R * DP * static_cast<int>(sizeof(F));
  static constexpr int kP = R * kChunk * static_cast<int>(sizeof(F));
  static constexpr int kUnit = 2 * kBuf + kQ + kP;
  // Units per block: four where their memory fits the budget, fewer for
  // the widest rows (float32 at DP = 256: two; float64 at 256: one).
  static constexpr int kUnits = kUnit * 4 <= kSmemBudget ? 4 : (kUnit * 2 <= kSmemBudget ? 2 : 1);
  static constexpr int kBlock = kUnits * kUnit;
};

// Keys locates the keys of one key head (kvh of the launch's b·hkv): dense
// rows from base, or rows of the pool's pages through the sequence's block
// table. Made once per unit, so that the loads divide by nothing wider than
// 32 bits.
struct Keys {
  long long base, row_stride, head_rows, hkv_rows;
  unsigned page_size;
  const int* table;  // the sequence's row of the block table; null: dense

  __device__ __forceinline__ long long row(long long j) const {
    if (table == nullptr) return base + j * row_stride;
    const unsigned jj = static_cast<unsigned>(j), pg = jj / page_size;
    return (table[pg] * hkv_rows + head_rows + (jj - pg * page_size)) * row_stride;
  }
};

__device__ __forceinline__ Keys keys_of(const Params& p, long long kvh, long long hkv) {
  const long long b = kvh / hkv, h = kvh - b * hkv;
  Keys k;
  k.row_stride = p.k_row_stride;
  if (p.page_size == 0) {
    k.base = b * p.k_batch_stride + h * p.k_head_stride;
    k.table = nullptr;
    k.page_size = 1;
    k.head_rows = k.hkv_rows = 0;
  } else {
    k.base = 0;
    k.table = static_cast<const int*>(p.block_table) + b * p.table_stride;
    k.page_size = static_cast<unsigned>(p.page_size);
    k.head_rows = h * p.page_size;
    k.hkv_rows = hkv * p.page_size;
  }
  return k;
}

// load_chunk starts copying keys [k0, k0 + n) of K and V into buffer buf:
// 16-byte cp.async where the rows allow it (aligned), else element by
// element, zero-filling each row's columns from dim to a whole piece.
template <typename S, int DP>
__device__ __forceinline__ void load_chunk(const S* k, const S* v, const Keys& keys, long long k0, int n,
                                           int dim, bool aligned, unsigned char* buf, int lane) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(S));
  constexpr int kRowBytes = DP * static_cast<int>(sizeof(S)) + kPad;
  const int pieces = (dim + kVec - 1) / kVec;
  if (aligned) {
#pragma unroll 1
    for (int i = lane; i < n * pieces; i += 32) {
      const int key = i / pieces, pc = i - key * pieces;
      const long long at = keys.row(k0 + key) + pc * kVec;
      unsigned char* dk = buf + key * kRowBytes + pc * 16;
      cp_async16(reinterpret_cast<float*>(dk), reinterpret_cast<const float*>(k + at), true);
      cp_async16(reinterpret_cast<float*>(dk + kChunk * kRowBytes), reinterpret_cast<const float*>(v + at), true);
    }
  } else {
    const int cols = pieces * kVec;
#pragma unroll 1
    for (int i = lane; i < n * cols; i += 32) {
      const int key = i / cols, c = i - key * cols;
      S* dk = reinterpret_cast<S*>(buf + key * kRowBytes) + c;
      S* dv = reinterpret_cast<S*>(buf + (kChunk + key) * kRowBytes) + c;
      if (c < dim) {
        const long long at = keys.row(k0 + key) + c;
        *dk = k[at];
        *dv = v[at];
      } else {
        *dk = from_f<S>(0.f);
        *dv = from_f<S>(0.f);
      }
    }
  }
  cp_async_commit();
}

// Piece is one 16-byte piece of a shared row as compute elements.
template <typename F, typename S>
struct Piece {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(S));
  F x[kVec];
  __device__ __forceinline__ void load(const unsigned char* at) {
    const uint4 raw = *reinterpret_cast<const uint4*>(at);
    const S* e = reinterpret_cast<const S*>(&raw);
#pragma unroll
    for (int i = 0; i < kVec; ++i) x[i] = to_f<F>(e[i]);
  }
};

// UnitRows is what every unit knows of itself: its split, key head and
// rows (r0 … r0 + nrows − 1 of the key head's group_rows), its mask, each
// row's key range [lo, hi) (empty for padding rows and rows past nrows),
// and its keys [from, to): split s of the union of the rows' ranges.
template <typename F, int R>
struct UnitRows {
  long long splits, s, kvh, hkv, group_rows, r0, pair0, from, to;
  int nrows;
  bool live;  // false for the launch's last units past b·hkv key heads
  SeqMask mk;
  long long lo[R], hi[R];

  __device__ __forceinline__ void init(const Params& p, long long unit) {
    hkv = p.h / p.kv_group;
    group_rows = p.kv_group * p.nq;
    const long long tiles = (group_rows + R - 1) / R;
    splits = p.splits;
    s = unit % splits;
    const long long tile = unit / splits % tiles;
    kvh = unit / (splits * tiles);
    live = kvh < p.b * hkv;
    if (!live) return;
    const long long b = kvh / hkv;
    nrows = static_cast<int>(lmin(R, group_rows - tile * R));
    r0 = tile * R;
    // The key head's first query pair (batch·h + head).
    pair0 = b * p.h + (kvh - b * hkv) * p.kv_group;
    mk = seq_mask(p, pair0);
    long long ulo = mk.lk, uhi = 0;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      lo[r] = hi[r] = 0;
      if (r < nrows) {
        row_range(mk, (r0 + r) % p.nq, lo[r], hi[r]);
        if (lo[r] < hi[r]) {
          ulo = lmin(ulo, lo[r]);
          uhi = lmax(uhi, hi[r]);
        }
      }
    }
    from = to = 0;
    if (ulo < uhi) {
      const long long per = (uhi - ulo + splits - 1) / splits;
      from = lmin(uhi, ulo + s * per);
      to = lmin(uhi, from + per);
    }
  }

  // mod returns row r's ScoreMod (its query head's).
  __device__ __forceinline__ ScoreMod<F> mod(const Params& p, int r) const {
    return score_mod<F>(p, pair0 + (r0 + r) / p.nq, mk);
  }

  // q_at returns row r's query row in q.
  template <typename T>
  __device__ __forceinline__ const T* q_at(const Params& p, int r) const {
    const long long pair = pair0 + (r0 + r) / p.nq, i = (r0 + r) % p.nq;
    return static_cast<const T*>(p.q) + (pair / p.h) * p.q_batch_stride + (pair % p.h) * p.q_head_stride +
           i * p.q_row_stride;
  }

  // seen reports whether row r sees a key of the unit's split.
  __device__ __forceinline__ bool seen(int r) const { return lmax(lo[r], from) < lmin(hi[r], to); }

  // store writes row r's output columns lane·C … of acc (normalised by
  // inv) and, from lane 0, its LSE: to o and lse with one split, else to
  // the split's partial results.
  template <int C>
  __device__ __forceinline__ void store(const Params& p, int r, const F (&acc)[C], F inv, F row_lse, int lane) const {
    const long long row = r0 + r;
    const int dim = static_cast<int>(p.dim);
    F* out;
    if (splits == 1) {
      const long long pair = pair0 + row / p.nq, i = row % p.nq;
      out = static_cast<F*>(p.o) + (pair / p.h) * p.o_batch_stride + (pair % p.h) * p.o_head_stride + i * p.o_row_stride;
      if (lane == 0) static_cast<F*>(p.lse)[pair * p.nq + i] = row_lse;
    } else {
      const long long at = (kvh * group_rows + row) * splits + s;
      out = static_cast<F*>(p.part_o) + at * dim;
      if (lane == 0) {
        static_cast<F*>(p.part_lse)[2 * at] = row_lse;
        static_cast<F*>(p.part_lse)[2 * at + 1] = seen(r) ? F(1) : F(0);
      }
    }
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int col = lane * C + c;
      if (col < dim) out[col] = acc[c] * inv;
    }
  }
};

// Chunks is a unit's double-buffered pipeline over its keys: wait returns
// the buffer holding chunk it (keys k0 … k0 + n − 1) after starting the
// copy of the next.
template <typename S, int DP, int kBuf>
struct Chunks {
  const S* k;
  const S* v;
  Keys keys;
  long long to;
  int dim;
  bool aligned;
  unsigned char* sm;

  __device__ __forceinline__ void init(const Params& p, long long kvh, long long hkv, long long from, long long to_,
                                       unsigned char* sm_, int lane) {
    k = static_cast<const S*>(p.k);
    v = static_cast<const S*>(p.v);
    keys = keys_of(p, kvh, hkv);
    to = to_;
    dim = static_cast<int>(p.dim);
    sm = sm_;
    aligned = (p.k_row_stride * static_cast<long long>(sizeof(S))) % 16 == 0 &&
              (reinterpret_cast<unsigned long long>(k) | reinterpret_cast<unsigned long long>(v)) % 16 == 0;
    if (from < to) load_chunk<S, DP>(k, v, keys, from, static_cast<int>(lmin(kChunk, to - from)), dim, aligned, sm, lane);
  }

  __device__ __forceinline__ unsigned char* wait(long long k0, long long it, int lane) {
    if (k0 + kChunk < to) {
      load_chunk<S, DP>(k, v, keys, k0 + kChunk, static_cast<int>(lmin(kChunk, to - k0 - kChunk)), dim, aligned,
                        sm + ((it + 1) & 1) * kBuf, lane);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncwarp();
    return sm + (it & 1) * kBuf;
  }
};

// online_step advances a row's online softmax by one chunk: x is a score
// (log2 units, −inf where masked) whose maximum over the chunk is cm; it
// returns the probability and updates m, with alpha the factor that
// rescales what was summed before. A row that has seen only −inf keeps
// alpha = 1 and gives 0 (NaN for a NaN score, which must reach the row).
template <typename F>
__device__ __forceinline__ F online_step(F x, F cm, F& m, F& alpha) {
  const F mn = max_nan(m, cm);
  F pr;
  if (mn == -Math<F>::inf()) {
    alpha = F(1);
    pr = x != x ? x : F(0);
  } else {
    alpha = exp2_of(m - mn);
    pr = exp2_of(x - mn);
  }
  m = mn;
  return pr;
}


// unit_body computes a unit of one row (see the file's comment): F is the
// compute type (float, or double for float64), S the storage type of k and
// v, DP the compiled head dimension (dim ≤ DP, a multiple of 32). Two
// lanes share a key for the scores, each summing half its 16-byte pieces
// against the query row in shared memory.
template <typename F, typename S, int DP, int R>
__device__ void unit_body(const Params& p, long long unit, unsigned char* sm) {
  using L = Layout<F, S, DP, R>;
  constexpr int kCols = DP / 32;  // output columns per lane
  constexpr int kVec = Piece<F, S>::kVec;
  const int lane = threadIdx.x % 32;
  UnitRows<F, R> u;
  u.init(p, unit);
  if (!u.live) return;
  const int dim = static_cast<int>(p.dim);

  F* sq = reinterpret_cast<F*>(sm + 2 * L::kBuf);
  F* sp = reinterpret_cast<F*>(sm + 2 * L::kBuf + L::kQ);
  // The rows' queries, scaled, zero beyond dim.
  for (int c = lane; c < R * DP; c += 32) {
    const int r = c / DP, col = c - r * DP;
    sq[c] = r < u.nrows && col < dim ? u.template q_at<F>(p, r)[col] * static_cast<F>(p.scale) : F(0);
  }
  Chunks<S, DP, L::kBuf> ch;
  ch.init(p, u.kvh, u.hkv, u.from, u.to, sm, lane);
  ScoreMod<F> mod[R];
#pragma unroll
  for (int r = 0; r < R; ++r) mod[r] = u.mod(p, r);

  F m[R], l[R], acc[R][kCols];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = -Math<F>::inf();
    l[r] = F(0);
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[r][c] = F(0);
  }
  const int key = lane & (kChunk - 1), half = lane / kChunk;
  const int pieces = (dim + kVec - 1) / kVec;
  constexpr F kLog2e = F(1.4426950408889634);  // in F's precision: float64 keeps 1e-10

  for (long long k0 = u.from, it = 0; k0 < u.to; k0 += kChunk, ++it) {
    const int n = static_cast<int>(lmin(kChunk, u.to - k0));
    const unsigned char* buf = ch.wait(k0, it, lane);

    // Scores of this lane's key, both halves summing their pieces.
    F sc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) sc[r] = F(0);
    const unsigned char* krow = buf + key * L::kRowBytes;
#pragma unroll 1
    for (int pc = half; pc < pieces; pc += 2) {
      Piece<F, S> kp;
      kp.load(krow + pc * 16);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const F* qr = sq + r * DP + pc * kVec;
#pragma unroll
        for (int e = 0; e < kVec; ++e) sc[r] = Math<F>::fma(qr[e], kp.x[e], sc[r]);
      }
    }
    const long long j = k0 + key;
    // vis[r]: bit kk set when row r sees key k0 + kk. P·V skips the
    // others, so that a masked key's non-finite value reaches nothing
    // (0·inf is NaN).
    unsigned vis[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      sc[r] += __shfl_xor_sync(0xffffffffu, sc[r], kChunk);
      F x = -Math<F>::inf();
      const bool seen = key < n && j >= u.lo[r] && j < u.hi[r];
      vis[r] = __ballot_sync(0xffffffffu, seen);
      if (seen) x = (mod[r].on ? modified(mod[r], sc[r], (u.r0 + r) % p.nq, j) : sc[r]) * kLog2e;
      // The chunk's maximum over its 16 keys.
      F cm = x;
#pragma unroll
      for (int off = kChunk / 2; off > 0; off >>= 1) cm = max_nan(cm, __shfl_xor_sync(0xffffffffu, cm, off));
      F alpha;
      const F pr = online_step(x, cm, m[r], alpha);
      l[r] = l[r] * alpha + (half == 0 ? pr : F(0));
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[r][c] *= alpha;
      if (half == 0) sp[r * kChunk + key] = pr;
    }
    __syncwarp();

    // O += P·V over the chunk's keys, this lane's columns.
    const unsigned char* vbuf = buf + kChunk * L::kRowBytes;
#pragma unroll 2
    for (int kk = 0; kk < n; ++kk) {
      F vv[kCols];
      const S* vrow = reinterpret_cast<const S*>(vbuf + kk * L::kRowBytes) + lane * kCols;
#pragma unroll
      for (int c = 0; c < kCols; ++c) vv[c] = to_f<F>(vrow[c]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (((vis[r] >> kk) & 1u) == 0) continue;
        const F pr = sp[r * kChunk + kk];
#pragma unroll
        for (int c = 0; c < kCols; ++c) acc[r][c] = Math<F>::fma(pr, vv[c], acc[r][c]);
      }
    }
    __syncwarp();  // the buffer and sp are rewritten next
  }

  // Finish: l summed over the keys' lanes; the output normalised.
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) l[r] += __shfl_xor_sync(0xffffffffu, l[r], off);
    if (r >= u.nrows) continue;
    const bool seen = u.seen(r);
    u.store(p, r, acc[r], seen ? F(1) / l[r] : F(0),
            seen ? (m[r] + log2_of(l[r])) * F(0.6931471805599453) : Math<F>::inf(), lane);
  }
}

// reduce_scatter sums N values (N a multiple of 32) across the warp's
// lanes, value by value, leaving each lane N/32 of the sums: value
// 32·N/32·… in the transposing butterfly below, lane l ends with the sums
// of values (N/32)·l … (N/32)·l + N/32 − 1 in v[0 … N/32). Each of its
// five steps halves what a lane holds: it keeps one half, sends the other
// to its partner and adds what the partner sends of its kept half, 31·N/32
// shuffles in all rather than 5·N for one reduction per value.
template <int kOff, int kHalf, typename F, int N>
__device__ __forceinline__ void butterfly_step(F (&v)[N], int lane) {
  const bool upper = (lane & kOff) != 0;
#pragma unroll
  for (int i = 0; i < kHalf; ++i) {
    const F send = upper ? v[i] : v[i + kHalf];
    const F keep = upper ? v[i + kHalf] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, kOff);
  }
}

// The five steps spelled out: a loop over them was left rolled, which put
// v in local memory.
template <typename F, int N>
__device__ __forceinline__ void reduce_scatter(F (&v)[N], int lane) {
  static_assert(N % 32 == 0, "reduce_scatter: N must be a multiple of 32");
  butterfly_step<16, N / 2>(v, lane);
  butterfly_step<8, N / 4>(v, lane);
  butterfly_step<4, N / 8>(v, lane);
  butterfly_step<2, N / 16>(v, lane);
  butterfly_step<1, N / 32>(v, lane);
}

// group_body computes a unit of up to 8 rows, a query group's heads (as
// unit_body, which would read every query row from shared memory once per
// pair of 16-byte pieces of each key: the bound of a grouped decode). Here
// every lane holds columns lane·C … lane·C + C − 1 of all eight query rows
// in registers, as it holds those columns of the outputs. A chunk's scores
// are summed in two halves of 8 keys: each lane's partial dot products of
// 8 rows × 8 keys go through reduce_scatter, after which lane l holds the
// two scores of row l/4 and keys 2·(l mod 4) and 2·(l mod 4) + 1. Four
// lanes then hold a row's 16 scores, its softmax needs shuffles among them
// only, and its probabilities reach every lane through shared memory for
// O += P·V.
template <typename F, typename S, int DP>
__device__ void group_body(const Params& p, long long unit, unsigned char* sm) {
  constexpr int R = 8;
  using L = Layout<F, S, DP, R>;
  constexpr int kCols = DP / 32;
  constexpr int kHalf = kChunk / 2;  // keys per reduce_scatter
  const int lane = threadIdx.x % 32;
  UnitRows<F, R> u;
  u.init(p, unit);
  if (!u.live) return;
  const int dim = static_cast<int>(p.dim);
  F* sp = reinterpret_cast<F*>(sm + 2 * L::kBuf + L::kQ);  // [R][kChunk] probabilities
  constexpr F kLog2e = F(1.4426950408889634);

  F q[R][kCols];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const F* qr = r < u.nrows ? u.template q_at<F>(p, r) : nullptr;
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int col = lane * kCols + c;
      q[r][c] = qr != nullptr && col < dim ? qr[col] * static_cast<F>(p.scale) : F(0);
    }
  }
  bool col_ok[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) col_ok[c] = lane * kCols + c < dim;
  Chunks<S, DP, L::kBuf> ch;
  ch.init(p, u.kvh, u.hkv, u.from, u.to, sm, lane);

  // The softmax state of this lane's row, shared by its four lanes.
  const int my_row = lane / 4, quad = lane % 4;
  long long my_lo = 0, my_hi = 0;
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (r == my_row) my_lo = u.lo[r], my_hi = u.hi[r];
  const ScoreMod<F> my_mod = u.mod(p, my_row);
  F m = -Math<F>::inf(), l = F(0);
  F acc[R][kCols];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[r][c] = F(0);

  for (long long k0 = u.from, it = 0; k0 < u.to; k0 += kChunk, ++it) {
    const int n = static_cast<int>(lmin(kChunk, u.to - k0));
    const unsigned char* buf = ch.wait(k0, it, lane);

    // x[h][e]: this lane's scores, keys k0 + 8h + 2·quad + e.
    F x[2][2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      F part[R * kHalf];  // row r, key 8h + j at r·8 + j
#pragma unroll
      for (int j = 0; j < kHalf; ++j) {
        const S* krow = reinterpret_cast<const S*>(buf + (h * kHalf + j) * L::kRowBytes) + lane * kCols;
        // Columns past dim were never copied: whatever they hold (NaN
        // from an earlier chunk's pool, say) must not meet q's zeros.
        F kv[kCols];
#pragma unroll
        for (int c = 0; c < kCols; ++c) kv[c] = col_ok[c] ? to_f<F>(krow[c]) : F(0);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          F d = F(0);
#pragma unroll
          for (int c = 0; c < kCols; ++c) d = Math<F>::fma(q[r][c], kv[c], d);
          part[r * kHalf + j] = d;
        }
      }
      reduce_scatter(part, lane);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const long long kk = h * kHalf + 2 * quad + e, j = k0 + kk;
        F s = -Math<F>::inf();
        if (kk < n && j >= my_lo && j < my_hi)
          s = (my_mod.on ? modified(my_mod, part[e], (u.r0 + my_row) % p.nq, j) : part[e]) * kLog2e;
        x[h][e] = s;
      }
    }
    // The row's maximum over the chunk: its four lanes.
    F cm = max_nan(max_nan(x[0][0], x[0][1]), max_nan(x[1][0], x[1][1]));
    cm = max_nan(cm, __shfl_xor_sync(0xffffffffu, cm, 1));
    cm = max_nan(cm, __shfl_xor_sync(0xffffffffu, cm, 2));
    F alpha = F(1);
    {
      const F mn = max_nan(m, cm);
      if (mn != -Math<F>::inf()) alpha = exp2_of(m - mn);
      F sum = F(0);
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const F s = x[h][e];
          const F pr = mn == -Math<F>::inf() ? (s != s ? s : F(0)) : exp2_of(s - mn);
          sp[my_row * kChunk + h * kHalf + 2 * quad + e] = pr;
          sum += pr;
        }
      m = mn;
      l = l * alpha + sum;
    }
    __syncwarp();
    // Every row's rescaling factor, from its first lane.
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const F a = __shfl_sync(0xffffffffu, alpha, 4 * r);
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[r][c] *= a;
    }

    // O += P·V. Where every row sees all n keys (a uniform test), every
    // product counts; else a key a row does not see is skipped, so that
    // its value, whatever it holds, reaches nothing (0·inf is NaN).
    bool all = true;
#pragma unroll
    for (int r = 0; r < R; ++r) all &= r >= u.nrows || (u.lo[r] <= k0 && k0 + n <= u.hi[r]);
    const unsigned char* vbuf = buf + kChunk * L::kRowBytes;
    auto pv = [&](auto kEdge) {
#pragma unroll 2
      for (int kk = 0; kk < n; ++kk) {
        F vv[kCols];
        const S* vrow = reinterpret_cast<const S*>(vbuf + kk * L::kRowBytes) + lane * kCols;
#pragma unroll
        for (int c = 0; c < kCols; ++c) vv[c] = to_f<F>(vrow[c]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (kEdge && !(k0 + kk >= u.lo[r] && k0 + kk < u.hi[r])) continue;
          const F pr = sp[r * kChunk + kk];
#pragma unroll
          for (int c = 0; c < kCols; ++c) acc[r][c] = Math<F>::fma(pr, vv[c], acc[r][c]);
        }
      }
    };
    if (all)
      pv(MaskFlag<false>{});
    else
      pv(MaskFlag<true>{});
    __syncwarp();  // the buffer and sp are rewritten next
  }

  // Finish: a row's l over its four lanes, then each row's factor from its
  // first lane.
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const F lr = __shfl_sync(0xffffffffu, l, 4 * r), mr = __shfl_sync(0xffffffffu, m, 4 * r);
    if (r >= u.nrows) continue;
    const bool seen = u.seen(r);
    u.store(p, r, acc[r], seen ? F(1) / lr : F(0), seen ? (mr + log2_of(lr)) * F(0.6931471805599453) : Math<F>::inf(),
            lane);
  }
}

// rows_body is the unit of R rows: unit_body for one, group_body for 8.
template <typename F, typename S, int DP, int R>
__device__ __forceinline__ void rows_body(const Params& p, long long unit, unsigned char* sm) {
  if constexpr (R == 1)
    unit_body<F, S, DP, 1>(p, unit, sm);
  else
    group_body<F, S, DP>(p, unit, sm);
}

// kMaxMergeSplits bounds the splits a merge takes (decode.go's
// decodeMaxSplits): the weights of a row's splits sit in its warp's shared
// memory.
constexpr int kMaxMergeSplits = 256;
constexpr int kMergeWarps = 4;  // rows per merge block

// merge_row combines row `row` (of the launch's b·hkv key heads' rows) over
// its splits, one warp per row, as kernels.MergePartials: the log-sum-exp of
// the seen splits' LSEs, and their outputs weighed by exp(lse_s − LSE); no
// split seen gives 0 and +inf, a NaN or infinite maximum that LSE and NaN.
// The lanes share the splits for the maximum, the sum and the weights (w,
// this warp's kMaxMergeSplits of shared memory), then the columns for the
// output, each summing its column over the splits in split order. A split
// that weighs 0 is skipped, so that its output (0/0 when all its keys
// scored −inf) reaches nothing.
template <typename F>
__device__ void merge_row(const Params& p, long long row, F* w) {
  const int lane = threadIdx.x % 32;
  const long long hkv = p.h / p.kv_group, group_rows = p.kv_group * p.nq;
  if (row >= p.b * hkv * group_rows) return;
  const int n = static_cast<int>(p.splits);
  if (n > kMaxMergeSplits) __trap();
  const long long kvh = row / group_rows, r = row - kvh * group_rows;
  const long long b = kvh / hkv;
  const long long pair = b * p.h + (kvh - b * hkv) * p.kv_group + r / p.nq, i = r % p.nq;
  const long long dim = p.dim;
  const F* part_lse = static_cast<const F*>(p.part_lse) + 2 * row * n;
  const F* part_o = static_cast<const F*>(p.part_o) + row * n * dim;
  F* orow = static_cast<F*>(p.o) + (pair / p.h) * p.o_batch_stride + (pair % p.h) * p.o_head_stride + i * p.o_row_stride;
  F* lse = static_cast<F*>(p.lse) + pair * p.nq + i;
  F mx = -Math<F>::inf();
  bool some = false;
  for (int s = lane; s < n; s += 32)
    if (part_lse[2 * s + 1] != F(0)) {
      mx = max_nan(mx, part_lse[2 * s]);
      some = true;
    }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mx = max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  some = __any_sync(0xffffffffu, some);
  if (!some || mx != mx || mx == Math<F>::inf() || mx == -Math<F>::inf()) {
    const F fill = some ? Math<F>::inf() - Math<F>::inf() : F(0);  // NaN, or 0 with no key
    for (long long c = lane; c < dim; c += 32) orow[c] = fill;
    if (lane == 0) *lse = some ? mx : Math<F>::inf();
    return;
  }
  F sum = F(0);
  for (int s = lane; s < n; s += 32)
    if (part_lse[2 * s + 1] != F(0)) sum += Math<F>::exp(part_lse[2 * s] - mx);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const F total = mx + Math<F>::log(sum);
  for (int s = lane; s < n; s += 32) w[s] = part_lse[2 * s + 1] != F(0) ? Math<F>::exp(part_lse[2 * s] - total) : F(0);
  __syncwarp();
  for (long long c = lane; c < dim; c += 32) {
    F x = F(0);
#pragma unroll 4
    for (int s = 0; s < n; ++s) {
      const F ws = w[s], o = part_o[s * dim + c];
      x += ws != F(0) ? ws * o : F(0);
    }
    orow[c] = x;
  }
  if (lane == 0) *lse = total;
}

// append_rows writes the cache's new rows: element c of new row n of k_new
// and v_new ([b, hkv, nq, dim], dense, compute type F) goes to element
// dest_rows[n] + c of k and v (storage type S), or nowhere when
// dest_rows[n] < 0 (a token past its sequence's length).
template <typename F, typename S>
__device__ void append_rows(const Params& p) {
  const long long rows = p.b * (p.h / p.kv_group) * p.nq, dim = p.dim;
  const long long* dest = static_cast<const long long*>(p.dest_rows);
  const F* kn = static_cast<const F*>(p.k_new);
  const F* vn = static_cast<const F*>(p.v_new);
  S* k = static_cast<S*>(const_cast<void*>(p.k));
  S* v = static_cast<S*>(const_cast<void*>(p.v));
  for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < rows * dim;
       e += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long n = e / dim, c = e - n * dim;
    const long long at = dest[n];
    if (at < 0) continue;
    k[at + c] = from_f<S>(kn[e]);
    v[at + c] = from_f<S>(vn[e]);
  }
}

}  // namespace decode
}  // namespace flash
