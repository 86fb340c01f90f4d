// mma runs the mma.sync kernels (fwd_mma.cuh, bwd_mma.cuh) on the host
// through cuda_emu.h, one problem per run, for TestMMAKernelsOnHost
// (emu_test.go), which sends the problem, reads the results back and
// holds them to the conformance suite's bounds.
//
// Standard input: eight int64 words — the operand type (0 BF16, 1 FP16,
// 2 TF32), the kernel (0 plain, 1 _var, 2 _full), whether to run the
// backward too, the padded head dimension DP, the blob's size in bytes and
// the bias's number of Nq×Nk slices (0: none) — then the kernels' Params as params.go's kernelParams lays it out, with
// every pointer an offset into the blob plus one (0: none), then the blob.
// The caller's float32 q, k, v, dO and the outputs o, lse, dq, dk, dv lie
// there as the backend's callerOperands would have them on the device.
// Standard output: the blob after the run.
//
// The steps are the backend's (fwd_mma_gpu.go, bwd_mma_gpu.go,
// backend_gpu.go's enqueueBackward): Q, K and V converted to the operand
// type with rows padded to DP (V transposed for TF32), the forward on those
// copies; for the backward, dO rounded in place with D = rowsum(dO∘O) in
// one pass, the 16-bit copies of Q, K, V and dO, then the dK/dV and dQ
// kernels, and the dBias kernel where Params asks for dBias.
#include <cstdint>
#include <vector>

#include "../csrc/bwd_mma.cuh"
#include "../csrc/round.cuh"
#include "request.h"

namespace flash {
alignas(16) unsigned char smem[1 << 18];
}

