// hopper runs the Hopper kernels (fwd_wgmma.cuh, fwd_wgmma_ws.cuh,
// bwd_wgmma.cuh) on the host through cuda_emu.h and sm90_emu.h, one
// forward or one backward per run, for TestHopperKernelsOnHost
// (emu_hopper_test.go), which sends the problem, reads the results back
// and holds them to the conformance suite's bounds.
//
// Standard input: eight int64 words, then the kernels' Params with every
// pointer an offset into the blob plus one, then the blob. The words: the
// operand type (0 BF16, 1 FP16, 2 TF32, 3 TF32x3: the FP32 precision), the kernel (Kernel below), the
// padded head dimension DP, the blob's size in bytes, three words of the Go
// side's launch shape, which the kernels check, and flags (bit 0: the
// forward images V as rows, not transposed; bit 1: a backward; bit 2:
// wgmma accumulates by truncation, sm90_emu.h's truncating). Forward:
// threads, shared memory, the block's query rows. Backward (on the O and
// LSE of a forward in the blob): the dK/dV kernel's shared memory (the
// fused kernel's, for kFused), the dQ kernel's and the dBias kernel's.
// Standard output: the blob after the run.
//
// The steps are the backend's. Forward (fwd_wgmma_gpu.go): Q imaged in
// tiles of 64 rows, padded to the block's rows (but for the
// warp-specialized kernels, which read it as it is, on a persistent grid
// of kEmuSMs blocks); K in tiles of the key
// step; V transposed (or as rows); the _len conversions where the call has
// lengths; then the forward. The persistent kernels convert K and V
// themselves where the backend lets them (wgmmaFwdOwnsKV: D a multiple of
// 4, aligned rows), into images that start as NaNs. Backward (backend_gpu.go's enqueueBackward,
// bwd_wgmma_gpu.go): D = rowsum(dO∘O) of dO rounded, dO left as it is
// (TF32x3: of split products), or for the 16-bit types without lengths in
// the pass that writes dO's image; row images of Q, dO, K and V
// (and for TF32 and TF32x3 transposed ones of Q, dO and K), in tiles of
// 64 rows padded to 128, but for K and V of the plain and fused 16-bit
// kernels, whose dK/dV kernel writes them; the statistics (TF32x3: in
// natural units); the dK/dV and dQ kernels (or the fused one into a
// zeroed dQ); the dBias kernel where Params asks for dBias.
#include <cstdint>
#include <limits>
#include <vector>

#include "../csrc/bwd_wgmma.cuh"
#include "../csrc/fwd_wgmma.cuh"
#include "../csrc/fwd_wgmma_ws.cuh"
#include "../csrc/round.cuh"
#include "request.h"

namespace flash {
alignas(1024) unsigned char smem[1 << 18];
}

