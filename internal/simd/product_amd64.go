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

// scaledProduct32AVX2 is scaledProduct32AVX512 with 8 lanes. The product
// with g has no AVX2 form: one (scaledProductG32AVX2, 8 lanes like this)
// made the CPU softcap backward 24 % slower on an AMD EPYC (2026-12-02,
// six alternating runs, p = 0.002), all of it in math.Tanh of the
// following keys, which an isolated loop did not reproduce.
//
//go:noescape
func scaledProduct32AVX2(dst, a []float32, s float32)

func scaledProduct32(dst, a, g []float32, s float32) {
	switch {
	case hasAVX512 && g == nil:
		scaledProduct32AVX512(dst, a, s)
	case hasAVX512:
		scaledProductG32AVX512(dst, a, g, s)
	case hasAVX2 && g == nil:
		scaledProduct32AVX2(dst, a, s)
	default:
		scaledProductGeneric(dst, a, g, s)
	}
}
