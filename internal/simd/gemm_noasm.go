//go:build !amd64 || noasm

package simd

func gemm32(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	gemmNNGeneric(m, n, k, a, lda, b, ldb, c, ldc)
}

func gemm64(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	gemmNNGeneric(m, n, k, a, lda, b, ldb, c, ldc)
}

func gemmStore32(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	clearWindow(m, n, c, ldc)
	gemmNNGeneric(m, n, k, a, lda, b, ldb, c, ldc)
}

func gemmStore64(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	clearWindow(m, n, c, ldc)
	gemmNNGeneric(m, n, k, a, lda, b, ldb, c, ldc)
}
