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
#include <random>
#include <string>

#include "../csrc/fwd_simt.cuh"
#include "../csrc/fwd_simt_blocked.cuh"

namespace flash {
alignas(16) unsigned char smem[1 << 18];
}

using flash::Params;

struct Case {
  std::string name;
  int B = 2, H = 2, Hkv = 0, Nq = 100, Nk = 100, dim = 40;
  bool causal = false;
  long long left = -1, right = -1;  // the window (−1: unbounded)
  bool lens = false, alibi = false, bias = false;
  double softcap = 0, dropout = 0;
  // nonFinite: 1 puts +Inf in V at the last key of the first head (under
  // a causal mask only the last row sees it), 2 a NaN in a row of Q.
  int nonFinite = 0;
};

template <typename T> struct Tensors {
  std::vector<T> q, k, v, o, lse, bias;
};

// The variants' side arrays, the same for every precision.
struct Sides {
  std::vector<int> qLens, kLens;
  std::vector<double> slopes;
};

template <typename T> Params params(const Case& c, Tensors<T>& t, Sides& s) {
  const int hkv = c.Hkv ? c.Hkv : c.H;
  Params p{};
  p.q = t.q.data(), p.k = t.k.data(), p.v = t.v.data(), p.o = t.o.data(), p.lse = t.lse.data();
  p.q_batch_stride = p.o_batch_stride = static_cast<long long>(c.H) * c.Nq * c.dim;
  p.q_head_stride = p.o_head_stride = static_cast<long long>(c.Nq) * c.dim;
  p.k_batch_stride = p.v_batch_stride = static_cast<long long>(hkv) * c.Nk * c.dim;
  p.k_head_stride = p.v_head_stride = static_cast<long long>(c.Nk) * c.dim;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = c.dim;
  p.b = c.B, p.h = c.H, p.nq = c.Nq, p.nk = c.Nk, p.dim = c.dim, p.causal = c.causal;
  p.scale = 1 / std::sqrt(static_cast<double>(c.dim));
  p.heads = c.H, p.kv_group = c.H / hkv;
  p.mask_left = c.left, p.mask_right = c.causal ? 0 : c.right;
  if (c.lens) p.q_lens = s.qLens.data(), p.k_lens = s.kLens.data();
  if (c.alibi) p.alibi = s.slopes.data();
  p.softcap = c.softcap;
  if (c.bias) {
    p.bias = t.bias.data();
    p.bias_batch_stride = static_cast<long long>(c.H) * c.Nq * c.Nk;
    p.bias_head_stride = static_cast<long long>(c.Nq) * c.Nk;
  }
  if (c.dropout > 0) {
    p.dropout_threshold = static_cast<long long>(c.dropout * 65536);
    p.dropout_seed = 0x1234567887654321LL, p.dropout_offset = 7, p.dropout_scale = 1 / (1 - c.dropout);
  }
  return p;
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

// Errors of a float32 result against the reference, and whether its
// non-finite elements are the baseline's.
struct Errors {
  double baseline = 0, kernel = 0, magnitude = 0;
  bool sameNonFinite = true;

  void add(const std::vector<double>& ref, const std::vector<float>& base, const std::vector<float>& got,
           const std::string& name) {
    for (size_t i = 0; i < ref.size(); ++i) {
      const bool fb = std::isfinite(base[i]), fg = std::isfinite(got[i]);
      if (fb != fg || (!fb && !(std::isnan(base[i]) && std::isnan(got[i])) && base[i] != got[i])) {
        if (sameNonFinite) std::printf("  %s: element %zu: baseline %g, kernel %g\n", name.c_str(), i, base[i], got[i]);
        sameNonFinite = false;
        continue;
      }
      if (!fb || !std::isfinite(ref[i])) continue;
      baseline = std::max(baseline, std::abs(base[i] - ref[i]));
      kernel = std::max(kernel, std::abs(got[i] - ref[i]));
      magnitude = std::max(magnitude, std::abs(ref[i]));
    }
  }
  bool ok() const { return sameNonFinite && kernel <= 2 * baseline + 4 * 0x1p-24 * magnitude; }
};

template <int DP> bool check(const Case& c) {
  const int hkv = c.Hkv ? c.Hkv : c.H;
  std::mt19937 rng(42);
  std::normal_distribution<double> normal;
  Tensors<double> ref;
  ref.q.resize(static_cast<size_t>(c.B) * c.H * c.Nq * c.dim);
  ref.o.resize(ref.q.size());
  ref.lse.resize(static_cast<size_t>(c.B) * c.H * c.Nq);
  ref.k.resize(static_cast<size_t>(c.B) * hkv * c.Nk * c.dim);
  ref.v.resize(ref.k.size());
  // Inputs are float32 values, so that the reference sees what the
  // kernels see.
  for (auto* x : {&ref.q, &ref.k, &ref.v})
    for (auto& e : *x) e = static_cast<float>(normal(rng));
  if (c.bias) {
    ref.bias.resize(static_cast<size_t>(c.B) * c.H * c.Nq * c.Nk);
    for (auto& e : ref.bias) e = static_cast<float>(normal(rng));
  }
  if (c.nonFinite == 1) ref.v[static_cast<size_t>(c.Nk - 1) * c.dim + 3] = INFINITY;
  if (c.nonFinite == 2) ref.q[static_cast<size_t>(5) * c.dim + 1] = NAN;
  Sides s{std::vector<int>(c.B), std::vector<int>(c.B), std::vector<double>(c.H)};
  for (int b = 0; b < c.B; ++b) s.qLens[b] = c.Nq - 17 * b - 3, s.kLens[b] = c.Nk - 29 * b - 1;
  for (int h = 0; h < c.H; ++h) s.slopes[h] = 0.5 / (h + 1);
  const auto narrow = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  Tensors<float> base{narrow(ref.q), narrow(ref.k), narrow(ref.v), narrow(ref.o), narrow(ref.lse), narrow(ref.bias)};
  Tensors<float> got = base;

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
  bool ok = true;
  const std::vector<Case> d64 = {
      {.name = "plain"},
      {.name = "causal", .causal = true},
      {.name = "causal nq < nk", .Nq = 70, .Nk = 150, .causal = true},
      {.name = "causal nq > nk", .Nq = 150, .Nk = 70, .causal = true},
      {.name = "window", .Nq = 160, .Nk = 160, .left = 20, .right = 5},
      {.name = "lengths, causal", .Nq = 130, .Nk = 140, .causal = true, .lens = true},
      {.name = "gqa", .H = 4, .Hkv = 2},
      {.name = "softcap, alibi", .causal = true, .alibi = true, .softcap = 5},
      {.name = "bias", .bias = true},
      {.name = "dropout, causal", .causal = true, .dropout = 0.2},
      {.name = "inf in V, causal", .causal = true, .nonFinite = 1},
      {.name = "inf in V", .nonFinite = 1},
      {.name = "nan in Q", .nonFinite = 2},
  };
  for (const auto& c : d64) ok &= check<64>(c);
  ok &= check<128>({.name = "plain d100", .dim = 100});
  ok &= check<128>({.name = "causal d128", .Nq = 90, .Nk = 130, .dim = 128, .causal = true});
  ok &= check<256>({.name = "window d200", .B = 1, .Nq = 80, .Nk = 90, .dim = 200, .left = 30, .right = 10});
  std::printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
