package simd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

type gemmNTImpl struct {
	name string
	// fn expects arguments that passed checkGemmNT with m, n, k > 0.
	fn func(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int)
	// nn is the GemmNN32 path whose bits fn must give on the transposed B.
	nn func(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int)
}

// TestGemmNT32 checks every path against a float64 reference, with
// testGemm's bound (k+2)·u·(|c| + Σ|a·b|), and against the GemmNN32 path
// it must equal bit for bit on the transposed B, over m (query rows) from
// 1 to 64 across the chunks of 4 rows, n (keys) across the 32-column
// steps and their masked tails, k (the head dimension) odd and even, and
// tight or padded strides; C outside the window must stay untouched.
func TestGemmNT32(t *testing.T) {
	const u = 0x1p-24
	const guard = 23
	rng := rand.New(rand.NewPCG(5, 6))
	pad := func() int {
		if rng.IntN(2) == 0 {
			return 0
		}
		return 1 + rng.IntN(7)
	}
	for _, impl := range gemmNT32Impls() {
		t.Run(impl.name, func(t *testing.T) {
			worst := 0.0
			for _, m := range []int{1, 2, 3, 4, 5, 7, 8, 9, 16, 33, 64} {
				for _, n := range []int{1, 15, 16, 17, 31, 32, 33, 64, 100, 128} {
					for _, k := range []int{1, 3, 17, 64, 127, 128} {
						lda, ldb, ldc := k+pad(), k+pad(), n+pad()
						a := randSlice[float32](rng, (m-1)*lda+k)
						b := randSlice[float32](rng, (n-1)*ldb+k)
						c0 := make([]float32, (m-1)*ldc+n+guard)
						for i := range c0 {
							c0[i] = sentinel
						}
						for i := range m {
							for j := range n {
								c0[i*ldc+j] = float32(rng.Float64()*2 - 1)
							}
						}
						name := fmt.Sprintf("m=%d n=%d k=%d lda=%d ldb=%d ldc=%d", m, n, k, lda, ldb, ldc)
						c := append([]float32(nil), c0...)
						impl.fn(m, n, k, a, lda, b, ldb, c[:len(c)-guard], ldc)
						for i, v := range c {
							if (i >= (m-1)*ldc+n || i%ldc >= n) && v != sentinel {
								t.Fatalf("%s: element %d outside the window changed to %v", name, i, v)
							}
						}
						bt := make([]float32, k*n)
						for j := range n {
							for p := range k {
								bt[p*n+j] = b[j*ldb+p]
							}
						}
						nn := append([]float32(nil), c0...)
						impl.nn(m, n, k, a, lda, bt, n, nn[:len(nn)-guard], ldc)
						if !sameBits(c, nn) {
							t.Fatalf("%s: differs from GemmNN32 on the transposed B", name)
						}
						for i := range m {
							for j := range n {
								ref := float64(c0[i*ldc+j])
								mag := math.Abs(ref)
								for p := range k {
									prod := float64(a[i*lda+p]) * float64(b[j*ldb+p])
									ref += prod
									mag += math.Abs(prod)
								}
								tol := float64(k+2) * u * mag
								got := float64(c[i*ldc+j])
								err := math.Abs(got - ref)
								if !(err <= tol) {
									t.Fatalf("%s: C[%d,%d] = %v, want %v ± %.3g", name, i, j, got, ref, tol)
								}
								worst = max(worst, err/tol)
							}
						}
					}
				}
			}
			t.Logf("worst error %.3f of the bound", worst)
		})
	}
}

func TestGemmNT32Panics(t *testing.T) {
	a, b, c := make([]float32, 8), make([]float32, 8), make([]float32, 4)
	for _, tc := range []struct {
		name          string
		m, n, k       int
		lda, ldb, ldc int
	}{
		{"negative", -1, 1, 1, 1, 1, 1},
		{"lda", 2, 1, 4, 3, 4, 1},
		{"ldb", 1, 2, 4, 4, 3, 2},
		{"ldc", 2, 2, 4, 4, 4, 1},
		{"short a", 3, 1, 4, 4, 4, 1},
		{"short b", 1, 3, 4, 4, 4, 3},
		{"short c", 1, 5, 1, 1, 1, 5},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", tc.name)
				}
			}()
			GemmNT32(tc.m, tc.n, tc.k, a, tc.lda, b, tc.ldb, c, tc.ldc)
		}()
	}
}