namespace {

using namespace flash::sm90;
using flash::Params;

// Kernel is header word 1: the forward's, or of a backward the dK/dV and
// dQ pair's (kPlainRowBlock: the plain pair, or for the split type at
// DP = 128 its three kernels in turn; kFused: the fused kernel).
// kDV, kDK and kDQ: one of the split type's three backward kernels at
// DP = 128 alone (dv_colblock, dk_colblock, dq_split_rowblock); the run
// leaves the other gradients as they were.
enum Kernel {
  kPlainRowBlock = 0, kVar = 1, kFull = 2, kDrop = 3, kWS = 4, kWS2 = 5, kFused = 6, kDV = 7, kDK = 8, kDQ = 9
};

// Scratch is device memory the backend would carve: 16-byte aligned, and
// filled with NaNs (all bits set) as device memory holds whatever it held,
// so that a conversion that leaves part of an image unwritten where a
// kernel reads it shows in the results.
struct Scratch {
  std::vector<uint4> words;
  explicit Scratch(size_t bytes) : words((bytes + 15) / 16, uint4{~0u, ~0u, ~0u, ~0u}) {}
  template <typename T> T* as() { return reinterpret_cast<T*>(words.data()); }
};

constexpr unsigned kConvertBlocks = 8, kConvertThreads = 256;
// kEmuSMs is the multiprocessors of the emulated device: the blocks of a
// persistent grid. Three, so that items of a head split unevenly.
constexpr unsigned kEmuSMs = 3;

// Images converts [heads, n, dim] float32 tensors of one role (queries: Q;
// keys: K and V) into tile images at DP, as imaging.rows and
// imaging.transposed do: with the call's lengths (lens, heads per batch
// entry per), the _len conversions.
template <typename E, int DP> struct Images {
  long long heads, dim, per;
  const int* lens;

  void rows(const void* x, Scratch& y, long long n, long long nPad, int tile, int unit) const {
    const float* src = static_cast<const float*>(x);
    uint4* dst = y.as<uint4>();
    if (lens != nullptr) {
      if constexpr (E::kParts > 1) Request::fail("lengths with the split type (plain problems only)");
      else {
        const SeqRows sr{lens, 0, per, unit};
        emu::launch(kConvertBlocks, kConvertThreads, 0,
                    [&] { to_image_rows_len<E>(src, dst, heads, n, nPad, dim, DP, tile, sr); });
      }
    } else {
      emu::launch(kConvertBlocks, kConvertThreads, 0, [&] { to_image_rows<E>(src, dst, heads, n, nPad, dim, DP, tile); });
    }
  }

  void transposed(const void* x, Scratch& y, long long n, long long nPad, int tile, int unit) const {
    const float* src = static_cast<const float*>(x);
    uint4* dst = y.as<uint4>();
    if (lens != nullptr) {
      if constexpr (E::kParts > 1) Request::fail("lengths with the split type (plain problems only)");
      else {
        const SeqRows sr{lens, 0, per, unit};
        emu::launch(kConvertBlocks, 256, 0, [&] { to_image_vt<E, true>(src, dst, heads, n, nPad, dim, DP, tile, sr); });
      }
    } else {
      emu::launch(kConvertBlocks, 256, 0, [&] { to_image_vt<E>(src, dst, heads, n, nPad, dim, DP, tile); });
    }
  }

  // both writes the row and transposed images, as imaging.both: in one
  // pass (flash_to_image_rows_vt) without lengths.
  void both(const void* x, Scratch& rowsImg, Scratch& tImg, long long n, long long nPad, int tile, int unit) const {
    if (lens != nullptr) {
      rows(x, rowsImg, n, nPad, tile, unit);
      transposed(x, tImg, n, nPad, tile, unit);
      return;
    }
    const float* src = static_cast<const float*>(x);
    uint4 *dstT = tImg.as<uint4>(), *dstRows = rowsImg.as<uint4>();
    emu::launch(kConvertBlocks, 256, 0,
                [&] { to_image_vt<E, false, true>(src, dstT, heads, n, nPad, dim, DP, tile, SeqRows{}, dstRows); });
  }
};

long long roundUp(long long n, long long m) { return (n + m - 1) / m * m; }

struct Shape {
  unsigned threads, smem;
  int rows;
  bool vRows;
};

template <typename E, int DP, Kernel K> void forward(Params p, const Shape& sh) {
  using S = typename E::Storage;
  constexpr int step = fwd_image_bk<E, DP, K == kFull>();
  constexpr long long kW = DP * E::kParts;  // image columns: a split type's hi and lo parts
  const long long bh = p.b * p.h, kvh = bh / p.kv_group;
  const long long nqPad = roundUp(p.nq, sh.rows), nkPad = roundUp(p.nk, step);
  Scratch q(bh * nqPad * kW * sizeof(S)), k(kvh * nkPad * kW * sizeof(S)), v(kvh * nkPad * kW * sizeof(S));
  const Images<E, DP> queries{bh, p.dim, p.h, static_cast<const int*>(p.q_lens)};
  const Images<E, DP> keys{kvh, p.dim, p.h / p.kv_group, static_cast<const int*>(p.k_lens)};
  // The warp-specialized kernels read the caller's Q; the others its image.
  constexpr bool kQImage = K != kWS && K != kWS2;
  constexpr bool kPersistent = (K == kWS && ws_persistent<ws_consumers<DP>()>()) || (K == kWS2 && ws_persistent<2>());
  if (kQImage) queries.rows(p.q, q, p.nq, nqPad, kQTileRows, sh.rows);
  // The persistent kernels convert K and V themselves where the rows allow
  // bulk copies (wgmmaFwdOwnsKV; the backend also asks wgmmaFwdOwnKVPays,
  // which the short problems here would fail): their images start as NaNs.
  auto aligned = [](const void* x) { return reinterpret_cast<uintptr_t>(x) % 16 == 0; };
  const bool ownKV = kPersistent && !sh.vRows && p.dim % 4 == 0 && aligned(p.k) && aligned(p.v);
  p.k_src = ownKV ? p.k : nullptr, p.v_src = ownKV ? p.v : nullptr;
  if (!ownKV) {
    keys.rows(p.k, k, p.nk, nkPad, step, step);
    if (sh.vRows) {
      keys.rows(p.v, v, p.nk, nkPad, step, step);
    } else {
      keys.transposed(p.v, v, p.nk, nkPad, step, step);
    }
  }
  // The images' strides, as params.go's tensorAt gives them.
  const long long kvPerBatch = p.h / p.kv_group;
  if (kQImage) p.q = q.as<S>(), p.q_batch_stride = p.h * nqPad * kW, p.q_head_stride = nqPad * kW, p.q_row_stride = kW;
  p.k = k.as<S>(), p.k_batch_stride = kvPerBatch * nkPad * kW, p.k_head_stride = nkPad * kW, p.k_row_stride = kW;
  p.v = v.as<S>(), p.v_batch_stride = p.k_batch_stride, p.v_head_stride = p.k_head_stride, p.v_row_stride = kW;
  unsigned grid = static_cast<unsigned>(bh * (nqPad / sh.rows));
  // The persistent grid of a device with kEmuSMs multiprocessors
  // (wgmmaForward.launch), so that blocks take several items.
  // The item counter, the conversion's task counter and ready counts
  // (fwd_wgmma_ws.cuh), zero at launch.
  std::vector<int> counters(2 + (ownKV ? kvh * (nkPad / step) : 0));
  if (kPersistent) grid = grid < kEmuSMs ? grid : kEmuSMs, p.work_counter = counters.data();
  // The warp-specialized kernels' shared memory is select.go's repetition
  // of ws_smem_bytes (wgmmaWSSmem), and a persistent launch without the
  // conversion takes ws_base_bytes alone (wgmmaForward.launch), so that
  // the emulation's bounds hold the kernel to it.
  unsigned smem = sh.smem;
  if constexpr (K == kWS || K == kWS2) {
    constexpr int kNC = K == kWS2 ? 2 : ws_consumers<DP>();
    if (sh.smem != static_cast<unsigned>(ws_smem_bytes<E, DP, kNC>()))
      Request::fail("the launch's shared memory is not ws_smem_bytes (select.go's wgmmaWSSmem)");
    if (kPersistent && !ownKV) smem = static_cast<unsigned>(ws_base_bytes<E, DP, kNC>());
  }
  emu::launch(grid, sh.threads, smem, [&] {
    if constexpr (K == kPlainRowBlock) fwd_rowblock<E, DP, false>(p);
    if constexpr (K == kVar) fwd_rowblock<E, DP, true>(p);
    if constexpr (K == kFull) fwd_rowblock<E, DP, true, true>(p);
    if constexpr (K == kDrop) fwd_rowblock<E, DP, true, true, false>(p);
    if constexpr (K == kWS) fwd_ws<E, DP>(p);
    if constexpr (K == kWS2) fwd_ws<E, DP, 2>(p);
  });
}

struct BwdShape {
  unsigned smemDKDV, smemDQ, smemDbias;
};

template <typename E, int DP, Kernel K>
void backwardPair(Params& p, const BwdShape& sh, long long biasSlices, long long kvh, long long bh);

template <typename E, typename R, int DP, Kernel K> void backward(Params p, const BwdShape& sh, long long biasSlices) {
  using S = typename E::Storage;
  const long long bh = p.b * p.h, kvh = bh / p.kv_group;
  std::vector<float> delta(bh * p.nq);
  p.delta = delta.data();
  constexpr bool kSplit = E::kParts > 1;
  // D of dO rounded to R, a warp per row, dO left as it is for the images
  // to round, as the backend launches it (flash_bwd_dot_do_o_rounded_*;
  // R = TF32x3, the FP32 precision: D of split products, round.cuh's
  // do_o_fma); for the 16-bit types without lengths, in the pass that
  // writes dO's image instead, once the images' strides are set
  // (wgmmaBackward.fusesDelta, flash_bwd_dot_do_o_image_*).
  constexpr bool kFusedDelta = !bwd_t_images<E>() && DP % 64 == 0;
  const bool fusedDelta = kFusedDelta && p.q_lens == nullptr;
  const float* doutRows = static_cast<const float*>(p.dout);
  if (!fusedDelta) {
    emu::launch(static_cast<unsigned>((bh * p.nq + 7) / 8), 256, 0, [&] { flash::mma::dot_do_o_round<R, false>(p); });
  }
  constexpr long long kW = DP * E::kParts;  // image columns
  const long long nqPad = roundUp(p.nq, kBwdPad), nkPad = roundUp(p.nk, kBwdPad);
  const size_t qBytes = bh * nqPad * kW * sizeof(S), kBytes = kvh * nkPad * kW * sizeof(S);
  constexpr bool kTImages = bwd_t_images<E>();
  Scratch q(qBytes), dout(qBytes), k(kBytes), v(kBytes);
  Scratch qT(kTImages ? qBytes : 0), doutT(kTImages ? qBytes : 0), kT(kTImages ? kBytes : 0);
  Scratch lse2(bh * nqPad * 4), dpad(bh * nqPad * 4);
  const Images<E, DP> queries{bh, p.dim, p.h, static_cast<const int*>(p.q_lens)};
  const Images<E, DP> keys{kvh, p.dim, p.h / p.kv_group, static_cast<const int*>(p.k_lens)};
  // Transposed images for TF32 only, beside the row images, as
  // bwd_wgmma_gpu.go makes them; the 16-bit kernels get null pointers,
  // which they must not read.
  // The plain 16-bit dK/dV kernels (and the fused one) convert K and V
  // themselves from p.k_src and p.v_src and write the images the dQ kernel
  // reads (dkdv_body's kOwnKV); their images start as NaNs.
  constexpr bool kOwnKV = !kTImages && (K == kPlainRowBlock || K == kFused);
  if (kTImages) {
    queries.both(p.q, q, qT, p.nq, nqPad, kBwdTile, kBwdPad);
    queries.both(p.dout, dout, doutT, p.nq, nqPad, kBwdTile, kBwdPad);
    keys.both(p.k, k, kT, p.nk, nkPad, kBwdTile, kBwdPad);
  } else {
    queries.rows(p.q, q, p.nq, nqPad, kBwdTile, kBwdPad);
    if (!fusedDelta) queries.rows(p.dout, dout, p.nq, nqPad, kBwdTile, kBwdPad);
    if (!kOwnKV) keys.rows(p.k, k, p.nk, nkPad, kBwdTile, kBwdPad);
  }
  if (!kOwnKV) keys.rows(p.v, v, p.nk, nkPad, kBwdTile, kBwdPad);
  p.k_src = kOwnKV ? p.k : nullptr, p.v_src = kOwnKV ? p.v : nullptr;
  const long long kvPerBatch = p.h / p.kv_group;
  p.q = q.as<S>(), p.q_batch_stride = p.h * nqPad * kW, p.q_head_stride = nqPad * kW, p.q_row_stride = kW;
  p.dout = dout.as<S>(), p.dout_batch_stride = p.q_batch_stride, p.dout_head_stride = p.q_head_stride;
  p.dout_row_stride = kW;
  p.k = k.as<S>(), p.k_batch_stride = kvPerBatch * nkPad * kW, p.k_head_stride = nkPad * kW, p.k_row_stride = kW;
  p.v = v.as<S>(), p.v_batch_stride = p.k_batch_stride, p.v_head_stride = p.k_head_stride, p.v_row_stride = kW;
  p.q_t = kTImages ? qT.as<S>() : nullptr, p.dout_t = kTImages ? doutT.as<S>() : nullptr;
  p.k_t = kTImages ? kT.as<S>() : nullptr;
  p.lse_log2 = lse2.as<float>(), p.delta_pad = dpad.as<float>();
  if constexpr (kFusedDelta) {
    if (fusedDelta) {
      const long long rowsPerBlock = DP <= 64 ? 16 : 8;  // a warp per row, half a warp at 64
      emu::launch(static_cast<unsigned>((bh * nqPad + rowsPerBlock - 1) / rowsPerBlock), 256, 0,
                  [&] { dot_do_o_image<E, R>(p, doutRows, nqPad); });
    }
  }
  // kSplit3: one of the split type's three kernels at DP = 128, alone on
  // sh.smemDKDV bytes; kThree: all three in turn, as the backend launches
  // them for the plain kernel there (dV and dK on sh.smemDKDV, dQ on
  // sh.smemDQ).
  constexpr bool kSplit3 = K == kDV || K == kDK || K == kDQ;
  constexpr bool kThree = kSplit && DP == 128 && K == kPlainRowBlock;
  constexpr bool kVarStats = K != kPlainRowBlock && K != kFused && !kSplit3;
  emu::launch(8, 256, 0, [&] { prep_stats<kVarStats, kSplit>(p); });
  if constexpr (kSplit3 || kThree) {
    const unsigned gridK = static_cast<unsigned>(bh * ((p.nk + kBwdTile - 1) / kBwdTile));
    const unsigned gridQ = static_cast<unsigned>(bh * ((p.nq + kBwdTile - 1) / kBwdTile));
    if constexpr (K == kDV || kThree) emu::launch(gridK, kDvThreads, sh.smemDKDV, [&] { dv_colblock<E, DP>(p); });
    if constexpr (K == kDK || kThree) emu::launch(gridK, kSplitThreads, sh.smemDKDV, [&] { dk_colblock<E, DP>(p); });
    if constexpr (K == kDQ || kThree) {
      emu::launch(gridQ, kSplitThreads, kThree ? sh.smemDQ : sh.smemDKDV, [&] { dq_split_rowblock<E, DP>(p); });
    }
  } else {
    backwardPair<E, DP, K>(p, sh, biasSlices, kvh, bh);
  }
}

// backwardPair launches the dK/dV and dQ kernels (or the fused one) and
// the dBias kernel of backward's request.
template <typename E, int DP, Kernel K>
void backwardPair(Params& p, const BwdShape& sh, long long biasSlices, long long kvh, long long bh) {
  const unsigned gridK = static_cast<unsigned>(kvh * ((p.nk + kBwdBlock - 1) / kBwdBlock));
  const unsigned gridQ = static_cast<unsigned>(bh * ((p.nq + kBwdBlock - 1) / kBwdBlock));
  if constexpr (K == kFused) {
    // dQ's sums go into a zeroed accumulator, then into dq, whose old
    // contents must not matter: NaNs here.
    const long long nqPad = roundUp(p.nq, kBwdPad);
    std::vector<float> accum(bh * nqPad * DP, 0.f);
    p.dq_accum = accum.data();
    float* dq = static_cast<float*>(p.dq);
    std::fill(dq, dq + bh * p.nq * p.dim, std::numeric_limits<float>::quiet_NaN());
    emu::launch(gridK, kBwdThreads, sh.smemDKDV, [&] { dkdv_colblock<E, DP, false, false, false, true>(p); });
    emu::launch(static_cast<unsigned>(bh * nqPad / kBwdTile), kDqAccumThreads, 0, [&] { dq_from_accum<DP>(p); });
    p.dq_accum = nullptr;
  } else {
    constexpr bool kV = K != kPlainRowBlock, kF = K == kFull || K == kDrop, kB = K == kFull;
    emu::launch(gridK, kBwdThreads, sh.smemDKDV, [&] { dkdv_colblock<E, DP, kV, kF, kB>(p); });
    emu::launch(gridQ, kBwdThreads, sh.smemDQ, [&] { dq_rowblock<E, DP, kV, kF, kB>(p); });
  }
  if constexpr (K == kFull) {
    if (p.dbias != nullptr) {
      const unsigned grid = static_cast<unsigned>(biasSlices * ((p.nq + kBwdBlock - 1) / kBwdBlock) *
                                                  ((p.nk + kBwdTile - 1) / kBwdTile));
      emu::launch(grid, kBwdThreads, sh.smemDbias, [&] { dbias_tile<E, DP>(p); });
    }
  }
}

// built lists what hopper.cu instantiates; anything else is a bad request.
template <typename E, int DP, Kernel K> constexpr bool built() {
  constexpr bool half = sizeof(typename E::Storage) == 2;
  if constexpr (E::kParts > 1) return K == kPlainRowBlock && DP <= 128;  // the split type: plain problems
  switch (K) {
    case kPlainRowBlock: return !ws_built<E, DP>();
    case kVar: return true;
    case kFull: return half ? DP <= 128 : DP == 64;
    case kDrop: return half && DP <= 128;
    case kWS: return ws_built<E, DP>();
    case kWS2: return half && DP == 64;
    case kFused:
    case kDV:
    case kDK:
    case kDQ: return false;
  }
  return false;
}

// bwdBuilt lists the backward kernels hopper.cu instantiates.
template <typename E, int DP, Kernel K> constexpr bool bwdBuilt() {
  constexpr bool half = sizeof(typename E::Storage) == 2;
  if constexpr (E::kParts > 1) return (K == kPlainRowBlock && DP <= 128) || ((K == kDV || K == kDK || K == kDQ) && DP == 128);
  switch (K) {
    case kPlainRowBlock:
    case kVar: return DP <= 128;
    case kFull:
    case kDrop:
    case kFused: return half && DP <= 128;
    default: return false;
  }
}

// Run is one request: the forward or the backward.
struct Run {
  const Params& p;
  bool backward;
  Shape fwd;
  BwdShape bwd;
  long long biasSlices;
};

template <typename E, typename R, int DP, Kernel K> void run(const Run& r) {
  if (!r.backward) {
    if constexpr (built<E, DP, K>()) return forward<E, DP, K>(r.p, r.fwd);
  } else {
    if constexpr (bwdBuilt<E, DP, K>()) return backward<E, R, DP, K>(r.p, r.bwd, r.biasSlices);
  }
  Request::fail("a kernel hopper.cu does not build");
}

template <typename E, typename R, int DP> void byKernel(int kernel, const Run& r) {
  switch (kernel) {
    case kPlainRowBlock: return run<E, R, DP, kPlainRowBlock>(r);
    case kVar: return run<E, R, DP, kVar>(r);
    case kFull: return run<E, R, DP, kFull>(r);
    case kDrop: return run<E, R, DP, kDrop>(r);
    case kWS: return run<E, R, DP, kWS>(r);
    case kWS2: return run<E, R, DP, kWS2>(r);
    case kFused: return run<E, R, DP, kFused>(r);
    case kDV: return run<E, R, DP, kDV>(r);
    case kDK: return run<E, R, DP, kDK>(r);
    default: return run<E, R, DP, kDQ>(r);
  }
}

template <typename E, typename R> void byDim(int dp, int kernel, const Run& r) {
  switch (dp) {
    case 64: return byKernel<E, R, 64>(kernel, r);
    case 128: return byKernel<E, R, 128>(kernel, r);
    default:
      if constexpr (sizeof(typename E::Storage) == 2) return byKernel<E, R, 256>(kernel, r);
      Request::fail("TF32 at DP 256");
  }
}

// biasSlices is the bias's number of Nq×Nk slices, from its strides
// (params.go's biasStrides: 0 along a broadcast dimension).
long long biasSlices(const Params& p) {
  if (p.bias == nullptr) return 0;
  return (p.bias_batch_stride != 0 ? p.b : 1) * (p.bias_head_stride != 0 ? p.h : 1);
}

}  // namespace

