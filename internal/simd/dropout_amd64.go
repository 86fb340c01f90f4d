//go:build !noasm

package simd

// dropScale32AVX512 computes the loop of dropScale32Generic 16 lanes at a
// time, the comparison into an opmask and the product zero-masked by it,
// for len(words) ≥ len(x) > 0.
//
//go:noescape
func dropScale32AVX512(x []float32, words []uint32, threshold uint32, scale float32)

// dropScale32AVX2 is dropScale32AVX512 with 8 lanes.
//
//go:noescape
func dropScale32AVX2(x []float32, words []uint32, threshold uint32, scale float32)

func dropScale32(x []float32, words []uint32, threshold uint32, scale float32) {
	switch {
	case hasAVX512:
		dropScale32AVX512(x, words, threshold, scale)
	case hasAVX2:
		dropScale32AVX2(x, words, threshold, scale)
	default:
		dropScale32Generic(x, words, threshold, scale)
	}
}
