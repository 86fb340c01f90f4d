// Split-KV decoding (Flash-Decoding): the forward of a problem with few
// query rows per key head, a decode step's, against keys and values that
// are dense or paged (kernels.Pages), in the caller's float32 or float64
// (on CUDA cores) or in a key/value cache's storage format, bf16 or fp16
// (on tensor cores).
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
// A unit loops over its keys in chunks of kChunk = 16 keys of K and of V,
// copied into its warp's shared memory by cp.async a few chunks ahead
// (Chunks). Three bodies compute a chunk: unit_body (one row: two lanes
// per key for the scores, D/32 output columns per lane), group_body (8
// rows of a group in registers, the scores summed across lanes by one
// transposing butterfly) and tc_body (16 rows on tensor cores, mma.sync as
// in the flash forward). The softmax is online, in log2 units. With one
// split the unit writes o and lse; with more it writes its normalised
// partial output and (lse, seen) to p.part_o and p.part_lse, and
// decode_merge combines them as kernels.MergePartials does.
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

// kTensorRows is the rows of the tensor-core unit (tc_body): the M of one
// mma.m16n8k16, which a decode step's group of query heads fills only in
// part; the tensor cores have the throughput to spare, CUDA cores did not.
constexpr int kTensorRows = 16;

// Layout is a unit's shared memory, in bytes: kStages buffers of kChunk K
// and V rows of DP elements (+ kPad), then for the CUDA-core units R query
// rows of DP compute elements and R × kChunk probabilities. Those two
// double buffer their chunks; the tensor-core unit (R = kTensorRows), whose
// queries and probabilities stay in registers, takes a third buffer
// instead, so that two chunks are in flight while it computes one.
template <typename F, typename S, int DP, int R>
struct Layout {
  static constexpr bool kTensor = R == kTensorRows;
  static constexpr int kStages = kTensor ? 3 : 2;
  static constexpr int kRowBytes = DP * static_cast<int>(sizeof(S)) + kPad;
  static constexpr int kBuf = 2 * kChunk * kRowBytes;  // K then V
  static constexpr int kQ = kTensor ? 0 : R * DP * static_cast<int>(sizeof(F));
  static constexpr int kP = kTensor ? 0 : R * kChunk * static_cast<int>(sizeof(F));
  static constexpr int kUnit = kStages * kBuf + kQ + kP;
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

// DenseLane is one lane's share of the copies of dense chunks whose rows
// are 16-byte aligned, the common case, made once per unit so that a
// chunk's copies cost an address add each: lane l copies pieces i mod
// kPieces of keys i / kPieces for i = l, l + 32, … (kRounds of them), at
// element offsets from its first key's first piece that are constants times
// the row stride, and each V piece sits a fixed distance past its K piece.
// A piece past dim, or a key past a short chunk's last, is zero-filled (a
// source size of 0, from the row's own start).
template <typename S, int DP>
struct DenseLane {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(S));
  static constexpr int kPieces = DP / kVec;
  static constexpr int kRowBytes = DP * static_cast<int>(sizeof(S)) + kPad;
  static constexpr int kRounds = kChunk * kPieces / 32;
  static_assert(kChunk * kPieces % 32 == 0, "DenseLane: a chunk's pieces are whole rounds of the warp");
  static_assert(kPieces % 32 == 0 || 32 % kPieces == 0, "DenseLane: a round covers whole keys or a key whole rounds");
  // Round m's key and piece, less the lane's own (key0, piece0).
  __host__ __device__ static constexpr int key_of(int m) { return kPieces <= 32 ? m * (32 / kPieces) : m / (kPieces / 32); }
  __host__ __device__ static constexpr int piece_of(int m) { return kPieces <= 32 ? 0 : 32 * (m % (kPieces / 32)); }

  const S* first;   // K's element of this lane's key0, piece0 in key 0 of the keys
  const S* origin;  // K itself: the source of the zero-filled pieces, which read nothing
  long long row_stride, v_minus_k;  // elements; bytes
  int key0, piece0, pieces, smem;   // smem: the byte offset of (key0, piece0) in a buffer

  __device__ __forceinline__ void init(const S* k, const S* v, const Keys& keys, int dim, int lane) {
    key0 = kPieces <= 32 ? lane / kPieces : 0;
    piece0 = kPieces <= 32 ? lane % kPieces : lane;
    pieces = (dim + kVec - 1) / kVec;
    row_stride = keys.row_stride;
    first = k + keys.base + key0 * row_stride + piece0 * kVec;
    origin = k;
    v_minus_k = reinterpret_cast<long long>(v) - reinterpret_cast<long long>(k);
    smem = key0 * kRowBytes + piece0 * 16;
  }

