package cpukernels

import (
	"math"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// clampRange returns the part of [lo, hi) inside [base, base+n), relative
// to base: the visible columns (or rows) of one tile.
func clampRange(lo, hi, base, n int) (from, to int) {
	from = min(n, max(0, lo-base))
	to = max(from, min(n, hi-base))
	return from, to
}

// softcapScores replaces each s[i] by c·tanh(s[i]/c) and, when grad is not
// nil, stores 1 − tanh² (the derivative) in grad[i]. tanh is computed as
// sign(s)·(1 − e)/(1 + e) with e = exp(−2|s|/c) ≤ 1 through the vectorised
// exponential, so that its argument never overflows: ±Inf scores become
// ±c, as tanh(±∞) = ±1, and NaN stays NaN. tmp is scratch of len(s).
func softcapScores[T kernels.Float](ops mathOps[T], s []T, c T, tmp, grad []T) {
	tmp = tmp[:len(s)]
	for i, x := range s {
		tmp[i] = -2 * T(math.Abs(float64(x))) / c
	}
	ops.expShift(tmp, 0)
	for i, e := range tmp {
		t := (1 - e) / (1 + e)
		if s[i] < 0 {
			t = -t
		}
		if grad != nil {
			grad[i] = 1 - t*t
		}
		s[i] = c * t
	}
}

// alibiRow subtracts slope·|a − j| from the scores s of keys j = j0, j0+1, …
// of one row whose aligned position is a.
func alibiRow[T kernels.Float](s []T, slope T, a, j0 int) {
	for x := range s {
		d := a - j0 - x
		if d < 0 {
			d = -d
		}
		s[x] -= slope * T(d)
	}
}
