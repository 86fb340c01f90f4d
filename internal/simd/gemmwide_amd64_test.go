//go:build !noasm

package simd

import (
	"math/rand/v2"
	"testing"
)

// TestGemmWideMatchesNarrow checks that the AVX-512 wide kernel gives the
// bits of the two-zmm kernel it replaces for few rows, over whole and
// partial blocks, strides and row counts 1…4.
func TestGemmWideMatchesNarrow(t *testing.T) {
	if !hasAVX512 {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, m := range []int{1, 2, 3, 4} {
		for _, n := range []int{64, 128, 192, 320} {
			for _, k := range []int{1, 2, 5, 64, 129} {
				lda, ldb, ldc := k+m, n+3, n+5
				a, b := randSlice[float32](rng, (m-1)*lda+k), randSlice[float32](rng, (k-1)*ldb+n)
				wide, narrow := randSlice[float32](rng, (m-1)*ldc+n), make([]float32, (m-1)*ldc+n)
				copy(narrow, wide)
				gemmWide32AVX512(m, n, k, &a[0], lda, &b[0], ldb, &wide[0], ldc)
				gemmKernel32AVX512(m, n, k, &a[0], lda, &b[0], ldb, &narrow[0], ldc)
				if !sameBits(wide, narrow) {
					t.Fatalf("m=%d n=%d k=%d: the wide kernel's bits differ from the narrow one's", m, n, k)
				}
			}
		}
	}
}
