//go:build !noasm

package simd

// gemmNT32AVX512 computes gemmNTGeneric's loop, fused, for m, n, k > 0
// (bounds checked by checkGemmNT), strides in elements: 4 rows of A (the
// last repeated in a short chunk) against tiles of 16 rows × 16 columns of
// B transposed in registers (gemmnt_amd64.s).
//
//go:noescape
func gemmNT32AVX512(m, n, k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)

func gemmNT32(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if hasAVX512 {
		gemmNT32AVX512(m, n, k, &a[0], lda, &b[0], ldb, &c[0], ldc)
		return
	}
	gemmNTGeneric(m, n, k, a, lda, b, ldb, c, ldc)
}

// GemmNTFast reports whether GemmNT32 has a vector path: AVX-512 only, where
// a 16×16 tile fits in half the 32 vector registers.
func GemmNTFast() bool { return hasAVX512 }