namespace {

using namespace flash::mma;
using flash::Params;

// Scratch is device memory the backend would carve: 16-byte aligned.
struct Scratch {
  std::vector<uint4> words;
  explicit Scratch(size_t bytes) : words((bytes + 15) / 16) {}
  template <typename T> T* as() { return reinterpret_cast<T*>(words.data()); }
};

constexpr unsigned kConvertBlocks = 8, kConvertThreads = 128;

template <typename E> void toStorage(const void* x, Scratch& y, long long rows, long long dim, long long dp) {
  emu::launch(kConvertBlocks, kConvertThreads, 0,
              [&] { to_storage_padded<E>(static_cast<const float*>(x), y.as<uint4>(), rows, dim, dp); });
}

template <typename E, int DP, int kKernel> void forward(Params p) {
  using S = typename E::Storage;
  const long long kvh = p.b * p.h / p.kv_group, nkp = (p.nk + 7) / 8 * 8;
  Scratch q(p.b * p.h * p.nq * DP * sizeof(S)), k(kvh * p.nk * DP * sizeof(S)), v(kvh * nkp * DP * sizeof(S));
  toStorage<E>(p.q, q, p.b * p.h * p.nq, p.dim, DP);
  toStorage<E>(p.k, k, kvh * p.nk, p.dim, DP);
  if constexpr (E::kVTransposed) {
    emu::launch(kConvertBlocks, 256, 0,
                [&] { to_vt_tf32(static_cast<const float*>(p.v), v.as<float>(), kvh, p.nk, p.dim, DP); });
  } else {
    toStorage<E>(p.v, v, kvh * p.nk, p.dim, DP);
  }
  p.q = q.as<S>(), p.k = k.as<S>(), p.v = v.as<S>();
  constexpr bool kVar = kKernel > 0, kFull = kKernel == 2;
  constexpr int rows = fwd_bq<DP, kFull>();
  emu::launch(p.b * p.h * ((p.nq + rows - 1) / rows), kFwdThreads, fwd_smem_bytes<E, DP, kFull>(),
              [&] { fwd_1rowblock<E, DP, kVar, kFull>(p); });
}

template <typename E, typename R, int DP, int kKernel> void backward(Params p, long long biasSlices) {
  const long long kvh = p.b * p.h / p.kv_group;
  std::vector<float> delta(p.b * p.h * p.nq);
  p.delta = delta.data();
  emu::launch((p.b * p.h * p.nq + 7) / 8, 256, 0, [&] { dot_do_o_round<R>(p); });
  Scratch q(p.b * p.h * p.nq * DP * 2), k(kvh * p.nk * DP * 2), v(kvh * p.nk * DP * 2), dout(p.b * p.h * p.nq * DP * 2);
  toStorage<E>(p.q, q, p.b * p.h * p.nq, p.dim, DP);
  toStorage<E>(p.k, k, kvh * p.nk, p.dim, DP);
  toStorage<E>(p.v, v, kvh * p.nk, p.dim, DP);
  toStorage<E>(p.dout, dout, p.b * p.h * p.nq, p.dim, DP);
  p.q = q.as<uint16_t>(), p.k = k.as<uint16_t>(), p.v = v.as<uint16_t>(), p.dout = dout.as<uint16_t>();
  constexpr bool kVar = kKernel > 0, kFull = kKernel == 2;
  emu::launch(kvh * ((p.nk + kBwdBK - 1) / kBwdBK), kBwdThreads, bwd_dkdv_smem_bytes<DP, kFull>(),
              [&] { dkdv_1colblock<E, DP, kVar, kFull>(p); });
  emu::launch(p.b * p.h * ((p.nq + kBwdBQ - 1) / kBwdBQ), kBwdThreads, bwd_dq_smem_bytes<DP, kFull>(),
              [&] { dq_1rowblock<E, DP, kVar, kFull>(p); });
  if (p.dbias != nullptr) {
    const long long tiles = (p.nq + kBwdStep - 1) / kBwdStep * ((p.nk + kBwdStep - 1) / kBwdStep);
    emu::launch(biasSlices * tiles, kBwdThreads, bwd_dbias_smem_bytes<DP>(), [&] { dbias_1tile<E, DP>(p); });
  }
}

template <typename E, typename R, int DP, int kKernel> void run(const Params& p, bool withBackward, long long biasSlices) {
  forward<E, DP, kKernel>(p);
  if constexpr (sizeof(typename E::Storage) == 2 && DP <= 128) {
    if (withBackward) backward<E, R, DP, kKernel>(p, biasSlices);
  } else if (withBackward) {
    std::fprintf(stderr, "emu/mma: no mma.sync backward for this operand type and DP\n");
    std::exit(2);
  }
}

template <typename E, typename R, int DP>
void byKernel(int kernel, const Params& p, bool withBackward, long long biasSlices) {
  switch (kernel) {
    case 0: return run<E, R, DP, 0>(p, withBackward, biasSlices);
    case 1: return run<E, R, DP, 1>(p, withBackward, biasSlices);
    default: return run<E, R, DP, 2>(p, withBackward, biasSlices);
  }
}

template <typename E, typename R> void byDim(int dp, int kernel, const Params& p, bool withBackward, long long biasSlices) {
  switch (dp) {
    case 64: return byKernel<E, R, 64>(kernel, p, withBackward, biasSlices);
    case 128: return byKernel<E, R, 128>(kernel, p, withBackward, biasSlices);
    default: return byKernel<E, R, 256>(kernel, p, withBackward, biasSlices);
  }
}

}  // namespace

int main() {
  Request r(4);
  const int64_t type = r.head[0], kernel = r.head[1], withBackward = r.head[2], dp = r.head[3], biasSlices = r.head[5];
  if (type < 0 || type > 2 || kernel < 0 || kernel > 2 || (dp != 64 && dp != 128 && dp != 256) || biasSlices < 0)
    Request::fail("header");
  const int d = static_cast<int>(dp), k = static_cast<int>(kernel);
  switch (type) {
    case 0: byDim<BF16, RoundBF16>(d, k, r.p, withBackward != 0, biasSlices); break;
    case 1: byDim<FP16, RoundFP16>(d, k, r.p, withBackward != 0, biasSlices); break;
    default: byDim<TF32, TF32>(d, k, r.p, withBackward != 0, biasSlices); break;
  }
  r.reply();
  return 0;
}
