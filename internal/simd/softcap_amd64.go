//go:build !noasm

package simd

// widenScale32AVX512 computes, 16 elements at a time with a masked tail,
//
//	for i := range dst { dst[i] = float64(src[i]) * a }
//
// for len(src) ≥ len(dst) > 0.
//
//go:noescape
func widenScale32AVX512(dst []float64, src []float32, a float64)

// tanhScaleFromExp32AVX512 computes, 16 elements at a time with a masked
// tail, the loop of tanhScaleFromExpGeneric for len(e) ≥ len(dst) > 0 and
// grad either empty or as long as dst.
//
//go:noescape
func tanhScaleFromExp32AVX512(dst, grad []float32, e []float64, c float64)

// Only AVX-512 has a vector path: its conversions between 8 float64 and 8
// float32 lanes take one instruction each way, and the softcap is measured
// on it.
func widenScale32(dst []float64, src []float32, a float64) {
	if hasAVX512 {
		widenScale32AVX512(dst, src, a)
		return
	}
	widenScaleGeneric(dst, src, a)
}

func tanhScaleFromExp32(dst, grad []float32, e []float64, c float64) {
	if hasAVX512 {
		tanhScaleFromExp32AVX512(dst, grad, e, c)
		return
	}
	tanhScaleFromExpGeneric(dst, grad, e, c)
}
