// simt_forward checks the CUDA-core forward kernels on the host, through
// cuda_emu.h (emu_test.go builds and runs it). For each case, the float64
// instantiation of fwd_1rowblock gives the reference, and each float32
// kernel must err by at most twice what fwd_1rowblock<float> errs, plus
// four float32 rounding units of the output's magnitude, with the same
// NaNs and infinities where it has them: fwd_1rowblock<float> is the kernel
// the device's conformance suite has passed, so a new kernel matches it in
// everything but the order of its sums. The cases cover the masks, the
// lengths, GQA, the softcap, ALiBi, the bias, dropout and non-finite
// inputs; each prints its errors, and the program exits 1 if any fails.
#include "../csrc/fwd_simt.cuh"
#include "../csrc/fwd_simt_blocked.cuh"
#include "cases.h"

namespace flash {
alignas(16) unsigned char smem[1 << 18];
}

template <typename T, int DP> void rowBlockKernel(const Params& p) {
  constexpr int tile = 32;
  emu::launch(p.b * p.h * ((p.nq + tile - 1) / tile), tile * 8, flash::simt::fwd_smem_elems<DP, tile>() * sizeof(T),
              [&] { flash::simt::fwd_1rowblock<T, DP, tile>(p); });
}

template <int DP> void blockedKernel(const Params& p) {
  using namespace flash::simt;
  emu::launch(p.b * p.h * ((p.nq + kBlockedRows - 1) / kBlockedRows), kBlockedThreads,
              fwd_blocked_smem_floats<DP>() * sizeof(float), [&] { fwd_blocked<DP>(p); });
}

template <int DP> bool check(const Case& c) {
  Inputs in = inputs(c);
  Tensors<double>& ref = in.t;
  Sides& s = in.s;
  Tensors<float> base = narrowed(ref), got = base;

  rowBlockKernel<double, DP>(params(c, ref, s));
  rowBlockKernel<float, DP>(params(c, base, s));
  blockedKernel<DP>(params(c, got, s));

  Errors o, lse;
  o.add(ref.o, base.o, got.o, c.name + " O");
  lse.add(ref.lse, base.lse, got.lse, c.name + " LSE");
  std::printf("%-18s DP %3d: fwd_blocked errs O %.3g LSE %.3g, fwd_1rowblock<float> O %.3g LSE %.3g: %s\n",
              c.name.c_str(), DP, o.kernel, lse.kernel, o.baseline, lse.baseline, o.ok() && lse.ok() ? "ok" : "FAIL");
  return o.ok() && lse.ok();
}

int main() {
  return runCases([]<int DP>(const Case& c) { return check<DP>(c); }) ? 0 : 1;
}
