// Template for the AVX-512F GEMM microkernel, instantiated by gemm_amd64.s
// for float32 and float64. The including file defines:
//
//	NAME   the TEXT symbol
//	LOGES  log2 of the element size in bytes
//	ES     the element size in bytes
//	VW     elements per zmm register (16 or 8)
//	MOVU   VMOVUPS or VMOVUPD (the masked moves need the element width)
//	BCAST  VBROADCASTSS or VBROADCASTSD
//	VFMA   VFMADD231PS or VFMADD231PD
//	VADD   VADDPS or VADDPD
//
// The kernel covers up to 8 rows of C and all n of its columns, 128 bytes
// (32 float32 or 16 float64, two zmm) at a time; the last partial block is
// loaded and stored under the opmasks K1 and K2. Accumulators Z0..Z15 hold
// the 8×2 zmm tile, Z16/Z17 the current row of B and Z18..Z25 the broadcast
// elements of A (one register per row, so that the renamer is never short).
//
// With STOREC defined the kernel sets C to the tile plus +0 and never reads
// C: the same bits as adding the tile to a cleared C (a sum of products
// that underflow below zero is −0, and −0 + +0 is +0).
//
// Rows beyond mr re-read the last valid row of A (their pointers are
// clamped), so the loop needs no per-row branch; their results are dropped
// when C is updated.
//
// Registers:
//	R8..R13, DX, SI  A row pointers (clamped), indexed by AX = p·ES
//	BX   cursor down the current column block of B (advances by ldb)
//	CX   ldb in bytes
//	DI   B at the current column block
//	R14  C at the current column block
//	R15  bytes of the row left to do
// Locals: kb (k in bytes), k4b (kb rounded down to 4 elements), ldcb.

#define STEP(off) \
	VMOVUPS (BX), Z16; \
	VMOVUPS 64(BX), Z17; \
	ADDQ    CX, BX; \
	BCAST   (off)(R8)(AX*1), Z18; \
	BCAST   (off)(R9)(AX*1), Z19; \
	VFMA    Z16, Z18, Z0; \
	VFMA    Z17, Z18, Z1; \
	BCAST   (off)(R10)(AX*1), Z20; \
	VFMA    Z16, Z19, Z2; \
	VFMA    Z17, Z19, Z3; \
	BCAST   (off)(R11)(AX*1), Z21; \
	VFMA    Z16, Z20, Z4; \
	VFMA    Z17, Z20, Z5; \
	BCAST   (off)(R12)(AX*1), Z22; \
	VFMA    Z16, Z21, Z6; \
	VFMA    Z17, Z21, Z7; \
	BCAST   (off)(R13)(AX*1), Z23; \
	VFMA    Z16, Z22, Z8; \
	VFMA    Z17, Z22, Z9; \
	BCAST   (off)(DX)(AX*1), Z24; \
	VFMA    Z16, Z23, Z10; \
	VFMA    Z17, Z23, Z11; \
	BCAST   (off)(SI)(AX*1), Z25; \
	VFMA    Z16, Z24, Z12; \
	VFMA    Z17, Z24, Z13; \
	VFMA    Z16, Z25, Z14; \
	VFMA    Z17, Z25, Z15

// MSTEP is STEP for the partial last block: B is loaded under K1/K2 with
// zeroing, so elements past the row's end are neither read nor used.
#define MSTEP \
	MOVU.Z (BX), K1, Z16; \
	MOVU.Z 64(BX), K2, Z17; \
	ADDQ   CX, BX; \
	BCAST  (R8)(AX*1), Z18; \
	BCAST  (R9)(AX*1), Z19; \
	VFMA   Z16, Z18, Z0; \
	VFMA   Z17, Z18, Z1; \
	BCAST  (R10)(AX*1), Z20; \
	VFMA   Z16, Z19, Z2; \
	VFMA   Z17, Z19, Z3; \
	BCAST  (R11)(AX*1), Z21; \
	VFMA   Z16, Z20, Z4; \
	VFMA   Z17, Z20, Z5; \
	BCAST  (R12)(AX*1), Z22; \
	VFMA   Z16, Z21, Z6; \
	VFMA   Z17, Z21, Z7; \
	BCAST  (R13)(AX*1), Z23; \
	VFMA   Z16, Z22, Z8; \
	VFMA   Z17, Z22, Z9; \
	BCAST  (DX)(AX*1), Z24; \
	VFMA   Z16, Z23, Z10; \
	VFMA   Z17, Z23, Z11; \
	BCAST  (SI)(AX*1), Z25; \
	VFMA   Z16, Z24, Z12; \
	VFMA   Z17, Z24, Z13; \
	VFMA   Z16, Z25, Z14; \
	VFMA   Z17, Z25, Z15

