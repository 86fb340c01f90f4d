package cpukernels

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gorgonia-flash/flashattention/internal/simd"
	"github.com/gorgonia-flash/flashattention/kernels"
)

// Tile sizes. A Br×D query tile, a score tile of Br rows and up to
// 2·Bc keys (the forward's scoreCols) and a Bc×D key or value tile
// together stay within a core's L2 cache for D ≤ 256.
const (
	blockRows = 64  // Br: query rows per work unit
	blockCols = 128 // Bc: keys per inner step
	// Rows per forward pass under a window bounded on the left: the GEMMs'
	// microkernels take 8 rows at a time, so 16 keeps them whole while
	// cutting the keys no row sees from Br − 1 to 15, and a 16-row panel's
	// band of a 256-key window fits one tile (tileSpan).
	windowPanelRows = 16
	// Rows or keys per panel of a tile that such a window cuts in the
	// backward (backwardTile, backwardPanelProducts): 32, whose fewer,
	// larger products beat 16's smaller waste (window 256: 6–13 % faster
	// than 16 on dev, 8 slower still).
	windowPanelBackward = 32
)

// Backend runs attention on the CPU. The zero value is ready to use.
type Backend struct {
	// Workers bounds the goroutines one call uses; 0 means GOMAXPROCS.
	// Results do not depend on it.
	Workers int
}

var _ kernels.Backend = Backend{}

// Name implements kernels.Backend.
func (Backend) Name() string { return "cpu" }

// Forward32 implements kernels.Backend.
func (b Backend) Forward32(p kernels.Params, q, k, v, o, lse []float32) error {
	return forward(b.workers(), p, q, k, v, o, lse)
}

// Forward64 implements kernels.Backend.
func (b Backend) Forward64(p kernels.Params, q, k, v, o, lse []float64) error {
	return forward(b.workers(), p, q, k, v, o, lse)
}

// Backward32 implements kernels.Backend.
func (b Backend) Backward32(p kernels.Params, q, k, v, o, lse, do, dlse, dq, dk, dv []float32) error {
	return backward(b.workers(), p, q, k, v, o, lse, do, dlse, dq, dk, dv)
}

// Backward64 implements kernels.Backend.
func (b Backend) Backward64(p kernels.Params, q, k, v, o, lse, do, dlse, dq, dk, dv []float64) error {
	return backward(b.workers(), p, q, k, v, o, lse, do, dlse, dq, dk, dv)
}

func (b Backend) workers() int {
	if b.Workers > 0 {
		return b.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// parallelFor runs body(worker, unit) for unit in [0, units) on at most
// workers goroutines. Units are handed out dynamically, which balances the
// uneven cost of causal blocks; each unit writes only its own outputs, so the
// order in which they run never changes a result.
func parallelFor(workers, units int, body func(worker, unit int)) {
	workers = max(1, min(workers, units))
	if workers == 1 {
		for u := range units {
			body(0, u)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				u := int(next.Add(1)) - 1
				if u >= units {
					return
				}
				body(w, u)
			}
		})
	}
	wg.Wait()
}

// mathOps binds the simd inner loops for one element type.
type mathOps[T kernels.Float] struct {
	gemm func(m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int)
	// gemmStore is C = A·B with the bits of gemm on a cleared C, without
	// reading C (simd.GemmNNStore32): the score tiles, which no longer
	// need clearing first.
	gemmStore func(m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int)
	expShift  func(x []T, shift T) T
	// softmaxRows is simd.SoftmaxRows32: the row maxima, shifts and
	// exponentials of a whole score tile in one call.
	softmaxRows func(rows, cols int, s []T, ld int, mOld, mNew, sum []T)
	max         func(x []T) T
	scale       func(x []T, a T)
	// gemmNT is C += A·Bᵀ (simd.GemmNT32), set only where it has a vector
	// path, float32 on AVX-512: elsewhere the decode's score product stays
	// the GEMM.
	gemmNT func(m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int)
}

func opsFor[T kernels.Float]() mathOps[T] {
	var zero T
	switch any(zero).(type) {
	case float32:
		ops := mathOps[float32]{gemm: simd.GemmNN32, gemmStore: simd.GemmNNStore32, expShift: simd.ExpShift32, softmaxRows: simd.SoftmaxRows32, max: simd.Max32, scale: simd.Scale32}
		if simd.GemmNTFast() {
			ops.gemmNT = simd.GemmNT32
		}
		return any(ops).(mathOps[T])
	default:
		return any(mathOps[float64]{gemm: simd.GemmNN64, gemmStore: simd.GemmNNStore64, expShift: simd.ExpShift64, softmaxRows: simd.SoftmaxRows64, max: simd.Max64, scale: simd.Scale64}).(mathOps[T])
	}
}

// transpose writes the rows×cols matrix src (row stride lds) into dst as
// cols×rows (row stride ldd).
func transpose[T kernels.Float](rows, cols int, src []T, lds int, dst []T, ldd int) {
	if s32, ok := any(src).([]float32); ok {
		simd.Transpose32(rows, cols, s32, lds, any(dst).([]float32), ldd)
		return
	}
	for r := range rows {
		for c, x := range src[r*lds : r*lds+cols] {
			dst[c*ldd+r] = x
		}
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// allFinite reports whether no element of x is ±Inf or NaN, from the bit
// patterns, two float32 (or one float64) per 64-bit word: with the sign
// cleared, a value is Inf or NaN exactly when its exponent is all ones,
// so adding the lowest such pattern minus the largest finite one (one unit
// of the exponent) carries into the sign bit exactly then, and no carry
// crosses from the low float32 into the high one. ORing the words and
// testing the sign bits once runs about twice as fast as a test and branch
// per element (the window's passes over V, Q and dO call it on every
// block).
func allFinite[T kernels.Float](x []T) bool {
	switch x := any(x).(type) {
	case []float32:
		var tail uint64
		if len(x)%2 == 1 {
			tail = uint64(math.Float32bits(x[len(x)-1]))
			x = x[:len(x)-1]
		}
		return orAddSigns(words(x), 0x7fffffff7fffffff, 0x0080000000800000)|
			(tail&0x7fffffff+0x00800000)&0x80000000 == 0
	case []float64:
		return orAddSigns(words(x), 0x7fffffffffffffff, 0x0010000000000000) == 0
	}
	panic("unreachable")
}

// words returns x's memory as 64-bit words (len(x)·size/8 of them).
func words[T kernels.Float](x []T) []uint64 {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&x[0])), len(x)*int(unsafe.Sizeof(x[0]))/8)
}

// orAddSigns returns the OR of (w & keep) + add over w, masked to the sign
// bits of keep's lanes (the bits keep clears): allFinite's test.
func orAddSigns(w []uint64, keep, add uint64) uint64 {
	var a0, a1, a2, a3 uint64
	i := 0
	for ; i+4 <= len(w); i += 4 {
		c := w[i : i+4 : i+4]
		a0 |= c[0]&keep + add
		a1 |= c[1]&keep + add
		a2 |= c[2]&keep + add
		a3 |= c[3]&keep + add
	}
	for ; i < len(w); i++ {
		a0 |= w[i]&keep + add
	}
	return (a0 | a1 | a2 | a3) &^ keep
}

func hasNaN[T kernels.Float](x []T) bool {
	for _, xi := range x {
		if xi != xi {
			return true
		}
	}
	return false
}
