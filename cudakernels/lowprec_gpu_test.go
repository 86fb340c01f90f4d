//go:build flashgpu

package cudakernels

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/kernels/conformance"
)

// TestConformanceBF16, TestConformanceFP16 and TestConformanceTF32 run the
// shared suite, forward and backward, on the low-precision backends of each
// kernel set (testKernelSets): tensor-core forward and backward (CUDA-core backward on
// rounded operands where no tensor-core one is built: always for TF32).
// Every output must stay within twice the error of a naive computation in
// that precision.
func TestConformanceBF16(t *testing.T) { conformanceByFamily(t, BF16) }

func TestConformanceFP16(t *testing.T) { conformanceByFamily(t, FP16) }

func TestConformanceTF32(t *testing.T) { conformanceByFamily(t, TF32) }

func conformanceByFamily(t *testing.T, prec Precision) {
	// Every set runs the same problems, so their float64 references and
	// naive baselines, nearly all of the host's work, are computed for
	// the first set only (the CPU backend's float32 run keeps 3.5 GB of
	// them).
	defer conformance.KeepReferences(8 << 30)()
	for _, set := range testKernelSets {
		runKernelSet(t, set.name, prec, set, func(t *testing.T, prec Precision, opts ...Option) {
			suite := []conformance.Option{conformance.MaskedNaNMayPropagate(), gpuVariants}
			if fusedBackwardRun() {
				suite = append(suite, conformance.NonDeterministic())
			}
			conformance.Run(t, newTestBackend(t, opts...), prec, suite...)
		})
	}
}

// TestPrecisionErrors logs each precision's error against float64 on one
// problem (conformance.ReportErrors), for the package documentation.
func TestPrecisionErrors(t *testing.T) {
	forEachKernelSet(t, func(t *testing.T, prec Precision, opts ...Option) {
		conformance.ReportErrors(t, newTestBackend(t, opts...), prec)
	})
}

// TestLowPrecisionOneKey checks the cancellation that D = rowsum(dO∘O) is
// computed from the rounded dO for: with one key per row the softmax is
// constant, O is exactly the rounded V, and dS = P∘(dP − D) must vanish up
// to float32 summation error, not tf32/bf16/fp16 rounding error. dP = dO·V runs on
// tensor cores and D on CUDA cores, whose fp32 sums of the same exact
// products differ by at most D·2⁻²³·Σ|dO∘V| per row; dQ and dK must stay
// within that (times max|K|·scale, or Nq·max|Q|·scale for dK, with a factor 2
// for the rounding of dS itself). Rounding V differently in the backward
// (the bug this guards against) gives errors 2⁻⁸ relative instead. Causal
// rows when Nq > Nk see one key or none.
func TestLowPrecisionOneKey(t *testing.T) {
	forEachKernelSet(t, func(t *testing.T, prec Precision, opts ...Option) {
		if prec == FP32 {
			t.Skip("FP32 rounds nothing")
		}
		b := newTestBackend(t, opts...)
		for _, p := range []kernels.Params{
			{B: 2, H: 2, Nq: 300, Nk: 1, D: 64, Scale: 0.125},
			{B: 1, H: 2, Nq: 129, Nk: 1, D: 40, Scale: 0.3, Causal: true},
		} {
			pr := randomInputs(p, 3)
			o, lse := make([]float32, p.QLen()), make([]float32, p.LSELen())
			if err := b.Forward32(p, pr[0], pr[1], pr[2], o, lse); err != nil {
				t.Fatal(err)
			}
			dq, dk, dv := make([]float32, p.QLen()), make([]float32, p.KLen()), make([]float32, p.KLen())
			if err := b.Backward32(p, pr[0], pr[1], pr[2], o, lse, pr[3], nil, dq, dk, dv); err != nil {
				t.Fatal(err)
			}
			var ds float64 // bound on |dP − D| over all rows
			for i := range p.B * p.H * p.Nq {
				bh := i / p.Nq
				var s float64
				for d := range p.D {
					s += math.Abs(float64(pr[3][i*p.D+d]) * float64(pr[2][bh*p.D+d]))
				}
				ds = max(ds, float64(p.D)*0x1p-23*s)
			}
			bounds := map[string]float64{
				"dQ": 2 * p.Scale * ds * maxAbs(widen(pr[1])),
				"dK": 2 * p.Scale * ds * float64(p.Nq) * maxAbs(widen(pr[0])),
			}
			for name, x := range map[string][]float32{"dQ": dq, "dK": dk} {
				if e := maxAbs(widen(x)); !(e <= bounds[name]) {
					t.Errorf("%v %+v: max|%s| = %.3g, want ≤ %.3g (float32 summation error)", prec, p, name, e, bounds[name])
				}
			}
		}
	})
}

// TestLowPrecisionLimits checks the errors of the TF32, BF16 and FP16
// backends past the largest compiled head dimension.
func TestLowPrecisionLimits(t *testing.T) {
	for _, prec := range []Precision{TF32, BF16, FP16} {
		b := newTestBackend(t, WithPrecision(prec))
		p := kernels.Params{B: 1, H: 1, Nq: 3, Nk: 3, D: headDims[len(headDims)-1] + 1, Scale: 0.25}
		x := make([]float32, p.QLen())
		l := make([]float32, p.LSELen())
		for name, err := range map[string]error{
			"Forward32":  b.Forward32(p, x, x, x, make([]float32, len(x)), l),
			"Backward32": b.Backward32(p, x, x, x, x, l, x, nil, make([]float32, len(x)), make([]float32, len(x)), make([]float32, len(x))),
		} {
			if !errors.Is(err, ErrUnsupported) || !errors.Is(err, kernels.ErrInvalidParams) {
				t.Errorf("%v %s at D = %d: got %v, want ErrUnsupported and ErrInvalidParams", prec, name, p.D, err)
			}
		}
	}
}

// randomInputs returns Q, K, V and dO of p with standard normal entries.
func randomInputs(p kernels.Params, seed uint64) [4][]float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	return [4][]float32{randn[float32](rng, p.QLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.QLen())}
}
