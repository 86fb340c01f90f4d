package simd

import "fmt"

// The two element-wise steps around the exponential of the attention
// softcap c·tanh(s/c) for float64 scores, computed as
// c·(1 − 2/(1 + exp(2s/c))): WidenScale64 makes the exponential's
// argument 2s/c, TanhScaleFromExp64 turns the exponential into the capped
// score (and its derivative). float32 scores take Softcap32, in float32
// throughout.

// WidenScale64 sets dst[i] = src[i]·a. It panics if the lengths differ.
func WidenScale64(dst, src []float64, a float64) {
	checkSameLen(len(dst), len(src))
	for i, x := range src {
		dst[i] = x * a
	}
}

// TanhScaleFromExp64 sets, with t = 1 − 2/(1 + e[i]) (which is tanh(x)
// when e[i] = exp(2x)), dst[i] = c·t and, when grad is not nil,
// grad[i] = 1 − t², the derivative of tanh. An e[i] of +Inf gives t = 1,
// 0 gives −1, and NaN stays NaN. It panics if the lengths differ.
func TanhScaleFromExp64(dst, grad, e []float64, c float64) {
	checkSameLen(len(dst), len(e))
	if grad != nil {
		checkSameLen(len(grad), len(e))
	}
	tanhScaleFromExp64Loop(dst, grad, e, c)
}

func checkSameLen(n, m int) {
	if n != m {
		panic(fmt.Sprintf("simd: slices of %d and %d elements", n, m))
	}
}

// tanhScaleFromExp64Loop is TanhScaleFromExp64's loop. The explicit
// conversion keeps 1 − t·t from being fused into one rounding.
func tanhScaleFromExp64Loop(dst, grad, e []float64, c float64) {
	e = e[:len(dst)]
	if grad == nil {
		for i, x := range e {
			dst[i] = c * (1 - 2/(1+x))
		}
		return
	}
	grad = grad[:len(dst)]
	for i, x := range e {
		t := 1 - 2/(1+x)
		dst[i], grad[i] = c*t, 1-float64(t*t)
	}
}
