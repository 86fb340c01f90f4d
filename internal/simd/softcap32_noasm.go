//go:build !amd64 || noasm

package simd

func softcap32(s, grad []float32, c float32) { softcap32Generic(s, grad, c) }
