// cases.h holds what the emulated kernels' test programs share: the
// problems they run (Case), their tensors in one precision, the kernels'
// Params for them, and the error measure. See simt_forward.cc.
#pragma once
#include <cmath>
#include <cstring>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../csrc/params.cuh"

using flash::Params;

struct Case {
  std::string name;
  int B = 2, H = 2, Hkv = 0, Nq = 100, Nk = 100, dim = 40;
  bool causal = false;
  long long left = -1, right = -1;  // the window (−1: unbounded)
  bool lens = false, alibi = false, bias = false;
  double softcap = 0, dropout = 0;
  // nonFinite: 1 puts +Inf in V at the last key of the first head (under
  // a causal mask only the last row sees it), 2 a NaN in row 5 of Q (seen
  // by the keys up to 5 under a causal mask), 3 +Inf in K as 1 in V.
  int nonFinite = 0;
};

// Tensors are a case's tensors in one precision: the forward's, and the
// backward's where a program runs it (dout, delta and the gradients stay
// empty otherwise).
template <typename T> struct Tensors {
  std::vector<T> q, k, v, o, lse, bias, dout, delta, dq, dk, dv;
};

// The variants' side arrays, the same for every precision.
struct Sides {
  std::vector<int> qLens, kLens;
  std::vector<double> slopes;
};

// cases are the problems every program runs: the masks, lengths, GQA, the
// softcap with ALiBi, a bias, dropout and non-finite inputs at D = 40
// (DP = 64), and D = 100, 128 and 200 (DP = 128, 256).
inline std::vector<Case> cases() {
  return {
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
      {.name = "nan in Q, causal", .causal = true, .nonFinite = 2},
      {.name = "inf in K, causal", .causal = true, .nonFinite = 3},
      {.name = "plain d100", .dim = 100},
      {.name = "causal d128", .Nq = 90, .Nk = 130, .dim = 128, .causal = true},
      {.name = "window d200", .B = 1, .Nq = 80, .Nk = 90, .dim = 200, .left = 30, .right = 10},
  };
}

// paddedDim is the compiled head dimension a case's D runs at (DP ≥ 64:
// the blocked kernels' range).
inline int paddedDim(int d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }

template <typename T> Params params(const Case& c, Tensors<T>& t, Sides& s) {
  const int hkv = c.Hkv ? c.Hkv : c.H;
  Params p{};
  p.q = t.q.data(), p.k = t.k.data(), p.v = t.v.data(), p.o = t.o.data(), p.lse = t.lse.data();
  p.dout = t.dout.data(), p.delta = t.delta.data(), p.dq = t.dq.data(), p.dk = t.dk.data(), p.dv = t.dv.data();
  p.q_batch_stride = p.o_batch_stride = p.dout_batch_stride = p.dq_batch_stride = static_cast<long long>(c.H) * c.Nq * c.dim;
  p.q_head_stride = p.o_head_stride = p.dout_head_stride = p.dq_head_stride = static_cast<long long>(c.Nq) * c.dim;
  p.k_batch_stride = p.v_batch_stride = p.dk_batch_stride = p.dv_batch_stride = static_cast<long long>(hkv) * c.Nk * c.dim;
  p.k_head_stride = p.v_head_stride = p.dk_head_stride = p.dv_head_stride = static_cast<long long>(c.Nk) * c.dim;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = c.dim;
  p.dout_row_stride = p.dq_row_stride = p.dk_row_stride = p.dv_row_stride = c.dim;
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

// Inputs are a case's tensors in float64, every value a float32 one (so
// that the reference sees what the kernels see), with its non-finite
// entries, and its side arrays. Outputs are zeros.
struct Inputs {
  Tensors<double> t;
  Sides s;
};

inline Inputs inputs(const Case& c) {
  const int hkv = c.Hkv ? c.Hkv : c.H;
  const size_t rows = static_cast<size_t>(c.B) * c.H * c.Nq, keys = static_cast<size_t>(c.B) * hkv * c.Nk;
  std::mt19937 rng(42);
  std::normal_distribution<double> normal;
  const auto draw = [&](size_t n) {
    std::vector<double> x(n);
    for (auto& e : x) e = static_cast<float>(normal(rng));
    return x;
  };
  Inputs in;
  Tensors<double>& t = in.t;
  t.q = draw(rows * c.dim), t.k = draw(keys * c.dim), t.v = draw(keys * c.dim), t.dout = draw(rows * c.dim);
  t.o.assign(rows * c.dim, 0), t.lse.assign(rows, 0), t.delta.assign(rows, 0);
  t.dq.assign(rows * c.dim, 0), t.dk.assign(keys * c.dim, 0), t.dv.assign(keys * c.dim, 0);
  if (c.bias) t.bias = draw(static_cast<size_t>(c.B) * c.H * c.Nq * c.Nk);
  if (c.nonFinite == 1) t.v[static_cast<size_t>(c.Nk - 1) * c.dim + 3] = INFINITY;
  if (c.nonFinite == 2) t.q[static_cast<size_t>(5) * c.dim + 1] = NAN;
  if (c.nonFinite == 3) t.k[static_cast<size_t>(c.Nk - 1) * c.dim + 2] = INFINITY;
  in.s = Sides{std::vector<int>(c.B), std::vector<int>(c.B), std::vector<double>(c.H)};
  for (int b = 0; b < c.B; ++b) in.s.qLens[b] = c.Nq - 17 * b - 3, in.s.kLens[b] = c.Nk - 29 * b - 1;
  for (int h = 0; h < c.H; ++h) in.s.slopes[h] = 0.5 / (h + 1);
  return in;
}

// narrowed is t in float32.
inline Tensors<float> narrowed(const Tensors<double>& t) {
  const auto f = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  return {f(t.q), f(t.k), f(t.v), f(t.o), f(t.lse), f(t.bias), f(t.dout), f(t.delta), f(t.dq), f(t.dk), f(t.dv)};
}

// Errors of a float32 result against the reference, and whether its
// non-finite elements are the baseline's.
struct Errors {
  double baseline = 0, kernel = 0, magnitude = 0;
  size_t differ = 0;  // elements whose bits differ from the baseline's (NaNs alike)
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
      if (!(std::isnan(base[i]) && std::isnan(got[i])) && std::memcmp(&base[i], &got[i], sizeof(float)) != 0) ++differ;
      if (!fb || !std::isfinite(ref[i])) continue;
      baseline = std::max(baseline, std::abs(base[i] - ref[i]));
      kernel = std::max(kernel, std::abs(got[i] - ref[i]));
      magnitude = std::max(magnitude, std::abs(ref[i]));
    }
  }
  bool ok() const { return sameNonFinite && kernel <= 2 * baseline + 4 * 0x1p-24 * magnitude; }
};


// runCases runs check<DP> (a generic lambda) on every case at its padded
// dimension, prints PASS or FAIL and returns whether all passed.
template <typename F> bool runCases(F check) {
  bool ok = true;
  for (const auto& c : cases()) {
    switch (paddedDim(c.dim)) {
      case 64: ok &= check.template operator()<64>(c); break;
      case 128: ok &= check.template operator()<128>(c); break;
      default: ok &= check.template operator()<256>(c); break;
    }
  }
  std::printf(ok ? "PASS\n" : "FAIL\n");
  return ok;
}
