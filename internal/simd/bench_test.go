package simd

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// gemmBenchShapes are the products a CPU FlashAttention forward pass makes:
// S = Q·Kᵀ (Br × Bc × D) and O += P·V (Br × D × Bc).
var gemmBenchShapes = [][3]int{
	{64, 64, 64}, {64, 128, 64}, {128, 64, 128}, {128, 128, 128}, {64, 64, 256}, {32, 40, 64}, {113, 113, 113},
}

func BenchmarkGemmNN32(b *testing.B) { benchGemm(b, gemm32Impls()) }
func BenchmarkGemmNN64(b *testing.B) { benchGemm(b, gemm64Impls()) }

func benchGemm[T float32 | float64](b *testing.B, impls []gemmImpl[T]) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, s := range gemmBenchShapes {
		m, n, k := s[0], s[1], s[2]
		a, bb, c := randSlice[T](rng, m*k), randSlice[T](rng, k*n), randSlice[T](rng, m*n)
		for _, impl := range impls {
			b.Run(fmt.Sprintf("%dx%dx%d/%s", m, n, k, impl.name), func(b *testing.B) {
				for b.Loop() {
					impl.fn(m, n, k, a, k, bb, n, c, n)
				}
				flops := 2 * float64(m*n*k) * float64(b.N)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkGemmNT32 times the decode step's score product, S = Q·Kᵀ for n
// query rows against a block of 128 keys of D = 128, by GemmNT32's paths
// and by the GEMM it replaces, Sᵀ = K·Qᵀ on the transposed rows (the decode
// path chooses between them by n).
func BenchmarkGemmNT32(b *testing.B) {
	rng := rand.New(rand.NewPCG(11, 12))
	const keys, k = 128, 128
	for _, n := range []int{1, 4, 8, 16, 32, 64} {
		kb, q, qt, c := randSlice[float32](rng, keys*k), randSlice[float32](rng, n*k), randSlice[float32](rng, k*n), randSlice[float32](rng, keys*n)
		run := func(name string, fn func()) {
			b.Run(fmt.Sprintf("n=%d/%s", n, name), func(b *testing.B) {
				for b.Loop() {
					fn()
				}
				b.ReportMetric(2*float64(keys*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
		for _, impl := range gemmNT32Impls() {
			run(impl.name, func() { impl.fn(n, keys, k, q, k, kb, k, c, keys) })
		}
		run("gemm", func() { GemmNN32(keys, n, k, kb, k, qt, n, c, n) })
	}
}

func BenchmarkExpShift32(b *testing.B) { benchExp(b, exp32Impls()) }
func BenchmarkExpShift64(b *testing.B) { benchExp(b, exp64Impls()) }

// benchExp times one row of scores of typical block length. Each iteration
// restores the row first (a copy, a few percent of the time) so that every
// implementation sees the same arguments in [-20, 0].
func benchExp[T float32 | float64](b *testing.B, impls []expImpl[T]) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{128, 4096} {
		src := make([]T, n)
		for i := range src {
			src[i] = T(-20 * rng.Float64())
		}
		x := make([]T, n)
		for _, impl := range impls {
			b.Run(fmt.Sprintf("n=%d/%s", n, impl.name), func(b *testing.B) {
				var zero T
				b.SetBytes(int64(n) * int64(sizeOf(zero)))
				for b.Loop() {
					copy(x, src)
					impl.fn(x, 0)
				}
				b.ReportMetric(float64(n)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "elem/ns")
			})
		}
	}
}

func sizeOf[T float32 | float64](T) int {
	var zero T
	if _, ok := any(zero).(float32); ok {
		return 4
	}
	return 8
}

func BenchmarkVec32(b *testing.B) { benchVec(b, vec32Impls()) }
func BenchmarkVec64(b *testing.B) { benchVec(b, vec64Impls()) }

// benchVec times Max and Scale on a row of scores or outputs.
func benchVec[T float32 | float64](b *testing.B, impls []vecImpl[T]) {
	rng := rand.New(rand.NewPCG(15, 16))
	const n = 256
	x := randSlice[T](rng, n)
	var sink T
	for _, impl := range impls {
		b.Run("max/"+impl.name, func(b *testing.B) {
			for b.Loop() {
				sink += impl.max(x)
			}
			b.ReportMetric(float64(n)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "elem/ns")
		})
		b.Run("scale/"+impl.name, func(b *testing.B) {
			for b.Loop() {
				impl.scale(x, 1)
			}
			b.ReportMetric(float64(n)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "elem/ns")
		})
	}
	_ = sink
}
