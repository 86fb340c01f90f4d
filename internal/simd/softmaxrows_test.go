package simd

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSoftmaxRows32 requires SoftmaxRows32 to give the bits of its
// definition, Max32 and ExpShift32 row by row, on tiles of every row
// length up to past two vectors' worth (the loops' pair, single and
// masked tail), with the padding between rows left alone, and rows whose
// shift is infinite (all −Inf, or +Inf in the row or in mOld) untouched.
// The scores include NaN, ±Inf and zeros of both signs against an mOld of
// either zero.
func TestSoftmaxRows32(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	specials := []float32{float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)), 0, float32(math.Copysign(0, -1)), -100}
	olds := []float32{float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)), 3, float32(math.Inf(1))}
	for _, cols := range append(lengths(70), 128, 129, 256, 300) {
		for _, rows := range []int{1, 3, 9} {
			ld := cols + 5
			s := make([]float32, rows*ld)
			for i := range s {
				s[i] = float32(4 * rng.NormFloat64())
				if rng.IntN(16) == 0 {
					s[i] = specials[rng.IntN(len(specials))]
				}
			}
			// Row 0 all −Inf: an infinite shift unless mOld is finite.
			for c := range cols {
				s[c] = float32(math.Inf(-1))
			}
			mOld := make([]float32, rows)
			for r := range mOld {
				mOld[r] = olds[rng.IntN(len(olds))]
			}
			want, got := slices.Clone(s), slices.Clone(s)
			wantNew, gotNew := make([]float32, rows), make([]float32, rows)
			wantSum, gotSum := make([]float32, rows), make([]float32, rows)
			softmaxRowsGeneric(rows, cols, want, ld, mOld, wantNew, wantSum, Max32, ExpShift32)
			SoftmaxRows32(rows, cols, got, ld, mOld, gotNew, gotSum)
			same := func(a, b []float32) bool {
				return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
			}
			if !same(want, got) || !same(wantNew, gotNew) || !same(wantSum, gotSum) {
				t.Fatalf("rows=%d cols=%d: tile, shifts or sums differ from the calls row by row\nshifts %v / %v\nsums %v / %v", rows, cols, wantNew, gotNew, wantSum, gotSum)
			}
		}
	}
}

// TestSoftmaxRowsZeroShift checks the shift's rounding against Go's max:
// +0 from a pair of zeros of opposite signs, in either order.
func TestSoftmaxRowsZeroShift(t *testing.T) {
	neg := float32(math.Copysign(0, -1))
	for _, c := range [][2]float32{{0, neg}, {neg, 0}, {neg, neg}} {
		s := []float32{c[1], float32(math.Inf(-1))}
		mNew, sum := make([]float32, 1), make([]float32, 1)
		SoftmaxRows32(1, 2, s, 2, []float32{c[0]}, mNew, sum)
		if want := max(c[0], c[1]); math.Float32bits(mNew[0]) != math.Float32bits(want) {
			t.Errorf("mOld %v, row max %v: shift %v, want %v", c[0], c[1], mNew[0], want)
		}
	}
}

// lengths returns 1, 2, …, n.
func lengths(n int) []int {
	l := make([]int, n)
	for i := range l {
		l[i] = i + 1
	}
	return l
}
