//go:build !amd64 || noasm

package simd

func gemmNT32(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	gemmNTGeneric(m, n, k, a, lda, b, ldb, c, ldc)
}

// GemmNTFast reports whether GemmNT32 has a vector path: never here.
func GemmNTFast() bool { return false }
