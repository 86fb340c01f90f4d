package simd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

type gemmImpl[T float32 | float64] struct {
	name string
	// fn expects arguments that passed checkGemm with m, n, k > 0.
	fn func(m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int)
}

type gemmCase struct {
	m, n, k       int
	lda, ldb, ldc int
}

// gemmCases crosses small and odd sizes that hit every edge of the
// microkernels (row panels of 6 or 8, column blocks of 8, 16 or 32 and their
// masked tails, the k loop unrolled by 4) with a few typical attention
// shapes and one B large enough for the column-block order of the
// assembly drivers. Strides are either tight or padded by a random amount.
func gemmCases() []gemmCase {
	rng := rand.New(rand.NewPCG(1, 2))
	pad := func() int {
		if rng.IntN(2) == 0 {
			return 0
		}
		return 1 + rng.IntN(9)
	}
	var cases []gemmCase
	for _, m := range []int{0, 1, 2, 5, 6, 7, 8, 9, 13, 17} {
		for _, n := range []int{0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40, 47} {
			for _, k := range []int{0, 1, 2, 3, 4, 5, 9, 17} {
				cases = append(cases, gemmCase{m, n, k, k + pad(), n + pad(), n + pad()})
			}
		}
	}
	// Few rows, whole and partial 64-column blocks: the AVX-512 wide kernel
	// (gemm32AVX512) and its column tail.
	for _, m := range []int{1, 2, 3, 4} {
		for _, n := range []int{64, 65, 127, 128, 130, 192} {
			for _, k := range []int{1, 3, 4, 5, 17, 128} {
				cases = append(cases, gemmCase{m, n, k, k + pad(), n + pad(), n + pad()})
			}
		}
	}
	for _, s := range [][3]int{
		{32, 64, 64}, {64, 64, 64}, {64, 128, 64}, {128, 64, 128}, {40, 113, 72},
		{113, 40, 113}, {128, 256, 256}, {17, 200, 96}, {64, 8, 256}, {3, 257, 33},
		{9, 300, 257}, // B over bSweepMax: the column-block order
	} {
		m, n, k := s[0], s[1], s[2]
		cases = append(cases,
			gemmCase{m, n, k, k, n, n},
			gemmCase{m, n, k, k + 7, n + 5, n + 3},
		)
	}
	return cases
}

// sentinel marks C elements outside the m×n window (row padding when
// ldc > n, and a guard region after the last row) that must stay untouched.
const sentinel = -1234.5

func TestGemmNN32(t *testing.T) { testGemm(t, gemm32Impls(), 24) }
func TestGemmNN64(t *testing.T) { testGemm(t, gemm64Impls(), 53) }

// testGemm checks every implementation against a float64 reference.
//
// Tolerance: every implementation forms c + Σ_p a_p·b_p with k products and
// k+1 additions (fused or not) in some fixed order, each rounding with
// relative error at most u = 2^-prec. The classic bound for such a sum is
// |ĉ − c| ≤ γ_{k+1}·(|c| + Σ|a_p·b_p|), γ_j = j·u/(1 − j·u); the test uses
// (k+2)·u·(|c| + Σ|a_p·b_p|), which exceeds γ_{k+1} for all k here. The
// float64 reference itself is within k·2^-53 of the exact value, far
// below the float32 bound; for float64 it adds to the error on the same
// scale, and the extra +1 in k+2 covers it.
func testGemm[T float32 | float64](t *testing.T, impls []gemmImpl[T], prec int) {
	u := math.Ldexp(1, -prec)
	rng := rand.New(rand.NewPCG(3, 4))
	const guard = 37
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			worst := 0.0
			for _, tc := range gemmCases() {
				m, n, k := tc.m, tc.n, tc.k
				a := randSlice[T](rng, max(0, (m-1)*tc.lda+k))
				b := randSlice[T](rng, max(0, (k-1)*tc.ldb+n))
				buf := make([]T, max(0, (m-1)*tc.ldc+n)+guard)
				for i := range buf {
					buf[i] = sentinel
				}
				c := buf[:len(buf)-guard]
				c0 := make([]T, len(c))
				for i := range m {
					for j := range n {
						c[i*tc.ldc+j] = T(rng.Float64()*2 - 1)
					}
				}
				copy(c0, c)
				a0, b0 := append([]T(nil), a...), append([]T(nil), b...)

				if checkGemm(m, n, k, len(a), tc.lda, len(b), tc.ldb, len(c), tc.ldc) {
					impl.fn(m, n, k, a, tc.lda, b, tc.ldb, c, tc.ldc)
				}

				name := fmt.Sprintf("m=%d n=%d k=%d lda=%d ldb=%d ldc=%d", m, n, k, tc.lda, tc.ldb, tc.ldc)
				if !sameBits(a, a0) || !sameBits(b, b0) {
					t.Fatalf("%s: A or B modified", name)
				}
				for i, v := range buf {
					inside := i < len(c) && i%tc.ldc < n
					if !inside && v != sentinel {
						t.Fatalf("%s: element %d outside the window changed to %v", name, i, v)
					}
				}
				for i := range m {
					for j := range n {
						ref := float64(c0[i*tc.ldc+j])
						mag := math.Abs(ref)
						for p := range k {
							prod := float64(a[i*tc.lda+p]) * float64(b[p*tc.ldb+j])
							ref += prod
							mag += math.Abs(prod)
						}
						tol := float64(k+2) * u * mag
						got := float64(c[i*tc.ldc+j])
						err := math.Abs(got - ref)
						if !(err <= tol) {
							t.Fatalf("%s: C[%d,%d] = %v, want %v ± %.3g", name, i, j, got, ref, tol)
						}
						if tol > 0 {
							worst = max(worst, err/tol)
						}
					}
				}
			}
			t.Logf("%d cases, worst error %.3f of the bound", len(gemmCases()), worst)
		})
	}
}

