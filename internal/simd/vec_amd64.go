//go:build !noasm

package simd

// max32AVX2 computes, over two 8-lane accumulators and a masked tail,
//
//	m := −Inf; for _, v := range x { if v > m { m = v } }; return m
//
//go:noescape
func max32AVX2(x []float32) float32

// max64AVX2 is max32AVX2 for float64 (4 lanes).
//
//go:noescape
func max64AVX2(x []float64) float64

// max32AVX512 is max32AVX2 with 16-lane accumulators.
//
//go:noescape
func max32AVX512(x []float32) float32

// max64AVX512 is max64AVX2 with 8-lane accumulators.
//
//go:noescape
func max64AVX512(x []float64) float64

// scale32AVX2 computes, 8 lanes at a time with a masked tail,
//
//	for i := range x { x[i] *= a }
//
//go:noescape
func scale32AVX2(x []float32, a float32)

// scale64AVX2 is scale32AVX2 for float64 (4 lanes).
//
//go:noescape
func scale64AVX2(x []float64, a float64)

// scale32AVX512 is scale32AVX2 with 16 lanes.
//
//go:noescape
func scale32AVX512(x []float32, a float32)

// scale64AVX512 is scale64AVX2 with 8 lanes.
//
//go:noescape
func scale64AVX512(x []float64, a float64)

// add32AVX512 computes, 16 lanes at a time with a masked tail,
//
//	for i := range s { s[i] += t[i] }
//
//go:noescape
func add32AVX512(s, t []float32)

// sub32AVX512 is add32AVX512 with s[i] −= t[i].
//
//go:noescape
func sub32AVX512(s, t []float32)

// mul32AVX512 is add32AVX512 with s[i] *= t[i].
//
//go:noescape
func mul32AVX512(s, t []float32)

// add64AVX512 is add32AVX512 for float64 (8 lanes).
//
//go:noescape
func add64AVX512(s, t []float64)

// sub64AVX512 is sub32AVX512 for float64 (8 lanes).
//
//go:noescape
func sub64AVX512(s, t []float64)

func max32(x []float32) float32 {
	switch {
	case hasAVX512:
		return max32AVX512(x)
	case hasAVX2:
		return max32AVX2(x)
	}
	return maxGeneric(x)
}

func max64(x []float64) float64 {
	switch {
	case hasAVX512:
		return max64AVX512(x)
	case hasAVX2:
		return max64AVX2(x)
	}
	return maxGeneric(x)
}

func scale32(x []float32, a float32) {
	switch {
	case hasAVX512:
		scale32AVX512(x, a)
	case hasAVX2:
		scale32AVX2(x, a)
	default:
		scaleGeneric(x, a)
	}
}

func scale64(x []float64, a float64) {
	switch {
	case hasAVX512:
		scale64AVX512(x, a)
	case hasAVX2:
		scale64AVX2(x, a)
	default:
		scaleGeneric(x, a)
	}
}

// add32AVX2, sub32AVX2 and mul32AVX2 are add32AVX512's operations, 8 lanes
// at a time with a masked tail (vecop_avx2_amd64.h).
//
//go:noescape
func add32AVX2(s, t []float32)

//go:noescape
func sub32AVX2(s, t []float32)

//go:noescape
func mul32AVX2(s, t []float32)

// add64AVX2 and sub64AVX2 are their float64 forms (4 lanes).
//
//go:noescape
func add64AVX2(s, t []float64)

//go:noescape
func sub64AVX2(s, t []float64)

func add32(s, t []float32) { elementwise(s, t, add32AVX512, add32AVX2, addGeneric[float32]) }
func sub32(s, t []float32) { elementwise(s, t, sub32AVX512, sub32AVX2, subGeneric[float32]) }
func mul32(s, t []float32) { elementwise(s, t, mul32AVX512, mul32AVX2, mulGeneric[float32]) }
func add64(s, t []float64) { elementwise(s, t, add64AVX512, add64AVX2, addGeneric[float64]) }
func sub64(s, t []float64) { elementwise(s, t, sub64AVX512, sub64AVX2, subGeneric[float64]) }

// elementwise runs avx512 where the CPU has AVX-512, else avx2 where it has
// AVX2, else generic. Each computes s[i] = s[i] op t[i] with one rounding,
// so all give the same bits.
func elementwise[T float32 | float64](s, t []T, avx512, avx2, generic func(s, t []T)) {
	switch {
	case hasAVX512:
		avx512(s, t)
	case hasAVX2:
		avx2(s, t)
	default:
		generic(s, t)
	}
}
