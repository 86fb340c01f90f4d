//go:build !amd64 || noasm

package simd

func gemm32Impls() []gemmImpl[float32] {
	return []gemmImpl[float32]{{"generic", gemmNNGeneric[float32]}}
}

func gemm64Impls() []gemmImpl[float64] {
	return []gemmImpl[float64]{{"generic", gemmNNGeneric[float64]}}
}

func gemmStore32Impls() []gemmStoreImpl[float32] {
	return []gemmStoreImpl[float32]{{"dispatch", gemmStore32, gemm32}}
}

func gemmStore64Impls() []gemmStoreImpl[float64] {
	return []gemmStoreImpl[float64]{{"dispatch", gemmStore64, gemm64}}
}

func exp32Impls() []expImpl[float32] {
	return []expImpl[float32]{{"generic", expShiftGeneric[float32]}}
}

func exp64Impls() []expImpl[float64] {
	return []expImpl[float64]{{"generic", expShiftGeneric[float64]}}
}

func expFlushes(string) bool { return false }

func vec32Impls() []vecImpl[float32] {
	return []vecImpl[float32]{{"generic", maxGeneric[float32], scaleGeneric[float32], addGeneric[float32], subGeneric[float32], mulGeneric[float32]}}
}

func vec64Impls() []vecImpl[float64] {
	return []vecImpl[float64]{{"generic", maxGeneric[float64], scaleGeneric[float64], addGeneric[float64], subGeneric[float64], nil}}
}

func gemmNT32Impls() []gemmNTImpl {
	return []gemmNTImpl{{"generic", gemmNTGeneric, gemmNNGeneric[float32]}}
}
