package simd

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestTransposed32 checks Transpose32 and AddTransposed32 (both modes)
// against the element loop, bit for bit, on every shape up to 19 × 19
// (8×8 blocks with every edge) and larger ones (16×16 blocks and their
// edges), in matrices with
// strides beyond the tile and elements of dst outside it that must not
// change; −0 must become +0 where the store mode says so and stay −0 in a
// plain transpose.
func TestTransposed32(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	negZero := float32(math.Copysign(0, -1))
	// Up to 19 × 19: 8×8 blocks with every edge; past 16: 16×16 blocks
	// with 8×8 and element edges on either side.
	shapes := [][2]int{{64, 128}, {33, 70}, {16, 16}, {31, 17}, {17, 31}, {32, 48}, {40, 37}, {48, 24}, {25, 57}}
	for r := range 20 {
		for c := range 20 {
			shapes = append(shapes, [2]int{r, c})
		}
	}
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		lds, ldd := cols+3, rows+5
		// src ends at the tile's last element, as a bias tile does at the
		// end of its matrix: no row stride past the last row.
		src := make([]float32, max(0, (rows-1)*lds+cols))
		for i := range src {
			src[i] = float32(rng.NormFloat64())
			switch rng.IntN(10) {
			case 0:
				src[i] = negZero
			case 1:
				src[i] = float32(math.NaN())
			}
		}
		for mode := range 3 {
			dst := make([]float32, max(0, (cols-1)*ldd+rows))
			for i := range dst {
				dst[i] = float32(rng.NormFloat64())
			}
			want := append([]float32(nil), dst...)
			for r := range rows {
				for c := range cols {
					x := src[r*lds+c]
					switch mode {
					case blockCopy:
						want[c*ldd+r] = x
					case blockStore:
						want[c*ldd+r] = x + 0
					default:
						want[c*ldd+r] += x
					}
				}
			}
			switch mode {
			case blockCopy:
				Transpose32(rows, cols, src, lds, dst, ldd)
			default:
				AddTransposed32(rows, cols, src, lds, dst, ldd, mode == blockStore)
			}
			if !sameBits(dst, want) {
				for i := range dst {
					if math.Float32bits(dst[i]) != math.Float32bits(want[i]) && !(dst[i] != dst[i] && want[i] != want[i]) {
						t.Fatalf("%d×%d mode %d: dst[%d] = %v, want %v", rows, cols, mode, i, dst[i], want[i])
					}
				}
			}
		}
	}
}

// TestTransposeBits32 checks that TransposeBits32 moves words bit for bit,
// signalling-NaN patterns included, on shapes with 8×8 blocks and edges.
func TestTransposeBits32(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, sh := range [][2]int{{0, 0}, {3, 5}, {8, 8}, {13, 130}, {64, 128}} {
		rows, cols := sh[0], sh[1]
		lds, ldd := cols+1, rows+2
		src := make([]uint32, max(0, (rows-1)*lds+cols))
		for i := range src {
			src[i] = rng.Uint32()
			if i%5 == 0 {
				src[i] = 0x7F800001 // a signalling NaN
			}
		}
		dst := make([]uint32, max(0, (cols-1)*ldd+rows))
		TransposeBits32(rows, cols, src, lds, dst, ldd)
		for r := range rows {
			for c := range cols {
				if got, want := dst[c*ldd+r], src[r*lds+c]; got != want {
					t.Fatalf("%d×%d: dst[%d] = %#x, want %#x", rows, cols, c*ldd+r, got, want)
				}
			}
		}
	}
}
