package simd

import (
	"math"
	"math/rand/v2"
	"testing"
)

type vecImpl[T float32 | float64] struct {
	name     string
	max      func(x []T) T
	scale    func(x []T, a T)
	add, sub func(s, t []T)
	mul      func(s, t []T) // nil for float64, which has no Mul
}

func TestVec32(t *testing.T) { testVec(t, vec32Impls()) }
func TestVec64(t *testing.T) { testVec(t, vec64Impls()) }

// testVec checks Max, Scale, Add and Sub on every length up to 70 (all
// vector tails of both widths) and a long row, in a guarded buffer (Add's
// and Sub's t one element longer than s, which they must not read past
// len(s)). All are exact operations, so results must match the generic
// loop bit for bit; the guards must not change.
func testVec[T float32 | float64](t *testing.T, impls []vecImpl[T]) {
	rng := rand.New(rand.NewPCG(13, 14))
	nan, inf := T(math.NaN()), T(math.Inf(1))
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			for n := range 300 {
				if n > 70 && n != 257 && n != 299 {
					continue
				}
				const guard = 9
				buf := make([]T, n+2*guard)
				for i := range buf {
					buf[i] = sentinel
				}
				x := buf[guard : guard+n]
				for i := range x {
					x[i] = T(rng.NormFloat64() * 10)
					switch rng.IntN(16) {
					case 0:
						x[i] = nan
					case 1:
						x[i] = -inf
					}
				}
				if n > 0 && rng.IntN(4) == 0 {
					x[rng.IntN(n)] = inf
				}
				x0 := append([]T(nil), x...)

				if got, want := impl.max(x), maxGeneric(x0); got != want {
					t.Fatalf("n=%d: max = %v, want %v", n, got, want)
				}
				if !sameBits(x, x0) {
					t.Fatalf("n=%d: max modified x", n)
				}
				a := T(rng.NormFloat64())
				impl.scale(x, a)
				scaleGeneric(x0, a)
				if !sameBits(x, x0) {
					t.Fatalf("n=%d: scale = %v, want %v", n, x, x0)
				}
				tb := make([]T, n+1)
				for i := range tb {
					tb[i] = T(rng.NormFloat64() * 10)
					if rng.IntN(16) == 0 {
						tb[i] = inf
					}
				}
				tb[n] = nan // past s: must not reach it
				for _, op := range []struct {
					name      string
					got, want func(s, t []T)
				}{{"add", impl.add, addGeneric[T]}, {"sub", impl.sub, subGeneric[T]}, {"mul", impl.mul, mulGeneric[T]}} {
					if op.got == nil {
						continue
					}
					op.got(x, tb)
					op.want(x0, tb)
					if !sameBits(x, x0) {
						t.Fatalf("n=%d: %s = %v, want %v", n, op.name, x, x0)
					}
				}
				for i, v := range buf {
					if (i < guard || i >= guard+n) && v != sentinel {
						t.Fatalf("n=%d: guard element %d changed to %v", n, i, v)
					}
				}
			}
		})
	}
}

func TestVecExported(t *testing.T) {
	if m := Max32(nil); !math.IsInf(float64(m), -1) {
		t.Errorf("Max32(nil) = %v", m)
	}
	if m := Max64([]float64{1, math.NaN(), 3, 2}); m != 3 {
		t.Errorf("Max64 = %v", m)
	}
	x := []float32{1, 2, 3}
	Scale32(x, 2)
	Scale32(nil, 2)
	y := []float64{1, 2, 3}
	Scale64(y, 0.5)
	if x[2] != 6 || y[2] != 1.5 || Max32(x) != 6 {
		t.Errorf("Scale32/Scale64 = %v %v", x, y)
	}
}

// TestMul32 checks Mul32 against the portable loop bit for bit on every
// length up to 40 and a long row, NaN, ±Inf and −0 among the factors, t
// one element longer than s (never read past it); a NaN only has to be a
// NaN (sameBitsOrNaN).
func TestMul32(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for n := range 258 {
		if n > 40 && n != 257 {
			continue
		}
		s, tb := make([]float32, n), make([]float32, n+1)
		for i := range tb {
			tb[i] = float32(rng.NormFloat64())
			if i < n {
				s[i] = float32(rng.NormFloat64())
			}
			switch rng.IntN(12) {
			case 0:
				tb[i] = float32(math.NaN())
			case 1:
				tb[i] = float32(math.Inf(1))
			case 2:
				tb[i] = float32(math.Copysign(0, -1))
			}
		}
		tb[n] = float32(math.NaN())
		want := append([]float32(nil), s...)
		mulGeneric(want, tb)
		Mul32(s, tb)
		if !sameBitsOrNaN(s, want) {
			t.Fatalf("n = %d: %v, want %v", n, s, want)
		}
	}
}
