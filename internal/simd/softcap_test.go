package simd

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSoftcapSteps32 requires WidenScale32 and TanhScaleFromExp32 (the
// assembly where the CPU has it) to give the portable loops' bits on
// every length up to 70 (every tail of 16 lanes) and two long rows, with
// special values among the inputs, and to leave the elements around their
// slices alone.
func TestSoftcapSteps32(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	specials := []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(), math.MaxFloat32, 1e-30, 800}
	for n := range 300 {
		if n > 70 && n != 257 && n != 299 {
			continue
		}
		const guard = 9
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(rng.NormFloat64() * 40)
			if rng.IntN(8) == 0 {
				src[i] = float32(specials[rng.IntN(len(specials))])
			}
		}
		const a = 2 / 30.0
		wBuf, wantW := guarded[float64](n, guard), make([]float64, n)
		w := wBuf[guard : guard+n]
		WidenScale32(w, src, a)
		widenScaleGeneric(wantW, src, a)
		if !sameBits(w, wantW) {
			t.Fatalf("n=%d: WidenScale32 = %v, want %v", n, w, wantW)
		}
		checkGuards(t, "WidenScale32", wBuf, guard, n)

		// Exponentials over the whole range, special values included.
		e := make([]float64, n)
		for i := range e {
			e[i] = math.Exp(rng.NormFloat64() * 20)
			if rng.IntN(8) == 0 {
				e[i] = specials[rng.IntN(len(specials))]
			}
		}
		const c = 30
		for _, withGrad := range []bool{false, true} {
			dBuf, gBuf := guarded[float32](n, guard), guarded[float32](n, guard)
			dst, grad := dBuf[guard:guard+n], gBuf[guard:guard+n]
			wantD, wantG := make([]float32, n), make([]float32, n)
			if !withGrad {
				grad, wantG = nil, nil
			}
			TanhScaleFromExp32(dst, grad, e, c)
			tanhScaleFromExpGeneric(wantD, wantG, e, c)
			if !sameBits(dst, wantD) || !sameBits(grad, wantG) {
				t.Fatalf("n=%d grad=%v: TanhScaleFromExp32 = %v, %v, want %v, %v", n, withGrad, dst, grad, wantD, wantG)
			}
			checkGuards(t, "TanhScaleFromExp32", dBuf, guard, n)
			checkGuards(t, "TanhScaleFromExp32's grad", gBuf, guard, n)
		}
	}
}

// TestTanhScaleFromExp checks the formula's values: tanh at a few points,
// its limits at e = 0 and e = +Inf, and NaN.
func TestTanhScaleFromExp(t *testing.T) {
	xs := []float64{-3, -0.5, 0, 0.25, 2}
	e, want := make([]float64, len(xs)+3), make([]float64, len(xs)+3)
	for i, x := range xs {
		e[i], want[i] = math.Exp(2*x), math.Tanh(x)
	}
	e[len(xs)], want[len(xs)] = 0, -1
	e[len(xs)+1], want[len(xs)+1] = math.Inf(1), 1
	e[len(xs)+2], want[len(xs)+2] = math.NaN(), math.NaN()
	dst, grad := make([]float64, len(e)), make([]float64, len(e))
	TanhScaleFromExp64(dst, grad, e, 1)
	for i := range e {
		if math.IsNaN(want[i]) {
			if !math.IsNaN(dst[i]) || !math.IsNaN(grad[i]) {
				t.Errorf("e=NaN: tanh = %v, grad %v, want NaN", dst[i], grad[i])
			}
			continue
		}
		if math.Abs(dst[i]-want[i]) > 1e-15 || math.Abs(grad[i]-(1-want[i]*want[i])) > 1e-15 {
			t.Errorf("e=%v: tanh = %v, grad %v, want %v", e[i], dst[i], grad[i], want[i])
		}
	}
}

func guarded[T float32 | float64](n, guard int) []T {
	buf := make([]T, n+2*guard)
	for i := range buf {
		buf[i] = sentinel
	}
	return buf
}

func checkGuards[T float32 | float64](t *testing.T, name string, buf []T, guard, n int) {
	t.Helper()
	for i, v := range buf {
		if (i < guard || i >= guard+n) && v != sentinel {
			t.Fatalf("%s, n=%d: guard element %d changed to %v", name, n, i, v)
		}
	}
}
