//go:build !amd64 || noasm

package simd

// block8 is the 8×8 block of transposed32: none without the assembly.
var block8 func(src *float32, lds int, dst *float32, ldd int, mode int)
