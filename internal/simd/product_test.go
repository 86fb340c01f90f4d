package simd

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestScaledProduct32 checks ScaledProduct32, with and without g, against
// the portable loop bit for bit on every length up to 40 and a long row,
// NaN, ±Inf and −0 among the factors, with a and g one element longer
// than dst (never read past it). A NaN only has to be a NaN: which of two
// NaN operands' payloads a product keeps depends on the operand order the
// compiler picks (a race-detector build swaps some).
func TestScaledProduct32(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	pick := func() float32 {
		switch rng.IntN(12) {
		case 0:
			return float32(math.NaN())
		case 1:
			return float32(math.Inf(1 - 2*rng.IntN(2)))
		case 2:
			return float32(math.Copysign(0, -1))
		}
		return float32(rng.NormFloat64() * 3)
	}
	for n := range 258 {
		if n > 40 && n != 257 {
			continue
		}
		for _, withG := range []bool{false, true} {
			dst, a, g := make([]float32, n), make([]float32, n+1), make([]float32, n+1)
			for i := range dst {
				dst[i] = pick()
			}
			for i := range a {
				a[i], g[i] = pick(), pick()
			}
			if !withG {
				g = nil
			}
			want := append([]float32(nil), dst...)
			if g != nil {
				scaledProductGeneric(want, a[:n], g[:n], 0.125)
			} else {
				scaledProductGeneric(want, a[:n], nil, 0.125)
			}
			ScaledProduct32(dst, a, g, 0.125)
			if !sameBitsOrNaN(dst, want) {
				t.Fatalf("n = %d, g = %v: %v, want %v", n, withG, dst, want)
			}
		}
	}
}

// sameBitsOrNaN is sameBits with any NaN matching any NaN.
func sameBitsOrNaN(x, y []float32) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != x[i] && y[i] != y[i] {
			continue
		}
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
			return false
		}
	}
	return true
}
