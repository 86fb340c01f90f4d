package cpukernels

import (
	"math"
	"testing"
)

// TestAllFinite checks allFinite's bit test against its definition, a
// value minus itself being 0, with every kind of special value at every
// position of slices of odd and even lengths (float32's odd tail is a
// separate path), in both precisions.
func TestAllFinite(t *testing.T) {
	specials := []float64{math.Inf(1), math.Inf(-1), math.NaN(), math.MaxFloat32, -math.MaxFloat32, math.MaxFloat64,
		-math.MaxFloat64, 0, math.Copysign(0, -1), 1e-45, 5e-324, math.SmallestNonzeroFloat32, 1}
	testAllFinite[float32](t, specials)
	testAllFinite[float64](t, specials)
}

func testAllFinite[T float32 | float64](t *testing.T, specials []float64) {
	for n := range 20 {
		for j := range n {
			for _, v := range specials {
				x := make([]T, n)
				for i := range x {
					x[i] = T(i) * 3
				}
				x[j] = T(v)
				want := true
				for _, xi := range x {
					want = want && xi-xi == 0
				}
				if got := allFinite(x); got != want {
					t.Fatalf("%T, n = %d, x[%d] = %v: allFinite %v, want %v", x, n, j, x[j], got, want)
				}
			}
		}
	}
	if !allFinite([]T{}) {
		t.Fatal("allFinite of no elements: false")
	}
}
