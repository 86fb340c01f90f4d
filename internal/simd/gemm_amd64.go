//go:build !noasm

package simd

import "unsafe"

// Microkernel tile heights (rows of C per kernel call). The widths are two
// vector registers: 16 float32 or 8 float64 for AVX2, 32 or 16 for AVX-512.
const (
	mrAVX2   = 6
	mrAVX512 = 8
)

// gemmKernel32AVX2 updates mr ≤ 6 rows of C, all n columns:
//
//	for i < mr, j < n: c[i*ldc+j] += Σ_{p<k} a[i*lda+p] · b[p*ldb+j]
//
// with p ascending, one fused multiply-add per term into a zeroed
// accumulator, and C added once at the end. Strides are in elements.
//
//go:noescape
func gemmKernel32AVX2(mr, n, k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)

// gemmKernel64AVX2 is gemmKernel32AVX2 for float64.
//
//go:noescape
func gemmKernel64AVX2(mr, n, k int, a *float64, lda int, b *float64, ldb int, c *float64, ldc int)

// gemmKernel32AVX512 computes the same loop as gemmKernel32AVX2 for
// mr ≤ 8 rows.
//
//go:noescape
func gemmKernel32AVX512(mr, n, k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)

// gemmKernel64AVX512 is gemmKernel32AVX512 for float64.
//
//go:noescape
func gemmKernel64AVX512(mr, n, k int, a *float64, lda int, b *float64, ldb int, c *float64, ldc int)

// gemmKernel32AVX512Store is gemmKernel32AVX512 setting C to the tile
// (plus +0, so the same bits as adding it to zeros) without reading C.
//
//go:noescape
func gemmKernel32AVX512Store(mr, n, k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)

// gemmKernel64AVX512Store is gemmKernel32AVX512Store for float64.
//
//go:noescape
func gemmKernel64AVX512Store(mr, n, k int, a *float64, lda int, b *float64, ldb int, c *float64, ldc int)

func gemm32(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	switch {
	case hasAVX512:
		gemm32AVX512(m, n, k, a, lda, b, ldb, c, ldc)
	case hasAVX2:
		gemm32AVX2(m, n, k, a, lda, b, ldb, c, ldc)
	default:
		gemmNNGeneric(m, n, k, a, lda, b, ldb, c, ldc)
	}
}

func gemm64(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	switch {
	case hasAVX512:
		gemm64AVX512(m, n, k, a, lda, b, ldb, c, ldc)
	case hasAVX2:
		gemm64AVX2(m, n, k, a, lda, b, ldb, c, ldc)
	default:
		gemmNNGeneric(m, n, k, a, lda, b, ldb, c, ldc)
	}
}

// The drivers below expect checkGemm to have passed and m, n, k > 0.
//
// Each kernel call covers one row panel (up to the kernel's height) and a
// range of columns, which it walks one register-tile width at a time. By
// default one call per row panel sweeps all of n, so B is re-read from L1
// or L2 for every panel. Only when B is larger than bSweepMax does the
// driver go column block by column block instead, so that the k×nr panel
// of B stays in L1 while the row panels of A (a quarter or less of B's
// traffic per step) stream past it.
//
// On a Sapphire Rapids Xeon (2 MiB L2) the row-panel sweep was as fast as
// or faster than the column-block order for every attention shape measured
// (B up to 128 KiB, e.g. 128×128×128 float32: 167 vs 137 GFLOP/s); on Zen 3
// the two were within noise. The column-block order is kept for B beyond
// what L2 holds comfortably.
const bSweepMax = 256 << 10

// gemmDrive runs kern over C in row panels of mr rows and, if B is larger
// than bSweepMax, column blocks of nr columns.
func gemmDrive[T float32 | float64](kern func(mr, n, k int, a *T, lda int, b *T, ldb int, c *T, ldc int),
	mr, nr, m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int) {
	var zero T
	if k*n*int(unsafe.Sizeof(zero)) <= bSweepMax {
		for i := 0; i < m; i += mr {
			kern(min(mr, m-i), n, k, &a[i*lda], lda, &b[0], ldb, &c[i*ldc], ldc)
		}
		return
	}
	for j := 0; j < n; j += nr {
		nb := min(nr, n-j)
		for i := 0; i < m; i += mr {
			kern(min(mr, m-i), nb, k, &a[i*lda], lda, &b[j], ldb, &c[i*ldc+j], ldc)
		}
	}
}

func gemm32AVX2(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	gemmDrive(gemmKernel32AVX2, mrAVX2, 16, m, n, k, a, lda, b, ldb, c, ldc)
}

func gemm64AVX2(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	gemmDrive(gemmKernel64AVX2, mrAVX2, 8, m, n, k, a, lda, b, ldb, c, ldc)
}

// gemmWide32AVX512 is gemmKernel32AVX512 for mr ≤ wideRows rows and n a
// multiple of 64, four zmm of each row at a time (gemmwide_amd64.s), with
// the same bits.
//
//go:noescape
func gemmWide32AVX512(mr, n, k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)

// wideRows is the most rows of C that gemm32AVX512 hands to the wide
// kernel. A product of few rows (the decode's P·V: a key head's group of
// query rows against a block of values) is a stream through B; at two zmm
// per sweep the narrow kernel walks each 512-byte row of B (D = 128) four
// times, a quarter of its lines per sweep, where the wide one walks it
// twice, half of them contiguous each time.
const wideRows = 4

func gemm32AVX512(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if nw := n &^ 63; m <= wideRows && nw > 0 && k*n*4 <= bSweepMax {
		gemmWide32AVX512(m, nw, k, &a[0], lda, &b[0], ldb, &c[0], ldc)
		if nw < n {
			gemmKernel32AVX512(m, n-nw, k, &a[0], lda, &b[nw], ldb, &c[nw], ldc)
		}
		return
	}
	gemmDrive(gemmKernel32AVX512, mrAVX512, 32, m, n, k, a, lda, b, ldb, c, ldc)
}

func gemm64AVX512(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	gemmDrive(gemmKernel64AVX512, mrAVX512, 16, m, n, k, a, lda, b, ldb, c, ldc)
}

// gemmStore32 is GemmNNStore32's driver: the Store kernel on AVX-512, except
// where gemm32AVX512 takes the wide kernel (few rows), which has no Store
// form; elsewhere C's window is cleared and added to.
func gemmStore32(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if hasAVX512 && (m > wideRows || n < 64 || k*n*4 > bSweepMax) {
		gemmDrive(gemmKernel32AVX512Store, mrAVX512, 32, m, n, k, a, lda, b, ldb, c, ldc)
		return
	}
	clearWindow(m, n, c, ldc)
	gemm32(m, n, k, a, lda, b, ldb, c, ldc)
}

func gemmStore64(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	if hasAVX512 {
		gemmDrive(gemmKernel64AVX512Store, mrAVX512, 16, m, n, k, a, lda, b, ldb, c, ldc)
		return
	}
	clearWindow(m, n, c, ldc)
	gemm64(m, n, k, a, lda, b, ldb, c, ldc)
}
