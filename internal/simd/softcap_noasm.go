//go:build !amd64 || noasm

package simd

func widenScale32(dst []float64, src []float32, a float64) { widenScaleGeneric(dst, src, a) }

func tanhScaleFromExp32(dst, grad []float32, e []float64, c float64) {
	tanhScaleFromExpGeneric(dst, grad, e, c)
}
