//go:build flashgpu

package cudakernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// The BF16 and FP16 backends have a tensor-core forward but no backward yet,
// so the shared conformance suite (which runs both) cannot take them. These
// tests apply its forward rules: O and LSE within twice the error of a naive
// forward whose matrix-product operands and results are rounded to the
// precision, plus two rounding units of the output's natural magnitude.

// roundTo returns the rounding of BF16 or FP16 storage for float32 values.
func roundTo(prec Precision) func(float32) float32 {
	mantissa := func(bits uint) func(float32) float32 {
		drop := 23 - bits
		return func(x float32) float32 {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return x
			}
			u := math.Float32bits(x)
			u += uint32(1)<<(drop-1) - 1 + (u>>drop)&1 // to nearest, ties to even
			return math.Float32frombits(u &^ (uint32(1)<<drop - 1))
		}
	}
	if prec == BF16 {
		return mantissa(7)
	}
	half := mantissa(10)
	return func(x float32) float32 {
		ax := math.Abs(float64(x))
		switch {
		case math.IsNaN(float64(x)) || ax == 0:
			return x
		case ax >= 65520: // past the largest half, 65504
			return float32(math.Copysign(math.Inf(1), float64(x)))
		case ax < 1.0/(1<<14): // subnormal halves are spaced 2^-24
			return float32(math.RoundToEven(float64(x)*(1<<24)) / (1 << 24))
		}
		return half(x)
	}
}

// unitOf is half the spacing of numbers near 1 in prec.
func unitOf(prec Precision) float64 {
	if prec == BF16 {
		return 0x1p-8
	}
	return 0x1p-11
}

// naiveForwardRounded is the baseline: attention row by row in float32 with
// the scores, P and O stored in prec, and Q, K, V rounded to it.
func naiveForwardRounded(p kernels.Params, prec Precision, q, k, v []float32) (o, lse []float32) {
	rnd := roundTo(prec)
	rounded := func(x []float32) []float32 {
		y := make([]float32, len(x))
		for i, xi := range x {
			y[i] = rnd(xi)
		}
		return y
	}
	qr, kr, vr := rounded(q), rounded(k), rounded(v)
	o, lse = make([]float32, p.QLen()), make([]float32, p.LSELen())
	pr := make([]float32, p.Nk)
	for bh := range p.B * p.H {
		row := func(t []float32, rows, i int) []float32 { return t[(bh*rows+i)*p.D : (bh*rows+i+1)*p.D] }
		for i := range p.Nq {
			n := p.VisibleKeys(i)
			if n == 0 {
				lse[bh*p.Nq+i] = float32(math.Inf(1))
				continue
			}
			m := float32(math.Inf(-1))
			for j := range n {
				var s float32
				for d, x := range row(qr, p.Nq, i) {
					s += x * row(kr, p.Nk, j)[d]
				}
				pr[j] = rnd(float32(p.Scale) * s)
				m = max(m, pr[j])
			}
			var l float32
			for j := range n {
				pr[j] = float32(math.Exp(float64(pr[j] - m)))
				l += pr[j]
			}
			lse[bh*p.Nq+i] = m + float32(math.Log(float64(l)))
			oi := row(o, p.Nq, i)
			for j := range n {
				pj := rnd(pr[j] / l)
				for d, x := range row(vr, p.Nk, j) {
					oi[d] += pj * x
				}
			}
			for d := range oi {
				oi[d] = rnd(oi[d])
			}
		}
	}
	return o, lse
}

func checkForwardLowPrecision(t *testing.T, b *Backend, prec Precision, p kernels.Params, q, k, v []float32) {
	t.Helper()
	o, lse := make([]float32, p.QLen()), make([]float32, p.LSELen())
	for i := range o {
		o[i] = float32(math.NaN()) // every element must be written
	}
	in := [][]float32{slices.Clone(q), slices.Clone(k), slices.Clone(v)}
	if err := b.Forward32(p, q, k, v, o, lse); err != nil {
		t.Fatal(err)
	}
	for i, x := range [][]float32{q, k, v} {
		if !slices.Equal(x, in[i]) {
			t.Fatalf("input %d modified", i)
		}
	}
	q64, k64, v64 := widen(q), widen(k), widen(v)
	refO, refL := make([]float64, p.QLen()), make([]float64, p.LSELen())
	if err := kernels.NaiveForward(p, q64, k64, v64, refO, refL); err != nil {
		t.Fatal(err)
	}
	baseO, baseL := naiveForwardRounded(p, prec, q, k, v)
	for _, c := range []struct {
		name      string
		got, base []float32
		want      []float64
		natural   float64
	}{{"O", o, baseO, refO, maxAbs(v64)}, {"LSE", lse, baseL, refL, maxAbs(refL)}} {
		bound := 2*maxErr(c.base, c.want) + 2*unitOf(prec)*max(maxAbs(c.want), c.natural)
		if e := maxErr(c.got, c.want); !(e <= bound) {
			t.Errorf("%v %s: error %.3g > bound %.3g", prec, c.name, e, bound)
		}
	}
}

func TestForwardLowPrecision(t *testing.T) {
	for _, prec := range []Precision{BF16, FP16} {
		b := newTestBackend(t, WithPrecision(prec))
		t.Run(prec.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, uint64(prec)))
			ns := []int{1, 17, 113, 255, 1023}
			for i, n := range ns {
				other := ns[(i+1)%len(ns)]
				for _, d := range []int{8, 24, 40, 64, 80, 128} {
					for _, causal := range []bool{false, true} {
						for _, nn := range [][2]int{{n, n}, {n, other}, {other, n}} {
							p := kernels.Params{B: 1, H: 2, Nq: nn[0], Nk: nn[1], D: d, Scale: 1 / math.Sqrt(float64(d)), Causal: causal}
							q, k, v := randn[float32](rng, p.QLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.KLen())
							t.Run(fmt.Sprintf("Nq%d_Nk%d_D%d_causal=%v", p.Nq, p.Nk, d, causal), func(t *testing.T) {
								checkForwardLowPrecision(t, b, prec, p, q, k, v)
							})
						}
					}
				}
			}
		})
	}
}

// TestLowPrecisionLimits checks the honest errors of the BF16 and FP16
// backends: no backward yet, and no forward above the verified head
// dimension.
func TestLowPrecisionLimits(t *testing.T) {
	for _, prec := range []Precision{BF16, FP16} {
		b := newTestBackend(t, WithPrecision(prec))
		p := kernels.Params{B: 1, H: 1, Nq: 3, Nk: 3, D: 16, Scale: 0.25}
		x := make([]float32, p.QLen())
		l := make([]float32, p.LSELen())
		if err := b.Backward32(p, x, x, x, x, l, x, make([]float32, len(x)), make([]float32, len(x)), make([]float32, len(x))); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%v Backward32: got %v, want ErrUnsupported", prec, err)
		}
		p.D = mmaVerifiedDim + 1
		x = make([]float32, p.QLen())
		if err := b.Forward32(p, x, x, x, make([]float32, len(x)), l); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%v Forward32 at D = %d: got %v, want ErrUnsupported", prec, p.D, err)
		}
	}
}
