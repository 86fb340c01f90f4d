package simd

import (
	"math"
	"testing"
)

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
