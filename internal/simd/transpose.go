package simd

import "unsafe"

// Transpose32 sets dst[c·ldd + r] = src[r·lds + c] for r < rows, c <
// cols: a tile of a row-major matrix (a bias, row stride Nk) written by
// columns. On amd64 with AVX2 it goes by 8×8 blocks in registers, the
// edges one element at a time.
func Transpose32(rows, cols int, src []float32, lds int, dst []float32, ldd int) {
	transposed32(rows, cols, src, lds, dst, ldd, blockCopy)
}

// TransposeBits32 is Transpose32 for 32-bit words (dropout's Philox
// words): the same moves, which copy bits and do no arithmetic.
func TransposeBits32(rows, cols int, src []uint32, lds int, dst []uint32, ldd int) {
	if rows <= 0 || cols <= 0 {
		return
	}
	s := unsafe.Slice((*float32)(unsafe.Pointer(&src[0])), len(src))
	d := unsafe.Slice((*float32)(unsafe.Pointer(&dst[0])), len(dst))
	transposed32(rows, cols, s, lds, d, ldd, blockCopy)
}

// AddTransposed32 sets dst[c·ldd + r] += src[r·lds + c] for r < rows,
// c < cols; with store it writes src[r·lds + c] + 0 instead, without
// reading dst (what adding into a cleared dst gives, −0 becoming +0). It
// adds a tile's dSᵀ into dBias by rows of dBias.
func AddTransposed32(rows, cols int, src []float32, lds int, dst []float32, ldd int, store bool) {
	mode := blockAdd
	if store {
		mode = blockStore
	}
	transposed32(rows, cols, src, lds, dst, ldd, mode)
}

// What a transposed element does to dst: replaces it, replaces it with
// itself + 0, or is added to it.
const (
	blockCopy = iota
	blockStore
	blockAdd
)

// transposed32 checks the bounds once, then runs the 8×8 blocks through
// block8 where there is one and the edges through the generic loop.
func transposed32(rows, cols int, src []float32, lds int, dst []float32, ldd int, mode int) {
	if rows <= 0 || cols <= 0 {
		return
	}
	_ = src[(rows-1)*lds+cols-1]
	_ = dst[(cols-1)*ldd+rows-1]
	r8, c8 := 0, 0
	if block8 != nil {
		r8, c8 = rows/8*8, cols/8*8
		for r := 0; r < r8; r += 8 {
			for c := 0; c < c8; c += 8 {
				block8(&src[r*lds+c], lds, &dst[c*ldd+r], ldd, mode)
			}
		}
	}
	// The edges: columns past c8 of the blocked rows, then the rows past r8.
	transposedGeneric(r8, c8, cols, src, lds, dst, ldd, mode)
	if rows > r8 {
		transposedGeneric(rows-r8, 0, cols, src[r8*lds:], lds, dst[r8:], ldd, mode)
	}
}

// transposedGeneric is the portable loop of transposed32 over rows
// 0 … rows−1 and columns c0 … cols−1.
func transposedGeneric(rows, c0, cols int, src []float32, lds int, dst []float32, ldd int, mode int) {
	for r := range rows {
		for c := c0; c < cols; c++ {
			x := src[r*lds+c]
			switch mode {
			case blockCopy:
				dst[c*ldd+r] = x
			case blockStore:
				dst[c*ldd+r] = x + 0
			default:
				dst[c*ldd+r] += x
			}
		}
	}
}
