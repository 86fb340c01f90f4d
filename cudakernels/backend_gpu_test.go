//go:build flashgpu

package cudakernels

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/kernels/conformance"
)

// testOptions adds WithKernelDir(FLASHATTN_KERNEL_DIR) to opts when that
// variable is set: freshly generated PTX to test instead of the embedded
// copy; and WithDeterministic(false) when FLASHATTN_DETERMINISTIC=0, to run
// the conformance suite on the fused backward (the tests that require
// bit-identical results between calls then fail by design).
func testOptions(opts ...Option) []Option {
	if dir := os.Getenv("FLASHATTN_KERNEL_DIR"); dir != "" {
		opts = append(opts, WithKernelDir(dir))
	}
	if fusedBackwardRun() {
		opts = append(opts, WithDeterministic(false))
	}
	return opts
}

// fusedBackwardRun reports FLASHATTN_DETERMINISTIC=0: the tests run the
// fused backward, whose sums vary in order from call to call.
func fusedBackwardRun() bool { return os.Getenv("FLASHATTN_DETERMINISTIC") == "0" }

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

// gpuVariants are the variants every GPU kernel family computes: the
// CUDA cores (FP32 and float64), and the tensor cores in TF32, BF16 and
// FP16 (a bias or dropout takes the mma.sync kernels on the H200: choose).
var gpuVariants = conformance.WithVariants(conformance.GQA, conformance.Window, conformance.Softcap, conformance.ALiBi,
	conformance.Lengths, conformance.Dropout, conformance.LSEGradient, conformance.Bias, conformance.Paged)

// TestConformanceFP32 runs the suite on the default FP32 backend: the
// CUDA-core kernels, which claim every variant and, their products running
// only over the pairs the masks leave, need no MaskedNaNMayPropagate
// exception, and on Hopper the 3xTF32 kernels for plain problems at D ≤
// 64, which need none either (passed on an H100, 2026-12-05).
func TestConformanceFP32(t *testing.T) {
	conformance.Run(t, newTestBackend(t), FP32, gpuVariants)
}

// TestConformanceFP32CUDACores runs the FP32 suite on a FamilySM80
// backend, which keeps FP32 on the CUDA cores everywhere; the default
// backend of TestConformanceFP32 takes plain problems at D ≤ 128 to the
// 3xTF32 kernels on Hopper (the forward's and the backward's scores must
// be the same bits, or dV misses the bound: NOTES, "FP32 on tensor
// cores").
func TestConformanceFP32CUDACores(t *testing.T) {
	conformance.Run(t, newTestBackend(t, WithFamily(FamilySM80)), FP32, gpuVariants)
}

