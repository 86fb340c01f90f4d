package simd

// GemmNT32 computes C += A·Bᵀ for row-major A (m×k, row stride lda), B
// (n×k, row stride ldb) and C (m×n, row stride ldc):
//
//	for i < m, j < n: C[i*ldc+j] += Σ_{p<k} A[i*lda+p] · B[j*ldb+p]
//
// It is the score product S = Q·Kᵀ of a decode step, m a few query rows
// and B the cached keys where they lie: GemmNN32 on Kᵀ would need K
// transposed, and on the transposed product Sᵀ = K·Qᵀ it vectorises along
// the few rows (4 of 16 lanes for a group of 4). The AVX-512 path
// vectorises along n instead, transposing 16×16 tiles of B in registers.
//
// The sum is GemmNN32's, term for term: Σ_p in ascending p from zero, C
// added once at the end, fused multiply-adds in the assembly and separate
// ones in the portable loop, so on AVX-512 GemmNT32 gives the bits of
// GemmNN32 on the transposed B (the tests require it). The attention
// backward recomputes scores with GemmNN32 against the forward's LSE; the
// same bits keep exp(S − LSE) consistent.
//
// Only AVX-512 has a vector path (GemmNTFast reports it); elsewhere the
// portable loop runs, slower than GemmNN32 on a transposed B.
//
// GemmNT32 panics if a dimension is negative, if lda < k, ldb < k or
// ldc < n (where that matrix has more than one row), or if a slice is too
// short for its matrix.
func GemmNT32(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if checkGemmNT(m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		gemmNT32(m, n, k, a, lda, b, ldb, c, ldc)
	}
}

// checkGemmNT is checkGemm for B stored n×k.
func checkGemmNT(m, n, k, la, lda, lb, ldb, lc, ldc int) bool {
	return checkProduct(m, n, k, la, lda, lb, ldb, n, k, lc, ldc)
}

// gemmNTGeneric is the portable loop the assembly must match, in
// gemmNNGeneric's order.
func gemmNTGeneric(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	for i := range m {
		ai := a[i*lda : i*lda+k]
		for j := range n {
			var sum float32
			for p, x := range b[j*ldb : j*ldb+k] {
				sum += ai[p] * x
			}
			c[i*ldc+j] += sum
		}
	}
}