func TestGemmAddsCAfterTheSum(t *testing.T) {
	testAddsCAfterTheSum(t, gemm32Impls(), 24)
	testAddsCAfterTheSum(t, gemm64Impls(), 53)
}

// testAddsCAfterTheSum checks that every implementation sums the products
// first and adds C after: with C = 1 and two products of half an ulp of 1
// (2^-prec) each, the sum is one ulp, so 1 + (2^-prec + 2^-prec) is exact,
// while adding the products into C one at a time rounds each tie to even
// and leaves 1. The shape covers a full row panel and a masked column tail
// of every assembly path.
func testAddsCAfterTheSum[T float32 | float64](t *testing.T, impls []gemmImpl[T], prec int) {
	const m, n, k = 9, 37, 2
	halfUlp := T(math.Ldexp(1, -prec))
	want := 1 + 2*halfUlp
	for _, impl := range impls {
		t.Run(fmt.Sprintf("%s/prec=%d", impl.name, prec), func(t *testing.T) {
			a, b, c := make([]T, m*k), make([]T, k*n), make([]T, m*n)
			for i := range a {
				a[i] = halfUlp
			}
			for i := range b {
				b[i] = 1
			}
			for i := range c {
				c[i] = 1
			}
			impl.fn(m, n, k, a, k, b, n, c, n)
			for i, v := range c {
				if v != want {
					t.Fatalf("C[%d] = 1 + %g, want 1 + %g (C added after the sum of the products)", i, float64(v-1), float64(want-1))
				}
			}
		})
	}
}

// gemmStoreImpl is a path of GemmNNStore and the GemmNN path whose bits
// it must give on a cleared C.
type gemmStoreImpl[T float32 | float64] struct {
	name       string
	store, add func(m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int)
}

func TestGemmNNStore(t *testing.T) {
	testGemmStore(t, gemmStore32Impls(), 1e-30)
	testGemmStore(t, gemmStore64Impls(), 1e-200)
}

