package simd

// GemmNN32 computes C += A·B for row-major A (m×k, row stride lda), B (k×n,
// row stride ldb) and C (m×n, row stride ldc):
//
//	for i < m, j < n: C[i*ldc+j] += Σ_{p<k} A[i*lda+p] · B[p*ldb+j]
//
// The order of the sum over p is fixed, so results are deterministic.
func GemmNN32(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	gemmNNGeneric(m, n, k, a, lda, b, ldb, c, ldc)
}

// GemmNN64 is GemmNN32 for float64.
func GemmNN64(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	gemmNNGeneric(m, n, k, a, lda, b, ldb, c, ldc)
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
