// Package simd holds the inner loops of the CPU attention kernels: a small
// row-major GEMM (C += A·B), a shifted exponential with its sum, and the
// row maximum and scaling of online softmax, for float32 and float64;
// element-wise sums, differences and products (Add, Sub, Mul: the ALiBi
// terms, bias rows and bias gradients of the variants), the backward's
// scale·dS (ScaledProduct32), 8×8-block transposes (Transpose32,
// AddTransposed32, TransposeBits32: bias tiles, dBias tiles, dropout's
// words by keys); and Philox16 and Philox32, sixteen or thirty-two
// Philox4x32-10 blocks at once for attention dropout's mask
// (kernels.Dropout). Philox32 mixes two sets of 16 under one key, so that
// each round's products overlap: 0.30 against 0.44 ns per word on the
// development machine.
//
// Philox16 and Philox32 are the routines without a portable loop here:
// they exist on AVX-512 and, 8 counters per pass, on AVX2 (elsewhere, and
// with noasm, they report false and kernels.Dropout computes the blocks
// itself, the scalar definition its tests pin), and their tests compare
// them word for word with a scalar Philox. The element-wise helpers,
// ScaledProduct32 and the transposes are exact IEEE operations in a fixed
// order (no fused multiply-add), so their tests require the portable
// loops' bits; the element-wise ones have AVX-512 and AVX2 paths,
// ScaledProduct32 AVX-512 ones and AVX2 without the softcap's factor (see
// product_amd64.go), the transposes AVX2 ones.
//
// DropScale32, which applies dropout's mask from its Philox words, has
// AVX-512 and AVX2 paths (the portable loop elsewhere); it is exact IEEE
// operations per element, and its test requires the portable loop's bits.
// Softcap32, the attention softcap in float32, has an AVX-512
// path only too; it is within 4 ulp of c·tanh(s/c) (the portable loop
// rounds a float64 tanh once). A vector whose 16 lanes are all below the
// polynomial's threshold skips the exponential branch, with the same bits
// as beside a lane above it (TestSoftcap32PolynomialPath).
//
// # Paths and dispatch
//
// Every function has a portable Go loop (gemmNNGeneric, expShiftGeneric,
// maxGeneric, scaleGeneric) that always compiles, is always tested, and
// defines what the fast paths compute. On amd64 two assembly paths exist,
// chosen once at start-up from golang.org/x/sys/cpu:
//
//   - AVX-512F (with AVX2 and FMA), when the CPU and OS support zmm and
//     opmask state: GEMM microkernel of 8 rows × 2 zmm (32 float32 or 16
//     float64 columns), opmask tails.
//   - AVX2 with FMA otherwise: GEMM microkernel of 6 rows × 2 ymm (16 float32
//     or 8 float64 columns), VMASKMOV tails.
//   - The portable loops on CPUs with neither, on other architectures, and
//     with the build tag noasm (go test -tags noasm runs the portable code
//     alone).
//
// The tests run the portable loop and every assembly path the CPU has
// against the same float64 reference, so one test binary run on an
// AVX-512 machine covers all three.
//
// # GEMM
//
// GemmNN32 and GemmNN64 take row-major matrices with explicit row strides
// (lda ≥ k, ldb ≥ n, ldc ≥ n where there is more than one row) and any
// m, n, k ≥ 0. The Go driver cuts C
// into row panels of the microkernel's height (and, only for a B over
// 256 KiB, into column blocks too); the kernel walks the columns two vector
// registers at a time, keeps the tile in registers for the whole k loop
// (unrolled by 4), then adds it to C. A short last panel
// re-reads its last valid row of A instead of branching, and drops those
// rows when storing; a short last column block is loaded and stored under
// a mask, so C outside the m×n window is never read or written and no load
// runs past the end of a slice. A and B are not packed: the attention
// blocks they come from fit in L1/L2.
//
// The sum over p is in a fixed order, so results are deterministic. Every
// path accumulates Σ_p a_ip·b_pj from zero and adds C at the end, so a C
// preloaded with a bias gets the bias added to the finished sum, as a
// separate add would (TestGemmAddsCAfterTheSum pins that order). The
// assembly fuses each multiply-add and the portable loop does not, so
// their results differ in the last bits; both are within the classic
// error bound of a k-term dot product, (k+2)·u·(|c| + Σ|a·b|) as the
// tests check it.
//
// GemmNNStore32 and GemmNNStore64 set C = A·B instead, with exactly the
// bits GemmNN leaves in a C of zeros (a sum of underflowing negative
// products is −0, and −0 + 0 is +0), without reading C, so that the
// attention kernels' score tiles need no clearing pass and the kernel no
// loads of the zeros: on AVX-512 a form of the microkernel that adds +0
// and stores (TestGemmNNStore writes over NaN), elsewhere the window is
// cleared and added to.
//
// # GEMM with B transposed
//
// GemmNT32 computes C += A·Bᵀ with B stored n×k by rows: the decode step's
// scores S = Q·Kᵀ for a few query rows against cached keys where they
// lie. GemmNN32 on the transposed product vectorises along the few rows;
// GemmNT32's AVX-512 path vectorises along B's rows instead: it loads a
// tile of 16 rows × 16 columns, transposes it in registers (64 shuffles),
// and runs each column into the accumulators of 4 rows of A with the
// element of A broadcast from memory. Each element of C is the same chain
// of fused multiply-adds in ascending p as GemmNN32's, so the two give
// identical bits (the tests require it): the attention backward
// recomputes scores with GemmNN32 against the forward's LSE, and a
// different summation order would put its rounding into exp(S − LSE).
// With 128 keys of D = 128 it is 4× the GEMM at 4 rows of A and 2× at 8,
// and slower from 16 (BenchmarkGemmNT32). Its only vector path is
// AVX-512; GemmNTFast reports it.
//
// # Exponential
//
// ExpShift32 and ExpShift64 replace x[i] by exp(x[i] − shift) and return
// the sum. The assembly reduces y = x − shift to r = y − n·ln2 with
// |r| ≤ ln2/2 (Cody–Waite, two-part ln2), evaluates a polynomial with
// Horner's rule, and scales it by 2^n: AVX2 adds n to the exponent field
// and handles the special cases with comparisons and blends; AVX-512
// rounds with VRNDSCALE and scales with VSCALEF, which overflows to +Inf
// by itself, and needs one comparison for the lanes to flush. The
// polynomials: the Taylor series of degree 13 for float64 and of degree 7
// for float32 on AVX2 (truncation far below an ulp), and for float32 on
// AVX-512 one of degree 5 fitted for the least error in ulps. Measured
// against math.Exp over a dense sweep of [-100, 0]: below 1 ulp for
// float32 on AVX2, 2 ulp (4.4e-16 relative) for float64; float32 on
// AVX-512 is within 1.89 ulp over every float32 argument. Special cases:
// x = −Inf gives exactly 0; results below 2^-125 (float32) or 2^-1021
// (float64) flush to 0, so no subnormal is ever produced; overflow gives
// +Inf; NaN gives NaN. The sum is kept in vector lanes and reduced in a
// fixed order.
//
// SoftmaxRows32 is one online-softmax step of a whole score tile: each
// row's maximum (Max32), its shift against the running maximum, and its
// exponential and sum (ExpShift32) with the bits of those calls, in one
// call on AVX-512 rather than two per row.
//
// # Speed
//
// Measured with the package benchmarks on one core, in GFLOP/s as
// float32/float64 (the shared machines vary by up to 20% between runs).
// Sapphire Rapids Xeon, AVX-512 path, where an FMA-only loop peaks at
// 173/86: 64×64×64 149/79, 64×128×64 158/61, 128×64×128 141/56,
// 128×128×128 167/83, 64×64×256 168/66, 32×40×64 83/73, 113×113×113
// 126/69. Its AVX2 path: 55-84/31-40. AMD EPYC (Zen 3), AVX2 path:
// 60-85/31-38, with an FMA-only peak of about 93/46 (FMAPeak32 measures
// the float32 one on the path the package takes). The portable loops
// run at 1-2. The exponential ran at 3.0/0.96 elements per ns (AVX-512)
// and 1.7/0.65 (AVX2) on the Xeon before float32's AVX-512 form took
// VSCALEF and a degree-5 polynomial (2026-12-06); on the development
// machine's Zen 5 that form runs 6.4 elements per ns at n = 4096 against
// 4.9 before (BenchmarkExpShift32, one core).
//
// # Aliasing and panics
//
// The GEMM requires that C share no memory with A or B. GemmNN32 and
// GemmNN64 panic on negative dimensions, strides below the row length, or
// slices too short for their matrices; they are internal routines and
// such calls are programming errors.
package simd