func randn[T kernels.Float](rng *rand.Rand, n int) []T {
	x := make([]T, n)
	for i := range x {
		x[i] = T(rng.NormFloat64())
	}
	return x
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

// A kernelSet is one way the tensor-core tests open a backend of a
// precision: a kernel family, or a tuning table's candidate that no
// family option names.
type kernelSet struct {
	name string
	opts func(Precision) []Option
	// forced: the candidate the set's table forces (tunedCandidates; the
	// zero candidate for the families' sets); a set whose candidate a
	// precision does not have, or that runs on a device other than Hopper,
	// is skipped (it would run the family's default kernels again).
	forced candidate
}

// testKernelSets are the kernel sets the tensor-core tests run in turn: the
// two families, the Hopper forward's other kernels for plain problems
// where the family's plain forward is the warp-specialized one, and the
// persistent ones with the conversion passes (candidate; a tuning table
// may choose them).
var testKernelSets = []kernelSet{
	{name: "sm80", opts: func(Precision) []Option { return []Option{WithFamily(FamilySM80)} }},
	{name: "sm90", opts: func(Precision) []Option { return []Option{WithFamily(FamilySM90)} }},
	forcing(candidate{fam: FamilySM90, plain: plainRowBlock}),
	forcing(candidate{fam: FamilySM90, plain: plainWS2}),
	forcing(candidate{fam: FamilySM90, passes: true}),
	forcing(candidate{fam: FamilySM90, plain: plainWS2, passes: true}),
}

// forcing returns the kernel set of a FamilyAuto backend whose table
// chooses c wherever it exists.
func forcing(c candidate) kernelSet {
	return kernelSet{name: c.String(), forced: c, opts: func(prec Precision) []Option {
		return []Option{WithTuneTable(forcingTable(prec, c))}
	}}
}

// runKernelSet runs fn as the subtest name with the options that open
// set's backend of prec, or skips it (kernelSet.forced).
func runKernelSet(t *testing.T, name string, prec Precision, set kernelSet, fn func(t *testing.T, prec Precision, opts ...Option)) {
	t.Run(name, func(t *testing.T) {
		if set.forced != (candidate{}) {
			if !slices.Contains(tunedCandidates(prec), set.forced) {
				t.Skipf("%s: no such kernel for %v", set.name, prec)
			}
			if _, capab, err := probe(0); err != nil || !capab.hopper() {
				t.Skipf("%s runs on compute capability 9.0 only (device 0: %+v, %v)", set.name, capab, err)
			}
		}
		fn(t, prec, append([]Option{WithPrecision(prec)}, set.opts(prec)...)...)
	})
}

// forEachKernelSet runs fn as a subtest for every precision and, for the
// tensor-core precisions, every kernel set ("fp32", "fp32-sm80", "bf16-sm80",
// "bf16-sm90", "bf16-sm90-rowblock", "bf16-sm90-ws2", "bf16-sm90-passes", …), with the
// options that open that backend.
func forEachKernelSet(t *testing.T, fn func(t *testing.T, prec Precision, opts ...Option)) {
	for _, prec := range []Precision{FP32, TF32, BF16, FP16} {
		if prec == FP32 {
			// The default (on Hopper the 3xTF32 kernels for plain
			// problems at D ≤ 64), and the CUDA cores alone (FamilySM80).
			t.Run(prec.String(), func(t *testing.T) { fn(t, prec, WithPrecision(prec)) })
			t.Run(prec.String()+"-sm80", func(t *testing.T) { fn(t, prec, WithPrecision(prec), WithFamily(FamilySM80)) })
			continue
		}
		for _, set := range testKernelSets {
			runKernelSet(t, prec.String()+"-"+set.name, prec, set, fn)
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

// TestDropoutMaskMatchesCPU reads the dropout mask the GPU draws out of the
// forward, bit for bit: with D = Nk and V the identity, O[i, j] is P_ij
// times the keep factor, so it is zero exactly where entry (i, j) is
// dropped (P_ij > 0 for every visible key here). It must be zero where and
// only where kernels.Dropout.Kept says so, on every (batch, head) pair, in
// every precision and kernel family (the tensor-core forwards round P·Z
// and V = 1 exactly, and P_ij ≈ 1/120 is far from underflow) and in
// float64, whatever the chunking (the pair index must be the call's).
func TestDropoutMaskMatchesCPU(t *testing.T) {
	forEachKernelSet(t, func(t *testing.T, _ Precision, opts ...Option) { checkDropoutMask(t, newTestBackend(t, opts...)) })
}

func checkDropoutMask(t *testing.T, b *Backend) {
	p := kernels.Params{B: 2, H: 3, Nq: 37, Nk: 120, D: 120, Scale: 0.01,
		Dropout: kernels.Dropout{P: 0.3, Seed: 0xDEADBEEF12345, Offset: 1<<32 + 7}}
	rng := rand.New(rand.NewPCG(11, 12))
	q, k := randn[float32](rng, p.QLen()), randn[float32](rng, p.KLen())
	v := make([]float32, p.KLen())
	for bh := range p.B * p.H {
		for j := range p.Nk {
			v[(bh*p.Nk+j)*p.D+j] = 1
		}
	}
	o, lse := make([]float32, p.QLen()), make([]float32, p.LSELen())
	o64, lse64 := make([]float64, p.QLen()), make([]float64, p.LSELen())
	kept := 0
	for _, hc := range []int{p.B * p.H, 4, 1} {
		b.xfer.chunkOverride = hc
		if err := b.Forward32(p, q, k, v, o, lse); err != nil {
			t.Fatal(err)
		}
		if err := b.Forward64(p, widen(q), widen(k), widen(v), o64, lse64); err != nil {
			t.Fatal(err)
		}
		for bh := range p.B * p.H {
			for i := range p.Nq {
				for j := range p.Nk {
					at := (bh*p.Nq+i)*p.D + j
					want := p.Dropout.Kept(bh, i, j)
					if (o[at] != 0) != want || (o64[at] != 0) != want {
						t.Fatalf("chunks of %d: pair %d row %d key %d: O = %v (float32), %v (float64), want kept = %v",
							hc, bh, i, j, o[at], o64[at], want)
					}
					if want {
						kept++
					}
				}
			}
		}
	}
	if n := 3 * p.B * p.H * p.Nq * p.Nk; kept == n || kept == 0 {
		t.Fatalf("%d of %d entries kept: the test would not see a wrong mask", kept, n)
	}
}