  // copy starts the copies of keys [k0, k0 + n) into buf. A whole chunk of
  // whole rows, the steady state, takes no predicate at all.
  __device__ __forceinline__ void copy(long long k0, int n, unsigned char* buf) const {
    const S* at = first + k0 * row_stride;
    const uint32_t dst = mma::smem_addr(buf + smem);
    if (n == kChunk && pieces == kPieces)
      rounds<0, true>(at, dst, n);
    else
      rounds<0, false>(at, dst, n);
    cp_async_commit();
  }

  // rounds issues rounds M, M + 1, … of a copy, each shared destination as
  // an immediate offset from the lane's (dst), so that a round costs its
  // two source addresses and two instructions.
  template <int M, bool kWhole>
  __device__ __forceinline__ void rounds(const S* at, uint32_t dst, int n) const {
    if constexpr (M < kRounds) {
      constexpr int kOff = key_of(M) * kRowBytes + piece_of(M) * 16;
      const bool ok = kWhole || (key0 + key_of(M) < n && piece0 + piece_of(M) < pieces);
      const S* src = ok ? at + key_of(M) * row_stride + piece_of(M) * kVec : origin;
      copy16<kOff>(dst, src, ok);
      copy16<kOff + kChunk * kRowBytes>(dst, reinterpret_cast<const char*>(src) + v_minus_k, ok);
      rounds<M + 1, kWhole>(at, dst, n);
    }
  }

