package simd

import "fmt"

// The two element-wise steps around the exponential of the attention
// softcap c·tanh(s/c), which the kernels compute in float64 as
// c·(1 − 2/(1 + exp(2s/c))) whatever the scores' type: WidenScale makes
// the exponential's argument 2s/c, TanhScaleFromExp turns the exponential
// into the capped score (and its derivative). Both are single IEEE
// operations per element with no fused multiply-add, so every path gives
// the portable loops' bits.

// WidenScale32 sets dst[i] = float64(src[i])·a. It panics if the lengths
// differ.
func WidenScale32(dst []float64, src []float32, a float64) {
	checkSameLen(len(dst), len(src))
	if len(dst) > 0 {
		widenScale32(dst, src, a)
	}
}

// WidenScale64 is WidenScale32 for float64 scores: dst[i] = src[i]·a.
func WidenScale64(dst, src []float64, a float64) {
	checkSameLen(len(dst), len(src))
	widenScaleGeneric(dst, src, a)
}

// TanhScaleFromExp32 sets, with t = 1 − 2/(1 + e[i]) (which is tanh(x)
// when e[i] = exp(2x)), dst[i] = float32(c·t) and, when grad is not nil,
// grad[i] = float32(1 − t²), the derivative of tanh. An e[i] of +Inf gives
// t = 1, 0 gives −1, and NaN stays NaN. It panics if the lengths differ.
func TanhScaleFromExp32(dst, grad []float32, e []float64, c float64) {
	checkSameLen(len(dst), len(e))
	if grad != nil {
		checkSameLen(len(grad), len(e))
	}
	if len(dst) > 0 {
		tanhScaleFromExp32(dst, grad, e, c)
	}
}

// TanhScaleFromExp64 is TanhScaleFromExp32 for float64 scores.
func TanhScaleFromExp64(dst, grad, e []float64, c float64) {
	checkSameLen(len(dst), len(e))
	if grad != nil {
		checkSameLen(len(grad), len(e))
	}
	tanhScaleFromExpGeneric(dst, grad, e, c)
}

func checkSameLen(n, m int) {
	if n != m {
		panic(fmt.Sprintf("simd: slices of %d and %d elements", n, m))
	}
}

// widenScaleGeneric is the portable loop of WidenScale32 and WidenScale64.
func widenScaleGeneric[T float32 | float64](dst []float64, src []T, a float64) {
	src = src[:len(dst)]
	for i, x := range src {
		dst[i] = float64(x) * a
	}
}

// tanhScaleFromExpGeneric is the portable loop of TanhScaleFromExp32 and
// TanhScaleFromExp64. The explicit float64 conversions keep 1 − t·t from
// being fused into one rounding, so that it matches the assembly.
func tanhScaleFromExpGeneric[T float32 | float64](dst, grad []T, e []float64, c float64) {
	e = e[:len(dst)]
	if grad == nil {
		for i, x := range e {
			dst[i] = T(c * (1 - 2/(1+x)))
		}
		return
	}
	grad = grad[:len(dst)]
	for i, x := range e {
		t := 1 - 2/(1+x)
		dst[i], grad[i] = T(c*t), T(1-float64(t*t))
	}
}
