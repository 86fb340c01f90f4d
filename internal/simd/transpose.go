package simd

import "unsafe"

// Transpose32 sets dst[c·ldd + r] = src[r·lds + c] for r < rows, c <
// cols: a tile of a row-major matrix (a bias, row stride Nk) written by
// columns. On amd64 it goes by 16×16 blocks in registers with AVX-512,
// 8×8 ones with AVX2, the edges one element at a time.
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

// transposed32 checks the bounds once, then covers the tile with the
// largest blocks there are (transposeBlocks).
func transposed32(rows, cols int, src []float32, lds int, dst []float32, ldd int, mode int) {
	if rows <= 0 || cols <= 0 {
		return
	}
	_ = src[(rows-1)*lds+cols-1]
	_ = dst[(cols-1)*ldd+rows-1]
	transposeBlocks(rows, cols, src, lds, dst, ldd, mode)
}

// transposeBlocks runs the whole n×n blocks of the tile through the largest
// block function this CPU has (16×16 with AVX-512, 8×8 with AVX2), then its
// right edge (the blocked rows, the columns past the blocks) and its
// bottom edge (the rows past them) the same way with what still fits, and
// what no block covers through the generic loop. Bounds are checked by the
// caller.
func transposeBlocks(rows, cols int, src []float32, lds int, dst []float32, ldd int, mode int) {
	for _, b := range [...]struct {
		n  int
		fn func(src *float32, lds int, dst *float32, ldd int, mode int)
	}{{16, block16}, {8, block8}} {
		rb, cb := rows/b.n*b.n, cols/b.n*b.n
		if b.fn == nil || rb == 0 || cb == 0 {
			continue
		}
		for r := 0; r < rb; r += b.n {
			for c := 0; c < cb; c += b.n {
				b.fn(&src[r*lds+c], lds, &dst[c*ldd+r], ldd, mode)
			}
		}
		if cols > cb {
			transposeBlocks(rb, cols-cb, src[cb:], lds, dst[cb*ldd:], ldd, mode)
		}
		if rows > rb {
			transposeBlocks(rows-rb, cols, src[rb*lds:], lds, dst[rb:], ldd, mode)
		}
		return
	}
	transposedGeneric(rows, 0, cols, src, lds, dst, ldd, mode)
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