  template <int kOff>
  __device__ __forceinline__ static void copy16(uint32_t dst, const void* src, bool ok) {
#ifdef FLASH_EMU  // dst is an offset into flash::smem there
    ::emu::copy_or_zero(flash::smem + dst + kOff, src, ok ? 16 : 0, 16);
#else
    asm volatile("cp.async.cg.shared.global [%0+%3], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0), "n"(kOff));
#endif
  }
};

// load_chunk starts copying keys [k0, k0 + n) of K and V into buffer buf
// and fills the rest of its kChunk rows of DP columns with zeros: rows past
// n and columns past dim. The tensor-core unit multiplies whole rows, so a
// stale NaN there would reach every score of the chunk (0·NaN); the others
// read the zeros harmlessly. Dense aligned rows take DenseLane's copies;
// paged aligned rows 16-byte cp.async, a piece past dim zero-filled by a
// source size of 0 (a piece straddling dim copies the row's padding, which
// a cache keeps zero); rows that are not aligned element by element.
template <typename S, int DP>
__device__ __forceinline__ void load_chunk(const S* k, const S* v, const Keys& keys, long long k0, int n,
                                           int dim, bool aligned, unsigned char* buf, int lane) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(S));
  constexpr int kPieces = DP / kVec;
  constexpr int kRowBytes = DP * static_cast<int>(sizeof(S)) + kPad;
  if (aligned) {
    const int pieces = (dim + kVec - 1) / kVec;
    // Unrolled, lane l copies piece i mod kPieces of keys i / kPieces for
    // i = l, l + 32, …: one address computation per key, the pieces'
    // offsets constant.
#pragma unroll
    for (int i = lane; i < kChunk * kPieces; i += 32) {
      const int key = i / kPieces, pc = i % kPieces;
      const bool ok = key < n && pc < pieces;
      const long long at = ok ? keys.row(k0 + key) + pc * kVec : 0;
      unsigned char* dk = buf + key * kRowBytes + pc * 16;
      cp_async16(reinterpret_cast<float*>(dk), reinterpret_cast<const float*>(k + at), ok);
      cp_async16(reinterpret_cast<float*>(dk + kChunk * kRowBytes), reinterpret_cast<const float*>(v + at), ok);
    }
  } else {
#pragma unroll 1
    for (int i = lane; i < kChunk * DP; i += 32) {
      const int key = i / DP, c = i - key * DP;
      S* dk = reinterpret_cast<S*>(buf + key * kRowBytes) + c;
      S* dv = reinterpret_cast<S*>(buf + (kChunk + key) * kRowBytes) + c;
      if (key < n && c < dim) {
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
  long long splits, s, kvh, hkv, group_rows, r0, b, head0, pair0, from, to;
  int nrows;
  bool live;  // false for the launch's last units past b·hkv key heads
  SeqMask mk;
  long long lo[R], hi[R];  // each row's range; not kept for R = kTensorRows

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
    b = kvh / hkv;
    nrows = static_cast<int>(lmin(R, group_rows - tile * R));
    r0 = tile * R;
    // The key head's first query head, and its query pair (batch·h + head).
    head0 = (kvh - b * hkv) * p.kv_group;
    pair0 = b * p.h + head0;
    mk = seq_mask(p, pair0);
    long long ulo = mk.lk, uhi = 0;
    if constexpr (R == kTensorRows) {
      // tc_body keeps only its lanes' two rows' ranges, so the union is
      // taken in a loop kept rolled (the unrolled one was a large part of
      // the kernel's code), in one pass for a decode step (nq = 1),
      // whose rows all share one range.
      const int distinct = p.nq == 1 ? 1 : nrows;
#pragma unroll 1
      for (int r = 0; r < distinct; ++r) {
        long long rlo, rhi;
        row_range(mk, row_i(p, r), rlo, rhi);
        if (rlo < rhi) {
          ulo = lmin(ulo, rlo);
          uhi = lmax(uhi, rhi);
        }
      }
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        lo[r] = hi[r] = 0;
        if (r < nrows) {
          row_range(mk, row_i(p, r), lo[r], hi[r]);
          if (lo[r] < hi[r]) {
            ulo = lmin(ulo, lo[r]);
            uhi = lmax(uhi, hi[r]);
          }
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

  // Row r of the unit is row row_i of query head head0 + row_head of the
  // group. A decode step (nq = 1) divides by nothing.
  __device__ __forceinline__ long long row_i(const Params& p, int r) const { return p.nq == 1 ? 0 : (r0 + r) % p.nq; }
  __device__ __forceinline__ long long row_head(const Params& p, int r) const {
    return p.nq == 1 ? r0 + r : (r0 + r) / p.nq;
  }

  // mod returns row r's ScoreMod (its query head's).
  __device__ __forceinline__ ScoreMod<F> mod(const Params& p, int r) const {
    return score_mod<F>(p, pair0 + row_head(p, r), mk);
  }

  // q_at returns row r's query row in q.
  template <typename T>
  __device__ __forceinline__ const T* q_at(const Params& p, int r) const {
    return static_cast<const T*>(p.q) + b * p.q_batch_stride + (head0 + row_head(p, r)) * p.q_head_stride +
           row_i(p, r) * p.q_row_stride;
  }

  // seen reports whether row r sees a key of the unit's split.
  __device__ __forceinline__ bool seen(int r) const { return lmax(lo[r], from) < lmin(hi[r], to); }

  // out_row returns where row r's output goes, o's row with one split and
  // the split's partial row with more, after the leader lane writes the
  // row's LSE there (with more splits also whether the split saw a key of
  // the row: seen).
  __device__ __forceinline__ F* out_row(const Params& p, int r, F row_lse, bool seen_key, bool leader) const {
    const long long row = r0 + r;
    if (splits == 1) {
      const long long head = head0 + row_head(p, r), i = row_i(p, r);
      if (leader) static_cast<F*>(p.lse)[((b * p.h + head) * p.nq) + i] = row_lse;
      return static_cast<F*>(p.o) + b * p.o_batch_stride + head * p.o_head_stride + i * p.o_row_stride;
    }
    const long long at = (kvh * group_rows + row) * splits + s;
    if (leader) {
      static_cast<F*>(p.part_lse)[2 * at] = row_lse;
      static_cast<F*>(p.part_lse)[2 * at + 1] = seen_key ? F(1) : F(0);
    }
    return static_cast<F*>(p.part_o) + at * p.dim;
  }

  // store writes row r's output columns lane·C … of acc, normalised by
  // inv, and its LSE, from lane 0.
  template <int C>
  __device__ __forceinline__ void store(const Params& p, int r, const F (&acc)[C], F inv, F row_lse, int lane) const {
    F* out = out_row(p, r, row_lse, seen(r), lane == 0);
    const int dim = static_cast<int>(p.dim);
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int col = lane * C + c;
      if (col < dim) out[col] = acc[c] * inv;
    }
  }
};

// Chunks is a unit's pipeline over its keys, kStages buffers of kBuf bytes
// deep: init starts the first kStages − 1 chunks, and wait returns the
// buffer holding chunk it (keys k0 … k0 + n − 1) after starting the copy of
// chunk it + kStages − 1 into the buffer chunk it − 1 used (the chunks
// cycle through the buffers: it mod kStages). Every wait
// commits one copy group, empty past the last chunk, so that "all but the
// last kStages − 1 groups landed" always means "chunk it landed".
template <typename S, int DP, int kBuf, int kStages>
struct Chunks {
  const S* k;
  const S* v;
  Keys keys;
  long long to;
  int dim;
  bool aligned;
  unsigned char* sm;
  int stage;  // the buffer of the next chunk wait returns

  DenseLane<S, DP> dense;  // set when dense_aligned
  bool dense_aligned;

  __device__ __forceinline__ void start(long long k0, int stage, int lane) {
    if (k0 >= to) {
      cp_async_commit();
      return;
    }
    const int n = static_cast<int>(lmin(kChunk, to - k0));
    if (dense_aligned)
      dense.copy(k0, n, sm + stage * kBuf);
    else
      load_chunk<S, DP>(k, v, keys, k0, n, dim, aligned, sm + stage * kBuf, lane);
  }

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
    dense_aligned = aligned && keys.table == nullptr;
    if (dense_aligned) dense.init(k, v, keys, dim, lane);
    stage = 0;
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) start(from + st * kChunk, st, lane);
  }

  // wait takes the chunk's first key k0; chunks are waited for in order.
  __device__ __forceinline__ unsigned char* wait(long long k0, int lane) {
    const int refill = stage == 0 ? kStages - 1 : stage - 1;
    start(k0 + (kStages - 1) * kChunk, refill, lane);
    cp_async_wait<kStages - 1>();
    __syncwarp();
    unsigned char* buf = sm + stage * kBuf;
    stage = stage + 1 == kStages ? 0 : stage + 1;
    return buf;
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
  // The first chunks are on their way while the rows are set up.
  Chunks<S, DP, L::kBuf, L::kStages> ch;
  ch.init(p, u.kvh, u.hkv, u.from, u.to, sm, lane);
  const int dim = static_cast<int>(p.dim);

  F* sq = reinterpret_cast<F*>(sm + L::kStages * L::kBuf);
  F* sp = reinterpret_cast<F*>(sm + L::kStages * L::kBuf + L::kQ);
  // The rows' queries, scaled, zero beyond dim.
  for (int c = lane; c < R * DP; c += 32) {
    const int r = c / DP, col = c - r * DP;
    sq[c] = r < u.nrows && col < dim ? u.template q_at<F>(p, r)[col] * static_cast<F>(p.scale) : F(0);
  }
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

  for (long long k0 = u.from; k0 < u.to; k0 += kChunk) {
    const int n = static_cast<int>(lmin(kChunk, u.to - k0));
    const unsigned char* buf = ch.wait(k0, lane);

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
      if (seen) x = (mod[r].on ? modified(mod[r], sc[r], u.row_i(p, r), j) : sc[r]) * kLog2e;
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
            seen ? lse_log2(m[r], l[r]) : Math<F>::inf(), lane);
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

// group_body computes a unit of up to R ∈ {4, 8} rows, a query group's
// heads (as unit_body, which would read every query row from shared memory
// once per pair of 16-byte pieces of each key: the bound of a grouped
// decode). Here every lane holds columns lane·C … lane·C + C − 1 of all R
// query rows in registers, as it holds those columns of the outputs. A
// chunk's scores are summed in two halves of 8 keys: each lane's partial
// dot products of R rows × 8 keys go through reduce_scatter, after which
// lane l holds kPer = R/4 scores of row l/kLanes (kLanes = 32/R lanes to a
// row), keys kPer·(l mod kLanes) + e. Those kLanes lanes then hold a row's
// 16 scores, its softmax needs shuffles among them only, and its
// probabilities reach every lane through shared memory for O += P·V. Four
// rows (a group of two to four heads) keep half the registers and do half
// the products of eight.
template <typename F, typename S, int DP, int R>
__device__ void group_body(const Params& p, long long unit, unsigned char* sm) {
  static_assert(R == 4 || R == 8, "group_body: 4 or 8 rows");
  using L = Layout<F, S, DP, R>;
  constexpr int kCols = DP / 32;
  constexpr int kHalf = kChunk / 2;  // keys per reduce_scatter
  constexpr int kPer = R * kHalf / 32;  // scores a lane holds per half
  constexpr int kLanes = 32 / R;        // lanes holding one row's scores
  const int lane = threadIdx.x % 32;
  UnitRows<F, R> u;
  u.init(p, unit);
  if (!u.live) return;
  // The first chunks are on their way while the rows are set up.
  Chunks<S, DP, L::kBuf, L::kStages> ch;
  ch.init(p, u.kvh, u.hkv, u.from, u.to, sm, lane);
  const int dim = static_cast<int>(p.dim);
  F* sp = reinterpret_cast<F*>(sm + L::kStages * L::kBuf + L::kQ);  // [R][kChunk] probabilities
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

  // The softmax state of this lane's row, shared by its kLanes lanes.
  const int my_row = lane / kLanes, sub = lane % kLanes;
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

  for (long long k0 = u.from; k0 < u.to; k0 += kChunk) {
    const int n = static_cast<int>(lmin(kChunk, u.to - k0));
    const unsigned char* buf = ch.wait(k0, lane);

    // x[h][e]: this lane's scores, keys k0 + 8h + kPer·sub + e.
    F x[2][kPer];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      F part[R * kHalf];  // row r, key 8h + j at r·8 + j
#pragma unroll
      for (int j = 0; j < kHalf; ++j) {
        const S* krow = reinterpret_cast<const S*>(buf + (h * kHalf + j) * L::kRowBytes) + lane * kCols;
        F kv[kCols];
#pragma unroll
        for (int c = 0; c < kCols; ++c) kv[c] = to_f<F>(krow[c]);
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
      for (int e = 0; e < kPer; ++e) {
        const long long kk = h * kHalf + kPer * sub + e, j = k0 + kk;
        F s = -Math<F>::inf();
        if (kk < n && j >= my_lo && j < my_hi)
          s = (my_mod.on ? modified(my_mod, part[e], u.row_i(p, my_row), j) : part[e]) * kLog2e;
        x[h][e] = s;
      }
    }
    // The row's maximum over the chunk: its kLanes lanes.
    F cm = -Math<F>::inf();
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < kPer; ++e) cm = max_nan(cm, x[h][e]);
#pragma unroll
    for (int off = 1; off < kLanes; off <<= 1) cm = max_nan(cm, __shfl_xor_sync(0xffffffffu, cm, off));
    F alpha = F(1);
    {
      const F mn = max_nan(m, cm);
      if (mn != -Math<F>::inf()) alpha = exp2_of(m - mn);
      F sum = F(0);
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < kPer; ++e) {
          const F s = x[h][e];
          const F pr = mn == -Math<F>::inf() ? (s != s ? s : F(0)) : exp2_of(s - mn);
          sp[my_row * kChunk + h * kHalf + kPer * sub + e] = pr;
          sum += pr;
        }
      m = mn;
      l = l * alpha + sum;
    }
    __syncwarp();
    // Every row's rescaling factor, from its first lane.
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const F a = __shfl_sync(0xffffffffu, alpha, kLanes * r);
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

  // Finish: a row's l over its kLanes lanes, then each row's factor from
  // its first lane.
#pragma unroll
  for (int off = 1; off < kLanes; off <<= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const F lr = __shfl_sync(0xffffffffu, l, kLanes * r), mr = __shfl_sync(0xffffffffu, m, kLanes * r);
    if (r >= u.nrows) continue;
    const bool seen = u.seen(r);
    u.store(p, r, acc[r], seen ? F(1) / lr : F(0), seen ? lse_log2(mr, lr) : Math<F>::inf(),
            lane);
  }
}

// TensorOf is the mma policy (mma.cuh) of a 16-bit storage format.
template <typename S>
struct TensorOf;
template <>
struct TensorOf<__nv_bfloat16> {
  using E = mma::BF16;
};
template <>
struct TensorOf<__half> {
  using E = mma::FP16;
};

// tc_body computes a unit of up to kTensorRows rows on tensor cores, for
// keys and values stored in 16 bits: S = Q·Kᵀ and O += P·V as the flash
// forward computes them (fwd_mma.cuh), a chunk of 16 keys being one n16
// tile of S and one k16 step of P·V. Lane (g, t) = (lane/4, lane%4) holds
// rows g and g + 8 of the tile: their query fragments (q rounded to the
// storage format and scaled after the product, as the forward does), four
// scores of each per chunk, and columns 8n + 2t, 8n + 2t + 1 of each n8
// tile of the output. A decode step's group fills only some of the 16
// rows; the others hold zeros and are never stored, a waste the tensor
// cores absorb (group_body spent its time on exactly these products).
// Keys a row does not see get p = 0, so a non-finite value there reaches
// the row as 0·inf = NaN, the tensor-core kernels' MaskedNaNMayPropagate
// exception; rows of a chunk past its keys are zero (load_chunk).
template <typename S, int DP>
__device__ void tc_body(const Params& p, long long unit, unsigned char* sm) {
  using E = typename TensorOf<S>::E;
  using L = Layout<float, S, DP, kTensorRows>;
  constexpr int kKS = DP / 16;  // k steps of S = Q·Kᵀ
  constexpr int kNO = DP / 8;   // n8 tiles of O
  const float kInf = Math<float>::inf();
  constexpr float kLog2e = 1.4426950408889634f;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  UnitRows<float, kTensorRows> u;
  u.init(p, unit);
  if (!u.live) return;
  // The first chunks are on their way while the rows are set up.
  Chunks<S, DP, L::kBuf, L::kStages> ch;
  ch.init(p, u.kvh, u.hkv, u.from, u.to, sm, lane);
  const int dim = static_cast<int>(p.dim);
  const float scale = static_cast<float>(p.scale);

  // This lane's rows h = 0, 1 (row g + 8h of the tile), real below nrows.
  // Their queries are loaded first, so that the rest of the rows' set-up
  // runs while the loads are on their way (at one sequence, 8 key heads,
  // 16k keys a unit has 8 chunks, and waiting on q after the set-up was a
  // tenth of its time).
  bool real[2];
  long long lo[2], hi[2], qi[2];
  const float* qrow[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    real[h] = r < u.nrows;
    qi[h] = u.row_i(p, r);
    qrow[h] = real[h] ? u.template q_at<float>(p, r) : nullptr;
  }
  // Q's pairs for the A fragments (mma.cuh's layout): x = 0…3 is row
  // g + 8·(x & 1), columns 16ks + 2t + 8·(x >> 1) and the next. A row whose
  // columns are all real and 8-byte aligned (the common case) loads them
  // as float2, else one bounded element at a time.
  float2 qpair[kKS][4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float* q = qrow[h];
    const bool pairs = q != nullptr && dim == DP && reinterpret_cast<unsigned long long>(q) % 8 == 0;
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int col = ks * 16 + 2 * t + 8 * half;
        float2& pr = qpair[ks][h + 2 * half];
        if (pairs) {
          pr = *reinterpret_cast<const float2*>(q + col);
        } else {
          pr.x = q != nullptr && col < dim ? q[col] : 0.f;
          pr.y = q != nullptr && col + 1 < dim ? q[col + 1] : 0.f;
        }
      }
  }
  ScoreMod<float> mod[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    lo[h] = hi[h] = 0;
    if (real[h]) row_range(u.mk, qi[h], lo[h], hi[h]);
    mod[h] = u.mod(p, real[h] ? g + 8 * h : 0);
  }
  const bool modded = mod[0].on || mod[1].on;
  uint32_t qf[kKS][4];
#pragma unroll
  for (int ks = 0; ks < kKS; ++ks)
#pragma unroll
    for (int x = 0; x < 4; ++x) qf[ks][x] = E::pack(qpair[ks][x].x, qpair[ks][x].y);

  float m[2] = {-kInf, -kInf}, l[2] = {0.f, 0.f};
  float acc[kNO][4];
#pragma unroll
  for (int n = 0; n < kNO; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  // ldmatrix addresses of this lane in a buffer (bytes): K as the B
  // operand of S, keys 8·(l/16) + l%8 at 16-byte piece (l/8)%2; V through
  // .trans, keys l%8 + 8·((l/8)%2) at piece l/16.
  const int k_off = ((lane / 16) * 8 + lane % 8) * L::kRowBytes + ((lane / 8) % 2) * 16;
  const int v_off = (kChunk + lane % 8 + ((lane / 8) % 2) * 8) * L::kRowBytes + (lane / 16) * 16;

  for (long long k0 = u.from; k0 < u.to; k0 += kChunk) {
    const int n = static_cast<int>(lmin(kChunk, u.to - k0));
    const unsigned char* buf = ch.wait(k0, lane);
    // Even and odd k steps accumulate apart, halving the chain of
    // dependent products a warp waits on (a decode unit's warp has few
    // others to hide it behind), then add.
    float sc[2][4], odd[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[j][e] = odd[j][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) {
      uint32_t b[4];
      mma::ldsm_x4(b, buf + k_off + ks * 32);
      float(&acc_s)[2][4] = ks % 2 == 0 ? sc : odd;
      E::mma(acc_s[0], qf[ks], b[0], b[1]);
      E::mma(acc_s[1], qf[ks], b[2], b[3]);
    }
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[j][e] += odd[j][e];
    // Element (j, e) of sc is row g + 8·(e/2), key k0 + 8j + 2t + (e & 1).
    // A chunk of 16 keys every real row sees whole, with no modifier (the
    // common case: a uniform test), is only scaled.
    bool whole = n == kChunk && !modded;
#pragma unroll
    for (int h = 0; h < 2; ++h) whole &= !real[h] || (lo[h] <= k0 && k0 + kChunk <= hi[h]);
    if (__all_sync(0xffffffffu, whole)) {
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[j][e] *= scale * kLog2e;
    } else {
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e / 2;
          const long long key = k0 + 8 * j + 2 * t + (e & 1);
          float x = -kInf;
          if (key < k0 + n && key >= lo[h] && key < hi[h]) {
            x = sc[j][e] * scale;
            if (mod[h].on) x = modified(mod[h], x, qi[h], key);
            x *= kLog2e;
          }
          sc[j][e] = x;
        }
    }
    // Each row's online softmax: the chunk's maximum over the row's four
    // lanes, the rescaling of what was summed before, the probabilities.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float cm = max_nan(max_nan(sc[0][2 * h], sc[0][2 * h + 1]), max_nan(sc[1][2 * h], sc[1][2 * h + 1]));
      cm = max_nan(cm, __shfl_xor_sync(0xffffffffu, cm, 1));
      cm = max_nan(cm, __shfl_xor_sync(0xffffffffu, cm, 2));
      const float mn = max_nan(m[h], cm);
      const float alpha = mn == -kInf ? 1.f : ex2_ftz(m[h] - mn);
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          sc[j][e] = mn == -kInf ? 0.f : ex2_ftz(sc[j][e] - mn);
          sum += sc[j][e];
        }
      m[h] = mn;
      l[h] = l[h] * alpha + sum;
      if (alpha != 1.f) {
#pragma unroll
        for (int nt = 0; nt < kNO; ++nt) acc[nt][2 * h] *= alpha, acc[nt][2 * h + 1] *= alpha;
      }
    }
    // O += P·V: the score tiles are P's A fragment.
    uint32_t a[4];
    mma::p_frag16<E>(a, sc, 0);
#pragma unroll
    for (int nt = 0; nt < kNO; nt += 2) {
      uint32_t b[4];
      mma::ldsm_x4_t(b, buf + v_off + nt * 16);
      E::mma(acc[nt], a, b[0], b[1]);
      E::mma(acc[nt + 1], a, b[2], b[3]);
    }
    __syncwarp();  // the buffer is refilled next
  }

  // Finish: each row's l over its four lanes, then its output columns.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    if (!real[h]) continue;
    const bool seen = lmax(lo[h], u.from) < lmin(hi[h], u.to);
    const float inv = seen ? 1.f / l[h] : 0.f;
    float* out = u.out_row(p, g + 8 * h, seen ? lse_log2(m[h], l[h]) : kInf, seen, t == 0);
#pragma unroll
    for (int nt = 0; nt < kNO; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = nt * 8 + 2 * t + e;
        if (col < dim) out[col] = acc[nt][2 * h + e] * inv;
      }
  }
}

