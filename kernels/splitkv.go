package kernels

import "math"

// Split-KV (Flash-Decoding): when a problem has few query rows per key
// head, as a decode step has, parallelising over query blocks leaves most
// cores (or multiprocessors) idle: B·Hkv units, each reading a long cache.
// Splitting each key head's keys into n contiguous ranges gives B·Hkv·n
// units; each computes a partial output and log-sum-exp over its keys, and
// MergePartials combines them exactly.

// MaxSplits bounds the key splits SplitKV returns.
const MaxSplits = 64

// MinSplitKeys is the fewest keys SplitKV gives a split, so that reading
// them outweighs a unit's fixed cost and the merge.
const MinSplitKeys = 256

// SplitKV returns the number of key splits for p's decode on a device of
// cores cores (CPU threads or multiprocessors): 1 when the B·Hkv key heads
// already give every core a unit, else enough splits per key head to give
// every core one, each of at least MinSplitKeys of the longest sequence's
// keys (KLens, or Nk), at most MaxSplits. It is a pure function of the
// problem and cores, never of timing, so a result never depends on how a
// run was scheduled.
func SplitKV(p Params, cores int) int {
	units := p.B * p.KVHeads()
	if cores <= units {
		return 1
	}
	keys := p.Nk
	if p.KLens != nil {
		keys = 0
		for _, n := range p.KLens {
			keys = max(keys, n)
		}
	}
	n := (cores + units - 1) / units
	return max(1, min(n, keys/MinSplitKeys, MaxSplits))
}

// SplitRange returns split s of n of the keys [lo, hi): contiguous ranges
// of equal length but the last, in order, covering [lo, hi) together. A
// split may be empty when hi − lo < n.
func SplitRange(lo, hi, s, n int) (from, to int) {
	per := (hi - lo + n - 1) / n
	from = min(hi, lo+s*per)
	return from, min(hi, from+per)
}

// MergePartials merges the partial results of one query row over the key
// splits s = 0, 1, …: lse[s] is split s's log-sum-exp, o[s·D:(s+1)·D] its
// output (normalised over its own keys) and seen[s] whether the row saw
// any key of the split; a split it did not see is empty and contributes
// nothing, whatever lse[s] and o hold there. It writes the row's output,
// D = len(out) elements, and returns its log-sum-exp, both computed in
// float64:
//
//	LSE = log Σ_s exp(lse[s]),  out = Σ_s exp(lse[s] − LSE)·o_s.
//
// o is its work space: the partial outputs are overwritten, so that a
// merge allocates nothing. With no split seen the row saw no key: out is 0
// and the LSE +Inf, as for an unsplit row. Non-finite partials give what
// the unsplit row gives: a NaN LSE makes everything NaN, and an infinite
// maximum (a +Inf score, or every score −Inf) gives that LSE and a NaN
// output.
func MergePartials[T Float](lse, o []float64, seen []bool, out []T) float64 {
	d := len(out)
	m, some := math.Inf(-1), false
	for s, ok := range seen {
		if ok {
			// The built-in max returns NaN when either operand is NaN.
			m, some = max(m, lse[s]), true
		}
	}
	if !some {
		clear(out)
		return math.Inf(1)
	}
	if math.IsInf(m, 0) || math.IsNaN(m) {
		for i := range out {
			out[i] = T(math.NaN())
		}
		return m
	}
	var l float64
	for s, ok := range seen {
		if ok {
			l += math.Exp(lse[s] - m)
		}
	}
	total := m + math.Log(l)
	// The sum runs in split order into the first split that weighs
	// anything (the one holding the maximum does, so there is one).
	var acc []float64
	for s, ok := range seen {
		if !ok {
			continue
		}
		// A split whose keys all scored −Inf weighs exactly 0: its
		// output, 0/0, must not reach the row.
		w := math.Exp(lse[s] - total)
		if w == 0 {
			continue
		}
		part := o[s*d : (s+1)*d]
		if acc == nil {
			acc = part
			for i := range acc {
				acc[i] *= w
			}
			continue
		}
		for i, x := range part {
			acc[i] += w * x
		}
	}
	for i, x := range acc {
		out[i] = T(x)
	}
	return total
}
