//go:build !amd64 || noasm

package simd

func scaledProduct32(dst, a, g []float32, s float32) { scaledProductGeneric(dst, a, g, s) }