// rows_body is the unit of R rows: unit_body for one, group_body for 4
// or 8, tc_body for kTensorRows.
template <typename F, typename S, int DP, int R>
__device__ __forceinline__ void rows_body(const Params& p, long long unit, unsigned char* sm) {
  if constexpr (R == 1)
    unit_body<F, S, DP, 1>(p, unit, sm);
  else if constexpr (R == kTensorRows)
    tc_body<S, DP>(p, unit, sm);
  else
    group_body<F, S, DP, R>(p, unit, sm);
}

// kMaxMergeSplits bounds the splits a merge takes (decode.go's
// decodeMaxSplits): one thread of a merge block per split for the weights.
constexpr int kMaxMergeSplits = 256;
constexpr int kMergeThreads = 256;                  // the most threads of a merge block
constexpr int kMaxMergeSlices = kMergeThreads / 32;  // its warps, each a slice of the splits

// MergeSmem is a merge block's shared memory: the splits' weights, the
// block's reductions, and each slice's column sums.
template <typename F>
struct MergeSmem {
  F w[kMaxMergeSplits];
  F red[kMaxMergeSlices];
  F cols[kMaxMergeSlices][32];
};

// block_reduce combines x over the block's threads with op (max_nan or a
// sum, in warp order), through red; every thread gets the result. The
// block has `slices` warps.
template <typename F, typename Op>
__device__ __forceinline__ F block_reduce(F x, F* red, int slices, Op op) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, off));
  __syncthreads();  // red may still be read by the previous reduction
  if (lane == 0) red[warp] = x;
  __syncthreads();
  F y = red[0];
  for (int i = 1; i < slices; ++i) y = op(y, red[i]);
  return y;
}

