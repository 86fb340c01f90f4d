package simd

import "fmt"

// TanhScaleFromExp64 is the last step of the attention softcap
// c·tanh(s/c) for float64 scores, computed as c·(1 − 2/(1 + exp(2s/c))):
// with t = 1 − 2/(1 + e[i]) (which is tanh(x) when e[i] = exp(2x)), it sets
// dst[i] = c·t and, when grad is not nil, grad[i] = 1 − t², the derivative
// of tanh. An e[i] of +Inf gives t = 1, 0 gives −1, and NaN stays NaN. dst
// may be e. float32 scores take Softcap32, in float32 throughout. It
// panics if the lengths differ.
func TanhScaleFromExp64(dst, grad, e []float64, c float64) {
	checkSameLen(len(dst), len(e))
	if grad == nil {
		for i, x := range e {
			dst[i] = c * (1 - 2/(1+x))
		}
		return
	}
	checkSameLen(len(grad), len(e))
	for i, x := range e {
		t := 1 - 2/(1+x)
		// The conversion keeps 1 − t·t from being fused into one rounding.
		dst[i], grad[i] = c*t, 1-float64(t*t)
	}
}

func checkSameLen(n, m int) {
	if n != m {
		panic(fmt.Sprintf("simd: slices of %d and %d elements", n, m))
	}
}