// HSTEP is MSTEP for a last block of at most one zmm: B under K1 alone,
// and only the even accumulators.
#define HSTEP \
	MOVU.Z (BX), K1, Z16; \
	ADDQ   CX, BX; \
	BCAST  (R8)(AX*1), Z18; \
	BCAST  (R9)(AX*1), Z19; \
	VFMA   Z16, Z18, Z0; \
	BCAST  (R10)(AX*1), Z20; \
	VFMA   Z16, Z19, Z2; \
	BCAST  (R11)(AX*1), Z21; \
	VFMA   Z16, Z20, Z4; \
	BCAST  (R12)(AX*1), Z22; \
	VFMA   Z16, Z21, Z6; \
	BCAST  (R13)(AX*1), Z23; \
	VFMA   Z16, Z22, Z8; \
	BCAST  (DX)(AX*1), Z24; \
	VFMA   Z16, Z23, Z10; \
	BCAST  (SI)(AX*1), Z25; \
	VFMA   Z16, Z24, Z12; \
	VFMA   Z16, Z25, Z14

#define ZERO16 \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3; \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPXORD Z6, Z6, Z6; \
	VPXORD Z7, Z7, Z7; \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
	VPXORD Z10, Z10, Z10; \
	VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; \
	VPXORD Z13, Z13, Z13; \
	VPXORD Z14, Z14, Z14; \
	VPXORD Z15, Z15, Z15

// PREFETCHROW asks for one row's two lines at BX and steps BX to the next.
#define PREFETCHROW \
	PREFETCHT0 (BX); \
	PREFETCHT0 64(BX); \
	ADDQ       ldcb-24(SP), BX

// PREFETCHC asks for the block's 8 rows of C (two lines each; rows past mr
// are harmless, as prefetches never fault) before the k loop, so that they
// arrive while it runs: UPDATE reads C only after the loop, and stalled
// there on a C that had left the caches. The attention backward's dQᵀ part
// (32 KiB a tile at D = 128, swept once per key block) is such a C: its
// product took up to 1.4 times as long as the backward's other products of
// its size in a profile, about 1.1 times with the prefetch (bench/RESULTS.md,
// 2026-12-04). The STOREC form never reads C and does without: prefetching
// the C it writes measured no better.
#define PREFETCHC \
	MOVQ R14, BX; \
	PREFETCHROW; \
	PREFETCHROW; \
	PREFETCHROW; \
	PREFETCHROW; \
	PREFETCHROW; \
	PREFETCHROW; \
	PREFETCHROW; \
	PREFETCHT0 (BX); \
	PREFETCHT0 64(BX)

// UPDATE adds one tile row to C at (BX); with STOREC it stores the row
// plus Z26 = +0 there instead, without reading C.
#ifdef STOREC
#define UPDATE(lo, hi) \
	VADD    Z26, lo, lo; \
	VMOVUPS lo, (BX); \
	VADD    Z26, hi, hi; \
	VMOVUPS hi, 64(BX)
#else
#define UPDATE(lo, hi) \
	VADD    (BX), lo, lo; \
	VMOVUPS lo, (BX); \
	VADD    64(BX), hi, hi; \
	VMOVUPS hi, 64(BX)
#endif

// MUPDATE is UPDATE under K1 and K2 (Z16 is scratch).
#ifdef STOREC
#define MUPDATE(lo, hi) \
	VADD Z26, lo, lo; \
	MOVU lo, K1, (BX); \
	VADD Z26, hi, hi; \
	MOVU hi, K2, 64(BX)
#else
#define MUPDATE(lo, hi) \
	MOVU.Z (BX), K1, Z16; \
	VADD   Z16, lo, lo; \
	MOVU   lo, K1, (BX); \
	MOVU.Z 64(BX), K2, Z16; \
	VADD   Z16, hi, hi; \
	MOVU   hi, K2, 64(BX)
#endif

// HUPDATE is MUPDATE for the half block (hi is unused).
#ifdef STOREC
#define HUPDATE(lo, hi) \
	VADD Z26, lo, lo; \
	MOVU lo, K1, (BX)
#else
#define HUPDATE(lo, hi) \
	MOVU.Z (BX), K1, Z16; \
	VADD   Z16, lo, lo; \
	MOVU   lo, K1, (BX)
#endif

