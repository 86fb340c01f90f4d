//go:build !amd64 || noasm

package simd

// block8 and block16 are the blocks of transposed32: none without the
// assembly.
var block8, block16 func(src *float32, lds int, dst *float32, ldd int, mode int)
