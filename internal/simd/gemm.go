package simd

import "fmt"

// GemmNN32 computes C += A·B for row-major A (m×k, row stride lda), B (k×n,
// row stride ldb) and C (m×n, row stride ldc):
//
//	for i < m, j < n: C[i*ldc+j] += Σ_{p<k} A[i*lda+p] · B[p*ldb+j]
//
// The order of the sum over p is fixed, so results are deterministic. They
// may differ from the portable loop in the last bits, since the assembly
// fuses multiply and add and adds C after the sum (see the package doc).
// Elements of C outside the m×n window are never read or written.
//
// GemmNN32 panics if a dimension is negative, if lda < k, ldb < n or ldc < n
// (for a non-empty product with more than one row in that matrix), or if a
// slice is too short for its matrix.
func GemmNN32(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if checkGemm(m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		gemm32(m, n, k, a, lda, b, ldb, c, ldc)
	}
}

// GemmNN64 is GemmNN32 for float64.
func GemmNN64(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	if checkGemm(m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		gemm64(m, n, k, a, lda, b, ldb, c, ldc)
	}
}

// checkGemm panics on misuse and reports whether there is any work to do.
// The assembly kernels trust these bounds: they index with raw pointers.
func checkGemm(m, n, k, la, lda, lb, ldb, lc, ldc int) bool {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("simd: negative dimension m=%d n=%d k=%d", m, n, k))
	}
	if m == 0 || n == 0 || k == 0 {
		return false
	}
	// A stride matters only when there is a second row to step to.
	switch {
	case m > 1 && lda < k:
		panic(fmt.Sprintf("simd: lda=%d < k=%d", lda, k))
	case k > 1 && ldb < n:
		panic(fmt.Sprintf("simd: ldb=%d < n=%d", ldb, n))
	case m > 1 && ldc < n:
		panic(fmt.Sprintf("simd: ldc=%d < n=%d", ldc, n))
	case la < (m-1)*lda+k:
		panic(fmt.Sprintf("simd: len(a)=%d too short for %d×%d with lda=%d", la, m, k, lda))
	case lb < (k-1)*ldb+n:
		panic(fmt.Sprintf("simd: len(b)=%d too short for %d×%d with ldb=%d", lb, k, n, ldb))
	case lc < (m-1)*ldc+n:
		panic(fmt.Sprintf("simd: len(c)=%d too short for %d×%d with ldc=%d", lc, m, n, ldc))
	}
	return true
}

// gemmNNGeneric is the portable reference loop the assembly must match.
func gemmNNGeneric[T float32 | float64](m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int) {
	for i := range m {
		ci := c[i*ldc : i*ldc+n]
		for p := range k {
			aip := a[i*lda+p]
			bp := b[p*ldb : p*ldb+n]
			for j, bpj := range bp {
				ci[j] += aip * bpj
			}
		}
	}
}