// merge_cols combines columns 32·cb … 32·cb + 31 of row `row` (of the
// launch's b·hkv key heads' rows) over its splits, as
// kernels.MergePartials: the log-sum-exp of the seen splits' LSEs, and
// their outputs weighed by exp(lse_s − LSE); no split seen gives 0 and
// +inf, a NaN or infinite maximum that LSE and NaN. A thread per split
// computes the weights (every block of the row, the same way); then lane
// l of warp w sums column 32·cb + l over the splits s ≡ w (mod slices),
// its loads independent of each other, and the slices' sums are added in
// order. The host launches min(8, splits) warps: at two splits, eight
// warps of which six had nothing to sum cost B = 64, Hkv = 8, 1k keys
// 16 % on the H200. A split that weighs 0 is skipped, so that its
// output (0/0 when all its keys scored −inf) reaches nothing. The first
// merge, a warp per row looping over the splits, spent 90 µs of a 117 µs
// step at B = 1, 16k keys on the H200, waiting on its loads one by one.
template <typename F>
__device__ void merge_cols(const Params& p, long long row, int cb, MergeSmem<F>& sm) {
  const long long hkv = p.h / p.kv_group, group_rows = p.kv_group * p.nq;
  const int n = static_cast<int>(p.splits), tid = threadIdx.x, lane = tid % 32, slice = tid / 32;
  const int slices = static_cast<int>(blockDim.x) / 32;
  if (n > kMaxMergeSplits || static_cast<int>(blockDim.x) < n) __trap();
  const long long kvh = row / group_rows, r = row - kvh * group_rows;
  const long long b = kvh / hkv;
  const long long pair = b * p.h + (kvh - b * hkv) * p.kv_group + r / p.nq, i = r % p.nq;
  const long long dim = p.dim, col = 32LL * cb + lane;
  const F* part_lse = static_cast<const F*>(p.part_lse) + 2 * row * n;
  const F* part_o = static_cast<const F*>(p.part_o) + row * n * dim + col;
  F* orow = static_cast<F*>(p.o) + (pair / p.h) * p.o_batch_stride + (pair % p.h) * p.o_head_stride + i * p.o_row_stride;
  F* lse = static_cast<F*>(p.lse) + pair * p.nq + i;
  const bool mine = tid < n && part_lse[2 * tid + 1] != F(0);
  const F my_lse = mine ? part_lse[2 * tid] : -Math<F>::inf();
  const F mx = block_reduce(my_lse, sm.red, slices, [](F a, F c) { return max_nan(a, c); });
  const bool some = __syncthreads_or(mine);
  const bool writes_lse = cb == 0 && tid == 0;
  if (!some || mx != mx || mx == Math<F>::inf() || mx == -Math<F>::inf()) {
    const F fill = some ? Math<F>::inf() - Math<F>::inf() : F(0);  // NaN, or 0 with no key
    if (slice == 0 && col < dim) orow[col] = fill;
    if (writes_lse) *lse = some ? mx : Math<F>::inf();
    return;
  }
  const F e = mine ? Math<F>::exp(my_lse - mx) : F(0);
  const F total = mx + Math<F>::log(block_reduce(e, sm.red, slices, [](F a, F c) { return a + c; }));
  if (tid < n) sm.w[tid] = mine ? Math<F>::exp(my_lse - total) : F(0);
  __syncthreads();
  F x = F(0);
  if (col < dim) {
#pragma unroll 8
    for (int s = slice; s < n; s += slices) {
      const F ws = sm.w[s], o = part_o[s * dim];
      x += ws != F(0) ? ws * o : F(0);
    }
  }
  sm.cols[slice][lane] = x;
  __syncthreads();
  if (slice == 0 && col < dim) {
    F y = sm.cols[0][lane];
    for (int sl = 1; sl < slices; ++sl) y += sm.cols[sl][lane];
    orow[col] = y;
  }
  if (writes_lse) *lse = total;
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
