package conformance

import (
	"fmt"
	"math"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// maxAbs is the largest finite magnitude in x.
func maxAbs[T kernels.Float](x []T) float64 {
	var m float64
	for _, xi := range x {
		if a := math.Abs(float64(xi)); !math.IsInf(a, 0) {
			m = max(m, a)
		}
	}
	return m
}

// maxAbsErr is max|got − want| with its index. An infinite want (the LSE of
// a row that sees no key) must be matched exactly, and a NaN anywhere is an
// infinite error.
func maxAbsErr[T kernels.Float](got []T, want []float64) (float64, int) {
	worst, at := 0.0, 0
	for i, w := range want {
		g := float64(got[i])
		var e float64
		switch {
		case math.IsNaN(g) || math.IsNaN(w):
			e = math.Inf(1)
		case math.IsInf(w, 0) || math.IsInf(g, 0):
			if g != w {
				e = math.Inf(1)
			}
		default:
			e = math.Abs(g - w)
		}
		if e > worst || (math.IsInf(e, 1) && !math.IsInf(worst, 1)) {
			worst, at = e, i
		}
	}
	return worst, at
}

// tensorCheck is one output tensor to compare against the float64 reference.
type tensorCheck[T kernels.Float] struct {
	name    string
	got     []T
	want    []float64
	natural float64 // magnitude of the largest term in its formula
}

// checks lists the five outputs of a forward+backward pass, with the
// natural magnitude of each derived from the inputs.
func checks[T kernels.Float](p kernels.Params, got result[T], want result[float64], q, k, v, do []float64) []tensorCheck[T] {
	dP := maxAbs(do) * maxAbs(v)
	return []tensorCheck[T]{
		{"O", got.o, want.o, maxAbs(v)},
		{"LSE", got.lse, want.lse, maxAbs(want.lse)},
		{"dQ", got.dq, want.dq, math.Abs(p.Scale) * dP * maxAbs(k)},
		{"dK", got.dk, want.dk, math.Abs(p.Scale) * dP * maxAbs(q)},
		{"dV", got.dv, want.dv, maxAbs(do)},
	}
}

// describe reports where an error occurred as a [b,h,row,col] index.
func describe(name string, p kernels.Params, i int) string {
	var rows, cols int
	switch name {
	case "LSE":
		rows, cols = p.Nq, 1
	case "dK", "dV":
		rows, cols = p.Nk, p.D
	default:
		rows, cols = p.Nq, p.D
	}
	c := i % cols
	i /= cols
	r := i % rows
	i /= rows
	return fmt.Sprintf("%s[b=%d,h=%d,row=%d,col=%d]", name, i/p.H, i%p.H, r, c)
}
