// simt runs the float32 CUDA-core kernels (fwd_simt.cuh, bwd_simt.cuh and
// their register-blocked versions) on the host through cuda_emu.h, one
// problem per run, for TestCUDACoreKernelsConformOnHost (emu_test.go),
// which holds the results to the conformance suite's FP32 bounds: the
// kernels of the FP32 precision, Gorgonia's float32 default.
//
// Standard input (request.h): header words — the kernels (0 the row
// blocks, 1 the register-blocked ones), the padded head dimension DP,
// whether to run the backward too, the blob's size in bytes and the
// bias's number of Nq×Nk slices — then the Params as the backend builds
// them on the caller's tensors (callerOperands), then the blob. The
// backward is the backend's: D = rowsum(dO∘O), then dK/dV and dQ, then
// dBias where Params asks for it (the row-block kernel in both sets, as
// fp32-blocked.patch launches it).
#include <cstdint>
#include <vector>

#include "../csrc/bwd_simt.cuh"
#include "../csrc/bwd_simt_blocked.cuh"
#include "../csrc/fwd_simt.cuh"
#include "../csrc/fwd_simt_blocked.cuh"
#include "request.h"

namespace flash {
alignas(16) unsigned char smem[1 << 18];
}

namespace {

using flash::Params;
using namespace flash::simt;

constexpr int kTile = 32;  // the float32 row-block kernels' (shapes.go's simtTile)

unsigned blocks(long long n, long long per) { return static_cast<unsigned>((n + per - 1) / per); }

template <int DP> void run(Params p, bool blocked, bool withBackward, long long biasSlices) {
  const long long rows = p.b * p.h * p.nq, kvh = p.b * p.h / p.kv_group;
  if (blocked) {
    emu::launch(p.b * p.h * blocks(p.nq, kBlockedRows), kBlockedThreads, fwd_blocked_smem_floats<DP>() * 4,
                [&] { fwd_blocked<DP>(p); });
  } else {
    emu::launch(p.b * p.h * blocks(p.nq, kTile), kTile * 8, fwd_smem_elems<DP, kTile>() * 4,
                [&] { fwd_1rowblock<float, DP, kTile>(p); });
  }
  if (!withBackward) return;
  std::vector<float> delta(rows);
  p.delta = delta.data();
  emu::launch(blocks(rows, 256), 256, 0, [&] { dot_do_o<float>(p); });
  constexpr int kSmem = bwd_smem_elems<DP, kTile>() * 4;
  if constexpr (DP <= 128) {
    if (blocked) {
      emu::launch(kvh * blocks(p.nk, kBlockedRows), kBlockedThreads, dkdv_blocked_smem_floats<DP>() * 4,
                  [&] { dkdv_blocked<DP>(p); });
      emu::launch(p.b * p.h * blocks(p.nq, kBlockedRows), kBlockedThreads, dq_blocked_smem_floats<DP>() * 4,
                  [&] { dq_blocked<DP>(p); });
    }
  }
  if (!blocked || DP > 128) {
    emu::launch(kvh * blocks(p.nk, kTile), kTile * 8, kSmem, [&] { dkdv_1colblock<float, DP, kTile>(p); });
    emu::launch(p.b * p.h * blocks(p.nq, kTile), kTile * 8, kSmem, [&] { dq_1rowblock<float, DP, kTile>(p); });
  }
  if (p.dbias != nullptr)
    emu::launch(biasSlices * blocks(p.nq, kTile) * blocks(p.nk, kTile), kTile * 8, kSmem,
                [&] { dbias_1tile<float, DP, kTile>(p); });
}

}  // namespace

int main() {
  Request r(3);
  const int64_t set = r.head[0], dp = r.head[1], withBackward = r.head[2], biasSlices = r.head[4];
  if (set < 0 || set > 1 || biasSlices < 0) Request::fail("header");
  switch (dp) {
    case 64: run<64>(r.p, set == 1, withBackward != 0, biasSlices); break;
    case 128: run<128>(r.p, set == 1, withBackward != 0, biasSlices); break;
    case 256: run<256>(r.p, set == 1, withBackward != 0, biasSlices); break;
    default: Request::fail("header");
  }
  r.reply();
  return 0;
}
