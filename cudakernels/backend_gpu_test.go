//go:build flashgpu

package cudakernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/kernels/conformance"
)

// newTestBackend opens the device, or skips the test when there is none.
// FLASHATTN_KERNEL_DIR, when set, points at freshly generated PTX to test
// instead of the embedded copy.
func newTestBackend(t testing.TB, opts ...Option) *Backend {
	t.Helper()
	if dir := os.Getenv("FLASHATTN_KERNEL_DIR"); dir != "" {
		opts = append(opts, WithKernelDir(dir))
	}
	b, err := NewBackend(opts...)
	if errors.Is(err, ErrNoDevice) {
		t.Skipf("no CUDA device: %v", err)
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

func TestConformanceFP32(t *testing.T) {
	conformance.Run(t, newTestBackend(t), FP32)
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

// maxErr is max|got − want| over finite entries; mismatched infinities or a
// NaN give +Inf.
func maxErr[T kernels.Float](got []T, want []float64) float64 {
	var e float64
	for i, g := range got {
		w := float64(want[i])
		switch {
		case math.IsInf(w, 0) || math.IsInf(float64(g), 0):
			if float64(g) != w {
				return math.Inf(1)
			}
		case math.IsNaN(float64(g)):
			return math.Inf(1)
		default:
			e = max(e, math.Abs(float64(g)-w))
		}
	}
	return e
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
	bwd func(kernels.Params, []T, []T, []T, []T, []T, []T, []T, []T, []T) error) (outputs[T], error) {
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
	return r, bwd(p, q, k, v, r.o, r.lse, do, r.dq, r.dk, r.dv)
}

// TestHeadDims covers what the conformance sweep leaves out: head dimensions
// up to 256, padded ones (D = 200), and Nq ≠ Nk across tile boundaries. The
// bounds are the conformance suite's: float32 within twice the naive float32
// error plus two rounding units of the output's natural magnitude (its
// largest term: max|V| for O, scale·max|dO|·max|V|·max|K| for dQ, …);
// float64 within 1e-10 of that magnitude.
func TestHeadDims(t *testing.T) {
	b := newTestBackend(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, d := range []int{32, 96, 200, 256} {
		for _, nn := range [][2]int{{113, 113}, {70, 255}, {255, 33}} {
			for _, causal := range []bool{false, true} {
				p := kernels.Params{B: 1, H: 2, Nq: nn[0], Nk: nn[1], D: d, Scale: 1 / math.Sqrt(float64(d)), Causal: causal}
				t.Run(fmt.Sprintf("D%d_Nq%d_Nk%d_causal=%v", d, p.Nq, p.Nk, causal), func(t *testing.T) {
					q, k, v, do := randn[float32](rng, p.QLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.QLen())
					q64, k64, v64, do64 := widen(q), widen(k), widen(v), widen(do)
					ref, err := runBoth(p, q64, k64, v64, do64, kernels.NaiveForward[float64], kernels.NaiveBackward[float64])
					if err != nil {
						t.Fatal(err)
					}
					naive, err := runBoth(p, q, k, v, do, kernels.NaiveForward[float32], kernels.NaiveBackward[float32])
					if err != nil {
						t.Fatal(err)
					}
					got32, err := runBoth(p, q, k, v, do, b.Forward32, b.Backward32)
					if err != nil {
						t.Fatal(err)
					}
					got64, err := runBoth(p, q64, k64, v64, do64, b.Forward64, b.Backward64)
					if err != nil {
						t.Fatal(err)
					}
					names := []string{"o", "lse", "dq", "dk", "dv"}
					refs := [][]float64{ref.o, ref.lse, ref.dq, ref.dk, ref.dv}
					g32 := [][]float32{got32.o, got32.lse, got32.dq, got32.dk, got32.dv}
					n32 := [][]float32{naive.o, naive.lse, naive.dq, naive.dk, naive.dv}
					g64 := [][]float64{got64.o, got64.lse, got64.dq, got64.dk, got64.dv}
					dp := maxAbs(do64) * maxAbs(v64)
					natural := []float64{maxAbs(v64), maxAbs(ref.lse), p.Scale * dp * maxAbs(k64), p.Scale * dp * maxAbs(q64), maxAbs(do64)}
					for i, name := range names {
						scale := max(maxAbs(refs[i]), natural[i])
						if e, bound := maxErr(g32[i], refs[i]), 2*maxErr(n32[i], refs[i])+0x1p-23*scale; !(e <= bound) {
							t.Errorf("fp32 %s: error %.3g > bound %.3g", name, e, bound)
						}
						if e, bound := maxErr(g64[i], refs[i]), 1e-10*scale; !(e <= bound) {
							t.Errorf("fp64 %s: error %.3g > bound %.3g", name, e, bound)
						}
					}
				})
			}
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

func TestUnimplementedPrecision(t *testing.T) {
	for _, prec := range []Precision{TF32, Precision(99)} {
		if _, err := NewBackend(WithPrecision(prec)); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%v: got %v, want ErrUnsupported until its kernels exist", prec, err)
		}
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
