package simd

import "fmt"

// GemmNN32 computes C += A·B for row-major A (m×k, row stride lda), B (k×n,
// row stride ldb) and C (m×n, row stride ldc):
//
//	for i < m, j < n: C[i*ldc+j] += Σ_{p<k} A[i*lda+p] · B[p*ldb+j]
//
// The order of the sum over p is fixed, so results are deterministic. Every
// path sums the products first and adds C after the sum; the assembly's
// fused multiply-adds make it differ from the portable loop in the last
// bits (see the package doc).
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

// GemmNNStore32 sets C = A·B: each element of the m×n window of C becomes
// exactly what GemmNN32 leaves there when the window starts at zero, and
// C is never read, so the caller need not clear it. The attention kernels'
// score tiles start this way; on AVX-512 it saves the pass that cleared
// them and the GEMM's reads of the zeros. It panics as GemmNN32 does.
func GemmNNStore32(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if checkGemm(m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		gemmStore32(m, n, k, a, lda, b, ldb, c, ldc)
	}
}

// GemmNNStore64 is GemmNNStore32 for float64.
func GemmNNStore64(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	if checkGemm(m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		gemmStore64(m, n, k, a, lda, b, ldb, c, ldc)
	}
}

// clearWindow zeroes the m×n window of c (row stride ldc): GemmNNStore's
// path where no kernel stores without reading C.
func clearWindow[T float32 | float64](m, n int, c []T, ldc int) {
	for i := range m {
		clear(c[i*ldc : i*ldc+n])
	}
}

// GemmNN64 is GemmNN32 for float64.
func GemmNN64(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	if checkGemm(m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		gemm64(m, n, k, a, lda, b, ldb, c, ldc)
	}
}

// checkGemm panics on misuse of GemmNN and reports whether there is any
// work to do. The assembly kernels trust these bounds: they index with raw
// pointers.
func checkGemm(m, n, k, la, lda, lb, ldb, lc, ldc int) bool {
	return checkProduct(m, n, k, la, lda, lb, ldb, k, n, lc, ldc)
}

// checkProduct is the argument check of C += A·B for either layout of B:
// B is bRows×bCols with row stride ldb (k×n for GemmNN, n×k for GemmNT).
func checkProduct(m, n, k, la, lda, lb, ldb, bRows, bCols, lc, ldc int) bool {
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
	case bRows > 1 && ldb < bCols:
		panic(fmt.Sprintf("simd: ldb=%d < %d, B's row length", ldb, bCols))
	case m > 1 && ldc < n:
		panic(fmt.Sprintf("simd: ldc=%d < n=%d", ldc, n))
	case la < (m-1)*lda+k:
		panic(fmt.Sprintf("simd: len(a)=%d too short for %d×%d with lda=%d", la, m, k, lda))
	case lb < (bRows-1)*ldb+bCols:
		panic(fmt.Sprintf("simd: len(b)=%d too short for %d×%d with ldb=%d", lb, bRows, bCols, ldb))
	case lc < (m-1)*ldc+n:
		panic(fmt.Sprintf("simd: len(c)=%d too short for %d×%d with ldc=%d", lc, m, n, ldc))
	}
	return true
}

// gemmNNGeneric is the portable reference loop the assembly must match.
// Like the assembly, it sums the k products from zero and adds that sum to
// C once at the end, rather than adding each product into C as it goes.
// Callers rely on that order: the attention kernels preload a bias into C
// so that C + A·B is the bias added to finished scores, rounded as adding
// it after the GEMM would be; adding the products into the bias one by one
// rounds each partial sum at the bias's magnitude instead. Only the fused
// multiply-add still makes the assembly differ in the last bits. The sums
// of one row run across a chunk of columns at a time, so the inner loop
// still reads B and the accumulators contiguously.
func gemmNNGeneric[T float32 | float64](m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int) {
	const chunk = 64
	var acc [chunk]T
	for i := range m {
		ai := a[i*lda : i*lda+k]
		for j0 := 0; j0 < n; j0 += chunk {
			width := min(chunk, n-j0)
			sum := acc[:width]
			clear(sum)
			for p, aip := range ai {
				bp := b[p*ldb+j0 : p*ldb+j0+width]
				for j, bpj := range bp {
					sum[j] += aip * bpj
				}
			}
			ci := c[i*ldc+j0 : i*ldc+j0+width]
			for j, s := range sum {
				ci[j] += s
			}
		}
	}
}
