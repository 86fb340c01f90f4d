package simd

import "math"

// DropScale32 applies attention dropout's mask to probabilities: x[i]
// becomes x[i]·scale where words[i] ≥ threshold (kept) and exactly +0
// elsewhere (not x[i]·0, which NaN and ±Inf would survive). words are the
// entries' random draws (kernels.Dropout.RowWords: 16 bits each, from
// Philox); len(words) ≥ len(x).
// The mask is random, so no path branches on it.
func DropScale32(x []float32, words []uint32, threshold uint32, scale float32) {
	words = words[:len(x)]
	if len(x) > 0 {
		dropScale32(x, words, threshold, scale)
	}
}

// DropScale64 is DropScale32 for float64.
func DropScale64(x []float64, words []uint32, threshold uint32, scale float64) {
	words = words[:len(x)]
	for i, w := range words {
		x[i] = math.Float64frombits(math.Float64bits(x[i]*scale) & -uint64(keptBit(w, threshold)))
	}
}

// dropScale32Generic is the portable loop of DropScale32.
func dropScale32Generic(x []float32, words []uint32, threshold uint32, scale float32) {
	words = words[:len(x)]
	for i, w := range words {
		x[i] = math.Float32frombits(math.Float32bits(x[i]*scale) & -keptBit(w, threshold))
	}
}

// keptBit is 1 when w ≥ threshold and 0 otherwise, computed without a
// branch (a compare and set).
func keptBit(w, threshold uint32) uint32 {
	var b uint32
	if w >= threshold {
		b = 1
	}
	return b
}
