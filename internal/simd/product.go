package simd

// ScaledProduct32 sets dst[i] = s·a[i]·dst[i] for every i of dst, or
// s·a[i]·dst[i]·g[i] when g is not nil, multiplied in that order (as Go
// evaluates the expression, so every path gives the same bits); a and g
// must be at least as long as dst. It is the backward's scale·dS =
// scale·P∘(dP − D), with the softcap's derivative g.
func ScaledProduct32(dst, a, g []float32, s float32) {
	if len(dst) == 0 {
		return
	}
	a = a[:len(dst)]
	if g != nil {
		g = g[:len(dst)]
	}
	scaledProduct32(dst, a, g, s)
}

// scaledProductGeneric is the portable loop of ScaledProduct32.
func scaledProductGeneric(dst, a, g []float32, s float32) {
	if g == nil {
		for i := range dst {
			dst[i] = s * a[i] * dst[i]
		}
		return
	}
	for i := range dst {
		dst[i] = s * a[i] * dst[i] * g[i]
	}
}
