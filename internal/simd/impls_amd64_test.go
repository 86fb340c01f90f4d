//go:build !noasm

package simd

// The implementations this CPU can run, generic first. On an AVX-512
// machine the same test binary also exercises the AVX-512 paths.

func gemm32Impls() []gemmImpl[float32] {
	impls := []gemmImpl[float32]{{"generic", gemmNNGeneric[float32]}}
	if hasAVX2 {
		impls = append(impls, gemmImpl[float32]{"avx2", gemm32AVX2})
	}
	if hasAVX512 {
		impls = append(impls, gemmImpl[float32]{"avx512", gemm32AVX512})
	}
	return impls
}

func gemm64Impls() []gemmImpl[float64] {
	impls := []gemmImpl[float64]{{"generic", gemmNNGeneric[float64]}}
	if hasAVX2 {
		impls = append(impls, gemmImpl[float64]{"avx2", gemm64AVX2})
	}
	if hasAVX512 {
		impls = append(impls, gemmImpl[float64]{"avx512", gemm64AVX512})
	}
	return impls
}

// gemmStore32Impls pairs each path that sets C (GemmNNStore32) with the
// path that adds into it whose bits it must give on a cleared C; the
// exported pair runs whatever this CPU dispatches to.
func gemmStore32Impls() []gemmStoreImpl[float32] {
	impls := []gemmStoreImpl[float32]{{"dispatch", gemmStore32, gemm32}}
	if hasAVX512 {
		// Every row count, the few rows that the dispatch sends to the
		// wide kernel included.
		impls = append(impls, gemmStoreImpl[float32]{"avx512", func(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
			gemmDrive(gemmKernel32AVX512Store, mrAVX512, 32, m, n, k, a, lda, b, ldb, c, ldc)
		}, func(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
			gemmDrive(gemmKernel32AVX512, mrAVX512, 32, m, n, k, a, lda, b, ldb, c, ldc)
		}})
	}
	return impls
}

func gemmStore64Impls() []gemmStoreImpl[float64] {
	return []gemmStoreImpl[float64]{{"dispatch", gemmStore64, gemm64}}
}

func exp32Impls() []expImpl[float32] {
	impls := []expImpl[float32]{{"generic", expShiftGeneric[float32]}}
	if hasAVX2 {
		impls = append(impls, expImpl[float32]{"avx2", expShift32AVX2})
	}
	if hasAVX512 {
		impls = append(impls, expImpl[float32]{"avx512", expShift32AVX512})
	}
	return impls
}

func exp64Impls() []expImpl[float64] {
	impls := []expImpl[float64]{{"generic", expShiftGeneric[float64]}}
	if hasAVX2 {
		impls = append(impls, expImpl[float64]{"avx2", expShift64AVX2})
	}
	if hasAVX512 {
		impls = append(impls, expImpl[float64]{"avx512", expShift64AVX512})
	}
	return impls
}

// expFlushes reports whether an implementation flushes results below the
// normal range to zero (the assembly does, see exp_amd64.go).
func expFlushes(name string) bool { return name != "generic" }

func vec32Impls() []vecImpl[float32] {
	impls := []vecImpl[float32]{{"generic", maxGeneric[float32], scaleGeneric[float32], addGeneric[float32], subGeneric[float32], mulGeneric[float32]}}
	if hasAVX2 {
		impls = append(impls, vecImpl[float32]{"avx2", max32AVX2, scale32AVX2, add32AVX2, sub32AVX2, mul32AVX2})
	}
	if hasAVX512 {
		impls = append(impls, vecImpl[float32]{"avx512", max32AVX512, scale32AVX512, add32AVX512, sub32AVX512, mul32AVX512})
	}
	return impls
}

func vec64Impls() []vecImpl[float64] {
	impls := []vecImpl[float64]{{"generic", maxGeneric[float64], scaleGeneric[float64], addGeneric[float64], subGeneric[float64], nil}}
	if hasAVX2 {
		impls = append(impls, vecImpl[float64]{"avx2", max64AVX2, scale64AVX2, add64AVX2, sub64AVX2, nil})
	}
	if hasAVX512 {
		impls = append(impls, vecImpl[float64]{"avx512", max64AVX512, scale64AVX512, add64AVX512, sub64AVX512, nil})
	}
	return impls
}

// gemmNT32Impls pairs each GemmNT32 path with the GemmNN32 path whose bits
// it must give.
func gemmNT32Impls() []gemmNTImpl {
	impls := []gemmNTImpl{{"generic", gemmNTGeneric, gemmNNGeneric[float32]}}
	if hasAVX512 {
		impls = append(impls, gemmNTImpl{"avx512", func(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
			gemmNT32AVX512(m, n, k, &a[0], lda, &b[0], ldb, &c[0], ldc)
		}, gemm32AVX512})
	}
	return impls
}