// testGemmStore checks that each store path writes, over a window of NaN
// (C must not be read), the bits that its add path leaves in a window of
// zeros, and nothing outside the window; tiny is small enough that
// tiny·(−tiny) underflows, so that the last case's sums are −0, which the
// add path turns into +0.
func testGemmStore[T float32 | float64](t *testing.T, impls []gemmStoreImpl[T], tiny float64) {
	rng := rand.New(rand.NewPCG(13, 14))
	const guard = 37
	nan := T(math.NaN())
	cases := append(gemmCases(), gemmCase{9, 37, 3, 3, 37, 40})
	for _, impl := range impls {
		t.Run(fmt.Sprintf("%s/%T", impl.name, nan), func(t *testing.T) {
			for ci, tc := range cases {
				m, n, k := tc.m, tc.n, tc.k
				if m == 0 || n == 0 || k == 0 {
					continue
				}
				a := randSlice[T](rng, (m-1)*tc.lda+k)
				b := randSlice[T](rng, (k-1)*tc.ldb+n)
				if ci == len(cases)-1 {
					for i := range a {
						a[i] = T(tiny)
					}
					for i := range b {
						b[i] = T(-tiny)
					}
				}
				got := make([]T, (m-1)*tc.ldc+n+guard)
				want := make([]T, len(got))
				for i := range got {
					got[i], want[i] = sentinel, sentinel
					if i < len(got)-guard && i%tc.ldc < n {
						got[i], want[i] = nan, 0
					}
				}
				impl.store(m, n, k, a, tc.lda, b, tc.ldb, got, tc.ldc)
				impl.add(m, n, k, a, tc.lda, b, tc.ldb, want, tc.ldc)
				if !sameBits(got, want) {
					t.Fatalf("m=%d n=%d k=%d lda=%d ldb=%d ldc=%d: C differs from the sum added to zeros", m, n, k, tc.lda, tc.ldb, tc.ldc)
				}
			}
		})
	}
}

// TestGemmDispatch checks the exported functions (whatever path they pick)
// on one shape and their argument checks.
func TestGemmDispatch(t *testing.T) {
	const m, n, k = 7, 19, 11
	rng := rand.New(rand.NewPCG(5, 6))
	a32, b32 := randSlice[float32](rng, m*k), randSlice[float32](rng, k*n)
	c32, ref32 := make([]float32, m*n), make([]float32, m*n)
	GemmNN32(m, n, k, a32, k, b32, n, c32, n)
	gemmNNGeneric(m, n, k, a32, k, b32, n, ref32, n)
	a64, b64 := randSlice[float64](rng, m*k), randSlice[float64](rng, k*n)
	c64, ref64 := make([]float64, m*n), make([]float64, m*n)
	GemmNN64(m, n, k, a64, k, b64, n, c64, n)
	gemmNNGeneric(m, n, k, a64, k, b64, n, ref64, n)
	for i := range c32 {
		if d := math.Abs(float64(c32[i] - ref32[i])); d > 1e-5 {
			t.Fatalf("GemmNN32: C[%d] = %v, generic %v", i, c32[i], ref32[i])
		}
		if d := math.Abs(c64[i] - ref64[i]); d > 1e-13 {
			t.Fatalf("GemmNN64: C[%d] = %v, generic %v", i, c64[i], ref64[i])
		}
	}
	GemmNN32(0, n, k, nil, k, nil, n, nil, n) // empty: no panic, no access

	// One row of A and C, one row of B: their strides are never used.
	x, y, z := []float32{2}, []float32{1, 2, 3}, []float32{1, 1, 1}
	GemmNN32(1, 3, 1, x, 0, y, 0, z, 0)
	if z[0] != 3 || z[1] != 5 || z[2] != 7 {
		t.Errorf("single-row GemmNN32 = %v, want [3 5 7]", z)
	}

	for _, tc := range []struct {
		name       string
		m, n, k    int
		la, lb, lc int
		lda, ldc   int
	}{
		{"negative m", -1, 2, 2, 4, 4, 4, 2, 2},
		{"lda < k", 2, 2, 2, 4, 4, 4, 1, 2},
		{"ldc < n", 2, 2, 2, 4, 4, 4, 2, 1},
		{"short a", 2, 2, 2, 3, 4, 4, 2, 2},
		{"short b", 2, 2, 2, 4, 3, 4, 2, 2},
		{"short c", 2, 2, 2, 4, 4, 3, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("no panic")
				}
			}()
			GemmNN32(tc.m, tc.n, tc.k, make([]float32, tc.la), tc.lda, make([]float32, tc.lb), tc.n, make([]float32, tc.lc), tc.ldc)
		})
	}
}

func randSlice[T float32 | float64](rng *rand.Rand, n int) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = T(rng.Float64()*2 - 1)
	}
	return s
}

func sameBits[T float32 | float64](x, y []T) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if math.Float64bits(float64(x[i])) != math.Float64bits(float64(y[i])) {
			return false
		}
	}
	return true
}
