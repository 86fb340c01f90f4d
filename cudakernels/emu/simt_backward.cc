// simt_backward checks the CUDA-core backward kernels on the host, as
// simt_forward.cc checks the forward (emu_test.go builds and runs it). For
// each case, the float64 instantiations of fwd_1rowblock, dot_do_o,
// dkdv_1colblock and dq_1rowblock give the reference dQ, dK and dV; the
// float32 forward and dot_do_o give the LSE and D that both float32
// backwards read; and dkdv_blocked with dq_blocked must err by at most
// twice what dkdv_1colblock<float> and dq_1rowblock<float> err, plus four
// float32 rounding units of each output's magnitude, with the same NaNs
// and infinities. DP = 256 runs the row-block kernels alone (the blocked
// dK/dV kernel does not fit there), which checks the emulation itself.
#include "../csrc/bwd_simt_blocked.cuh"
#include "../csrc/fwd_simt.cuh"
#include "cases.h"

namespace flash {
alignas(16) unsigned char smem[1 << 18];
}

using namespace flash::simt;

// The row-block kernels' tile: 32 rows, 16 for float64 at DP = 256 (as
// flash.cu builds them: 32 would need 274 KiB of shared memory).
template <typename T, int DP> constexpr int kTile = sizeof(T) == 8 && DP == 256 ? 16 : 32;

template <typename T, int DP> void rowBlockForward(const Params& p) {
  constexpr int tile = kTile<T, DP>;
  emu::launch(p.b * p.h * ((p.nq + tile - 1) / tile), tile * 8, fwd_smem_elems<DP, tile>() * sizeof(T),
              [&] { fwd_1rowblock<T, DP, tile>(p); });
  emu::launch((p.b * p.h * p.nq + 255) / 256, 256, 0, [&] { dot_do_o<T>(p); });
}

template <typename T, int DP> void rowBlockBackward(const Params& p) {
  constexpr int tile = kTile<T, DP>;
  const unsigned kv = p.b * p.h / p.kv_group;
  emu::launch(kv * ((p.nk + tile - 1) / tile), tile * 8, bwd_smem_elems<DP, tile>() * sizeof(T),
              [&] { dkdv_1colblock<T, DP, tile>(p); });
  emu::launch(p.b * p.h * ((p.nq + tile - 1) / tile), tile * 8, bwd_smem_elems<DP, tile>() * sizeof(T),
              [&] { dq_1rowblock<T, DP, tile>(p); });
}

template <int DP> void blockedBackward(const Params& p) {
  const unsigned kv = p.b * p.h / p.kv_group;
  emu::launch(kv * ((p.nk + 63) / 64), kBlockedThreads, dkdv_blocked_smem_floats<DP>() * sizeof(float),
              [&] { dkdv_blocked<DP>(p); });
  emu::launch(p.b * p.h * ((p.nq + 63) / 64), kBlockedThreads, dq_blocked_smem_floats<DP>() * sizeof(float),
              [&] { dq_blocked<DP>(p); });
}

template <int DP> bool check(const Case& c) {
  Inputs in = inputs(c);
  Tensors<double>& ref = in.t;
  Sides& s = in.s;
  Tensors<float> base = narrowed(ref);

  rowBlockForward<double, DP>(params(c, ref, s));
  rowBlockBackward<double, DP>(params(c, ref, s));
  rowBlockForward<float, DP>(params(c, base, s));
  Tensors<float> got = base;  // the same float32 O, LSE and D
  rowBlockBackward<float, DP>(params(c, base, s));
  constexpr bool blocked = DP <= 128;
  if constexpr (blocked) {
    blockedBackward<DP>(params(c, got, s));
  } else {
    rowBlockBackward<float, DP>(params(c, got, s));
  }

  Errors dq, dk, dv;
  dq.add(ref.dq, base.dq, got.dq, c.name + " dQ");
  dk.add(ref.dk, base.dk, got.dk, c.name + " dK");
  dv.add(ref.dv, base.dv, got.dv, c.name + " dV");
  // The blocked kernels sum every element in the row-block kernels' order
  // (dK and dV over rows, dQ over keys, each product chain over d in
  // increasing order), so they must give the same bits, not merely errors
  // as small.
  const bool ok = dq.ok() && dk.ok() && dv.ok() && dq.differ + dk.differ + dv.differ == 0;
  std::printf("%-18s DP %3d: %s errs dQ %.3g dK %.3g dV %.3g, row blocks %.3g %.3g %.3g, %zu elements differ: %s\n",
              c.name.c_str(), DP, blocked ? "blocked" : "row blocks", dq.kernel, dk.kernel, dv.kernel, dq.baseline,
              dk.baseline, dv.baseline, dq.differ + dk.differ + dv.differ, ok ? "ok" : "FAIL");
  return ok;
}

int main() {
  return runCases([]<int DP>(const Case& c) { return check<DP>(c); }) ? 0 : 1;
}
