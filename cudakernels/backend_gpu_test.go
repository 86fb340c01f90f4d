//go:build flashgpu

package cudakernels

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/kernels/conformance"
)

// testOptions adds WithKernelDir(FLASHATTN_KERNEL_DIR) to opts when that
// variable is set: freshly generated PTX to test instead of the embedded
// copy.
func testOptions(opts ...Option) []Option {
	if dir := os.Getenv("FLASHATTN_KERNEL_DIR"); dir != "" {
		opts = append(opts, WithKernelDir(dir))
	}
	return opts
}

// newTestBackend opens the device, or skips the test when there is none or
// it cannot run what opts ask for (a kernel family). FLASHATTN_KERNEL_DIR,
// when set, points at freshly generated PTX to test instead of the embedded
// copy.
func newTestBackend(t testing.TB, opts ...Option) *Backend {
	t.Helper()
	b, err := NewBackend(testOptions(opts...)...)
	if errors.Is(err, ErrNoDevice) || errors.Is(err, ErrUnsupported) {
		t.Skipf("no CUDA device for this test: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// gpuVariants are the variants the CUDA-core kernels (FP32 and float64)
// compute; tensorCoreVariants those of the tensor-core families.
var (
	gpuVariants = conformance.WithVariants(conformance.GQA, conformance.Window, conformance.Softcap, conformance.ALiBi,
		conformance.Lengths, conformance.LSEGradient)
	tensorCoreVariants = conformance.WithVariants(conformance.LSEGradient)
)

func TestConformanceFP32(t *testing.T) {
	conformance.Run(t, newTestBackend(t), FP32, conformance.MaskedNaNMayPropagate(), gpuVariants)
}

func randn[T kernels.Float](rng *rand.Rand, n int) []T {
	x := make([]T, n)
	for i := range x {
		x[i] = T(rng.NormFloat64())
	}
	return x
}

func widen[T kernels.Float](x []T) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func maxAbs(x []float64) float64 {
	var m float64
	for _, v := range x {
		if !math.IsInf(v, 0) {
			m = max(m, math.Abs(v))
		}
	}
	return m
}

type outputs[T kernels.Float] struct{ o, lse, dq, dk, dv []T }

func runBoth[T kernels.Float](p kernels.Params, q, k, v, do []T,
	fwd func(kernels.Params, []T, []T, []T, []T, []T) error,
	bwd kernels.BackwardFunc[T]) (outputs[T], error) {
	r := outputs[T]{make([]T, p.QLen()), make([]T, p.LSELen()), make([]T, p.QLen()), make([]T, p.KLen()), make([]T, p.KLen())}
	// Poison the outputs: every element must be written.
	for _, s := range [][]T{r.o, r.lse, r.dq, r.dk, r.dv} {
		for i := range s {
			s[i] = T(math.NaN())
		}
	}
	if err := fwd(p, q, k, v, r.o, r.lse); err != nil {
		return r, err
	}
	return r, bwd(p, q, k, v, r.o, r.lse, do, nil, r.dq, r.dk, r.dv)
}

// TestHeadDims covers what the conformance sweep leaves out, in every
// precision: head dimensions above 128, padded ones (D = 96, 200), and
// Nq ≠ Nk across tile boundaries, with the suite's derived tolerances.
func TestHeadDims(t *testing.T) {
	var ps []kernels.Params
	for _, d := range []int{32, 96, 200, 256} {
		for _, nn := range [][2]int{{113, 113}, {70, 255}, {255, 33}} {
			for _, causal := range []bool{false, true} {
				ps = append(ps, kernels.Params{B: 1, H: 2, Nq: nn[0], Nk: nn[1], D: d, Scale: 1 / math.Sqrt(float64(d)), Causal: causal})
			}
		}
	}
	forEachKernelSet(t, func(t *testing.T, prec Precision, opts ...Option) {
		conformance.RunShapes(t, newTestBackend(t, opts...), prec, ps)
	})
}

// testFamilies are the kernel families the tensor-core tests run in turn.
var testFamilies = []Family{FamilySM80, FamilySM90}

// forEachKernelSet runs fn as a subtest for every precision and, for the
// tensor-core precisions, every kernel family ("fp32", "bf16-sm80",
// "bf16-sm90", …), with the options that open that backend. A family the
// device cannot run is skipped by newTestBackend.
func forEachKernelSet(t *testing.T, fn func(t *testing.T, prec Precision, opts ...Option)) {
	for _, prec := range []Precision{FP32, TF32, BF16, FP16} {
		if prec == FP32 { // CUDA cores only: no families
			t.Run(prec.String(), func(t *testing.T) { fn(t, prec, WithPrecision(prec)) })
			continue
		}
		for _, f := range testFamilies {
			t.Run(prec.String()+"-"+f.String(), func(t *testing.T) { fn(t, prec, WithPrecision(prec), WithFamily(f)) })
		}
	}
}

func TestUnsupportedHeadDim(t *testing.T) {
	b := newTestBackend(t)
	p := kernels.Params{B: 1, H: 1, Nq: 4, Nk: 4, D: 257, Scale: 0.1}
	x := make([]float32, p.QLen())
	err := b.Forward32(p, x, x, x, make([]float32, p.QLen()), make([]float32, p.LSELen()))
	if !errors.Is(err, kernels.ErrInvalidParams) || !errors.Is(err, ErrUnsupported) {
		t.Fatalf("D = 257: got %v, want an error wrapping ErrInvalidParams and ErrUnsupported", err)
	}
}

func TestUnknownPrecision(t *testing.T) {
	if _, err := NewBackend(WithPrecision(Precision(99))); !errors.Is(err, ErrUnsupported) {
		t.Errorf("precision 99: got %v, want ErrUnsupported", err)
	}
}

func TestClose(t *testing.T) {
	b := newTestBackend(t)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	p := kernels.Params{B: 1, H: 1, Nq: 1, Nk: 1, D: 8, Scale: 1}
	x := make([]float32, 8)
	if err := b.Forward32(p, x, x, x, make([]float32, 8), make([]float32, 1)); err == nil {
		t.Fatal("Forward32 after Close succeeded")
	}
}
