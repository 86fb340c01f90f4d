//go:build !noasm

package simd

// scaledProduct32AVX512 computes ScaledProduct32 without g, 16 lanes at a
// time with a masked tail.
//
//go:noescape
func scaledProduct32AVX512(dst, a []float32, s float32)

// scaledProductG32AVX512 is scaledProduct32AVX512 with the fourth factor
// g.
//
//go:noescape
func scaledProductG32AVX512(dst, a, g []float32, s float32)

func scaledProduct32(dst, a, g []float32, s float32) {
	switch {
	case !hasAVX512:
		scaledProductGeneric(dst, a, g, s)
	case g == nil:
		scaledProduct32AVX512(dst, a, s)
	default:
		scaledProductG32AVX512(dst, a, g, s)
	}
}
