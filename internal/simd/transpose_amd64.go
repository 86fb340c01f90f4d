//go:build !noasm

package simd

// transpose8x8AVX2 writes the transpose of the 8×8 block at src (row
// stride lds elements) to dst (row stride ldd) as mode says:
// dst[c·ldd + r] = src[r·lds + c] (blockCopy), that + 0 (blockStore) or
// dst[c·ldd + r] += src[r·lds + c] (blockAdd), r, c < 8.
//
//go:noescape
func transpose8x8AVX2(src *float32, lds int, dst *float32, ldd int, mode int)

// transpose16x16AVX512 is transpose8x8AVX2 for a 16×16 block.
//
//go:noescape
func transpose16x16AVX512(src *float32, lds int, dst *float32, ldd int, mode int)

// block8 and block16 are the 8×8 and 16×16 blocks of transposed32, nil
// without AVX2 or AVX-512.
var block8, block16 func(src *float32, lds int, dst *float32, ldd int, mode int)

func init() {
	if hasAVX2 {
		block8 = transpose8x8AVX2
	}
	if hasAVX512 {
		block16 = transpose16x16AVX512
	}
}
