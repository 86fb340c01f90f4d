//go:build !noasm

package simd

// Microkernel tile heights (rows of C per kernel call). The widths are two
// vector registers: 16 float32 or 8 float64 for AVX2, 32 or 16 for AVX-512.
const (
	mrAVX2   = 6
	mrAVX512 = 8
)

// gemmKernel32AVX2 updates mr ≤ 6 rows of C, all n columns:
//
//	for i < mr, j < n: c[i*ldc+j] += Σ_{p<k} a[i*lda+p] · b[p*ldb+j]
//
// with p ascending, one fused multiply-add per term into a zeroed
// accumulator, and C added once at the end. Strides are in elements.
//
//go:noescape
func gemmKernel32AVX2(mr, n, k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)

// gemmKernel64AVX2 is gemmKernel32AVX2 for float64.
//
//go:noescape
func gemmKernel64AVX2(mr, n, k int, a *float64, lda int, b *float64, ldb int, c *float64, ldc int)

// gemmKernel32AVX512 computes the same loop as gemmKernel32AVX2 for
// mr ≤ 8 rows.
//
//go:noescape
func gemmKernel32AVX512(mr, n, k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)

// gemmKernel64AVX512 is gemmKernel32AVX512 for float64.
//
//go:noescape
func gemmKernel64AVX512(mr, n, k int, a *float64, lda int, b *float64, ldb int, c *float64, ldc int)

func gemm32(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	switch {
	case hasAVX512:
		gemm32AVX512(m, n, k, a, lda, b, ldb, c, ldc)
	case hasAVX2:
		gemm32AVX2(m, n, k, a, lda, b, ldb, c, ldc)
	default:
		gemmNNGeneric(m, n, k, a, lda, b, ldb, c, ldc)
	}
}

func gemm64(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	switch {
	case hasAVX512:
		gemm64AVX512(m, n, k, a, lda, b, ldb, c, ldc)
	case hasAVX2:
		gemm64AVX2(m, n, k, a, lda, b, ldb, c, ldc)
	default:
		gemmNNGeneric(m, n, k, a, lda, b, ldb, c, ldc)
	}
}

// The drivers below cut C into row panels of the kernel's height; the
// kernel itself walks the columns, masking the last partial block. They
// expect checkGemm to have passed and m, n, k > 0.

func gemm32AVX2(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	for i := 0; i < m; i += mrAVX2 {
		gemmKernel32AVX2(min(mrAVX2, m-i), n, k, &a[i*lda], lda, &b[0], ldb, &c[i*ldc], ldc)
	}
}

func gemm64AVX2(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	for i := 0; i < m; i += mrAVX2 {
		gemmKernel64AVX2(min(mrAVX2, m-i), n, k, &a[i*lda], lda, &b[0], ldb, &c[i*ldc], ldc)
	}
}

func gemm32AVX512(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	for i := 0; i < m; i += mrAVX512 {
		gemmKernel32AVX512(min(mrAVX512, m-i), n, k, &a[i*lda], lda, &b[0], ldb, &c[i*ldc], ldc)
	}
}

func gemm64AVX512(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	for i := 0; i < m; i += mrAVX512 {
		gemmKernel64AVX512(min(mrAVX512, m-i), n, k, &a[i*lda], lda, &b[0], ldb, &c[i*ldc], ldc)
	}
}