int main() {
  Request req(3);
  const int64_t* h = req.head;
  const int64_t type = h[0], kernel = h[1], dp = h[2];
  const auto word = [&](int i) { return static_cast<unsigned>(h[i]); };
  emu::truncating = (h[7] & 4) != 0;
  const Run r{req.p, (h[7] & 2) != 0, Shape{word(4), word(5), static_cast<int>(h[6]), (h[7] & 1) != 0},
              BwdShape{word(4), word(5), word(6)}, biasSlices(req.p)};
  const unsigned most = sizeof flash::smem;
  if (type < 0 || type > 3 || kernel < 0 || kernel > kDQ || (dp != 64 && dp != 128 && dp != 256) ||
      h[4] < 0 || h[5] < 0 || h[6] < 0 || word(4) > most || word(5) > most || word(6) > most ||
      (!r.backward && (r.fwd.rows <= 0 || r.fwd.rows % kQTileRows != 0)))
    Request::fail("header");
  const int d = static_cast<int>(dp), k = static_cast<int>(kernel);
  switch (type) {
    case 0: byDim<flash::mma::BF16, flash::mma::RoundBF16>(d, k, r); break;
    case 1: byDim<flash::mma::FP16, flash::mma::RoundFP16>(d, k, r); break;
    case 2: byDim<flash::mma::TF32, flash::mma::TF32>(d, k, r); break;
    default: byDim<flash::mma::TF32x3, flash::mma::TF32x3>(d, k, r); break;  // R: D of split products
  }
  req.reply();
  return 0;
}