// ROWS applies U (UPDATE or MUPDATE) to the first mr tile rows, then falls
// through or jumps to next.
#define ROWS(U, next) \
	MOVQ R14, BX; \
	U(Z0, Z1); \
	CMPQ mr+0(FP), $2; \
	JLT  next; \
	ADDQ ldcb-24(SP), BX; \
	U(Z2, Z3); \
	CMPQ mr+0(FP), $3; \
	JLT  next; \
	ADDQ ldcb-24(SP), BX; \
	U(Z4, Z5); \
	CMPQ mr+0(FP), $4; \
	JLT  next; \
	ADDQ ldcb-24(SP), BX; \
	U(Z6, Z7); \
	CMPQ mr+0(FP), $5; \
	JLT  next; \
	ADDQ ldcb-24(SP), BX; \
	U(Z8, Z9); \
	CMPQ mr+0(FP), $6; \
	JLT  next; \
	ADDQ ldcb-24(SP), BX; \
	U(Z10, Z11); \
	CMPQ mr+0(FP), $7; \
	JLT  next; \
	ADDQ ldcb-24(SP), BX; \
	U(Z12, Z13); \
	CMPQ mr+0(FP), $8; \
	JLT  next; \
	ADDQ ldcb-24(SP), BX; \
	U(Z14, Z15)

TEXT NAME(SB), NOSPLIT, $24-72
#ifdef STOREC
	VPXORD Z26, Z26, Z26
#endif
	// Row pointers of A: row i is a + min(i, mr-1)·lda.
	MOVQ    mr+0(FP), AX
	MOVQ    lda+32(FP), BX
	SHLQ    $LOGES, BX
	MOVQ    a+24(FP), R8
	LEAQ    (R8)(BX*1), R9
	CMPQ    AX, $2
	CMOVQLT R8, R9
	LEAQ    (R9)(BX*1), R10
	CMPQ    AX, $3
	CMOVQLT R9, R10
	LEAQ    (R10)(BX*1), R11
	CMPQ    AX, $4
	CMOVQLT R10, R11
	LEAQ    (R11)(BX*1), R12
	CMPQ    AX, $5
	CMOVQLT R11, R12
	LEAQ    (R12)(BX*1), R13
	CMPQ    AX, $6
	CMOVQLT R12, R13
	LEAQ    (R13)(BX*1), DX
	CMPQ    AX, $7
	CMOVQLT R13, DX
	LEAQ    (DX)(BX*1), SI
	CMPQ    AX, $8
	CMOVQLT DX, SI

	MOVQ ldc+64(FP), AX
	SHLQ $LOGES, AX
	MOVQ AX, ldcb-24(SP)
	MOVQ k+16(FP), AX
	SHLQ $LOGES, AX
	MOVQ AX, kb-8(SP)
	ANDQ $(-4*ES), AX
	MOVQ AX, k4b-16(SP)
	MOVQ ldb+48(FP), CX
	SHLQ $LOGES, CX
	MOVQ n+8(FP), R15
	SHLQ $LOGES, R15
	MOVQ b+40(FP), DI
	MOVQ c+56(FP), R14

block:
	CMPQ R15, $128
	JLT  tail
	ZERO16
#ifndef STOREC
	PREFETCHC
#endif
	MOVQ DI, BX
	XORQ AX, AX
	CMPQ AX, k4b-16(SP)
	JGE  k1

k4:
	STEP(0)
	STEP(ES)
	STEP(2*ES)
	STEP(3*ES)
	ADDQ $(4*ES), AX
	CMPQ AX, k4b-16(SP)
	JLT  k4

k1:
	CMPQ AX, kb-8(SP)
	JGE  update
	STEP(0)
	ADDQ $ES, AX
	JMP  k1

update:
	ROWS(UPDATE, next)

next:
	ADDQ $128, DI
	ADDQ $128, R14
	SUBQ $128, R15
	JMP  block

tail:
	TESTQ R15, R15
	JEQ   done

	// K1 and K2 select the first t = R15/ES elements of the block.
	MOVQ  R15, CX
	SHRQ  $LOGES, CX
	MOVQ  $1, BX
	SHLQ  CX, BX
	DECQ  BX
	KMOVW BX, K1
	SHRQ  $VW, BX
	KMOVW BX, K2
	MOVQ  ldb+48(FP), CX
	SHLQ  $LOGES, CX

	ZERO16
	MOVQ DI, BX
	XORQ AX, AX
	CMPQ R15, $64
	JLE  h1

t1:
	CMPQ AX, kb-8(SP)
	JGE  tupdate
	MSTEP
	ADDQ $ES, AX
	JMP  t1

tupdate:
	ROWS(MUPDATE, done)
	JMP done

h1:
	// At most one zmm is left: half the work of the two-register tail.
	CMPQ AX, kb-8(SP)
	JGE  hupdate
	HSTEP
	ADDQ $ES, AX
	JMP  h1

hupdate:
	ROWS(HUPDATE, done)

done:
	VZEROUPPER
	RET

#undef STEP
#undef MSTEP
#undef ZERO16
#undef UPDATE
#undef MUPDATE
#undef HSTEP
#undef HUPDATE
#undef ROWS
#undef PREFETCHC
#undef PREFETCHROW
