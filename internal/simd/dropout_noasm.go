//go:build !amd64 || noasm

package simd

func dropScale32(x []float32, words []uint32, threshold uint32, scale float32) {
	dropScale32Generic(x, words, threshold, scale)
}
