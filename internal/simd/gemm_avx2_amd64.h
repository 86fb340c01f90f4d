// Template for the AVX2+FMA GEMM microkernel, instantiated by gemm_amd64.s
// for float32 and float64. The including file defines:
//
//	NAME     the TEXT symbol
//	LOGES    log2 of the element size in bytes
//	ES       the element size in bytes
//	BCAST    VBROADCASTSS or VBROADCASTSD
//	VFMA     VFMADD231PS or VFMADD231PD
//	VADD     VADDPS or VADDPD
//	VMASKMOV VMASKMOVPS or VMASKMOVPD
//
// The kernel covers up to 6 rows of C and all n of its columns, 64 bytes
// (16 float32 or 8 float64, two ymm) at a time; the last partial block uses
// VMASKMOV so that nothing outside the row's n elements is read or written.
// Accumulators Y0..Y11 hold the 6×2 ymm tile, Y12/Y13 the current row of B
// and Y14/Y15 the broadcast elements of A.
//
// Rows beyond mr re-read the last valid row of A (their pointers are
// clamped), so the loop needs no per-row branch; their results are dropped
// when C is updated.
//
// Registers:
//	R8..R13  A row pointers (clamped), indexed by AX = p·ES
//	BX       cursor down the current column block of B (advances by ldb)
//	CX       ldb in bytes
//	DX       k rounded down to a multiple of 4, in bytes
//	SI       k in bytes
//	DI       B at the current column block
//	R14      C at the current column block
//	R15      bytes of the row left to do; in the tail, the mask pointer

// step does one p of the k loop: C tile += A[:, p] ⊗ B[p, block].
#define STEP(off) \
	VMOVUPS (BX), Y12; \
	VMOVUPS 32(BX), Y13; \
	ADDQ    CX, BX; \
	BCAST   (off)(R8)(AX*1), Y14; \
	VFMA    Y12, Y14, Y0; \
	VFMA    Y13, Y14, Y1; \
	BCAST   (off)(R9)(AX*1), Y15; \
	VFMA    Y12, Y15, Y2; \
	VFMA    Y13, Y15, Y3; \
	BCAST   (off)(R10)(AX*1), Y14; \
	VFMA    Y12, Y14, Y4; \
	VFMA    Y13, Y14, Y5; \
	BCAST   (off)(R11)(AX*1), Y15; \
	VFMA    Y12, Y15, Y6; \
	VFMA    Y13, Y15, Y7; \
	BCAST   (off)(R12)(AX*1), Y14; \
	VFMA    Y12, Y14, Y8; \
	VFMA    Y13, Y14, Y9; \
	BCAST   (off)(R13)(AX*1), Y15; \
	VFMA    Y12, Y15, Y10; \
	VFMA    Y13, Y15, Y11

// MSTEP is STEP for the partial last block: B is loaded under the masks at
// (R15) and 32(R15), so bytes past the row's end are neither read nor used.
#define MSTEP \
	VMOVDQU  (R15), Y14; \
	VMASKMOV (BX), Y14, Y12; \
	VMOVDQU  32(R15), Y15; \
	VMASKMOV 32(BX), Y15, Y13; \
	ADDQ     CX, BX; \
	BCAST    (R8)(AX*1), Y14; \
	VFMA     Y12, Y14, Y0; \
	VFMA     Y13, Y14, Y1; \
	BCAST    (R9)(AX*1), Y15; \
	VFMA     Y12, Y15, Y2; \
	VFMA     Y13, Y15, Y3; \
	BCAST    (R10)(AX*1), Y14; \
	VFMA     Y12, Y14, Y4; \
	VFMA     Y13, Y14, Y5; \
	BCAST    (R11)(AX*1), Y15; \
	VFMA     Y12, Y15, Y6; \
	VFMA     Y13, Y15, Y7; \
	BCAST    (R12)(AX*1), Y14; \
	VFMA     Y12, Y14, Y8; \
	VFMA     Y13, Y14, Y9; \
	BCAST    (R13)(AX*1), Y15; \
	VFMA     Y12, Y15, Y10; \
	VFMA     Y13, Y15, Y11

// HSTEP is MSTEP for a last block of at most 32 bytes: one ymm of B per
// step, loaded under the mask kept in Y13, and only the even accumulators.
#define HSTEP \
	VMASKMOV (BX), Y13, Y12; \
	ADDQ     CX, BX; \
	BCAST    (R8)(AX*1), Y14; \
	VFMA     Y12, Y14, Y0; \
	BCAST    (R9)(AX*1), Y15; \
	VFMA     Y12, Y15, Y2; \
	BCAST    (R10)(AX*1), Y14; \
	VFMA     Y12, Y14, Y4; \
	BCAST    (R11)(AX*1), Y15; \
	VFMA     Y12, Y15, Y6; \
	BCAST    (R12)(AX*1), Y14; \
	VFMA     Y12, Y14, Y8; \
	BCAST    (R13)(AX*1), Y15; \
	VFMA     Y12, Y15, Y10

#define ZERO12 \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7; \
	VXORPS Y8, Y8, Y8; \
	VXORPS Y9, Y9, Y9; \
	VXORPS Y10, Y10, Y10; \
	VXORPS Y11, Y11, Y11

// UPDATE adds one tile row to C at (BX).
#define UPDATE(lo, hi) \
	VADD    (BX), lo, lo; \
	VMOVUPS lo, (BX); \
	VADD    32(BX), hi, hi; \
	VMOVUPS hi, 32(BX)

// MUPDATE is UPDATE under the masks in Y12 and Y13 (Y14 is scratch).
#define MUPDATE(lo, hi) \
	VMASKMOV (BX), Y12, Y14; \
	VADD     Y14, lo, lo; \
	VMASKMOV lo, Y12, (BX); \
	VMASKMOV 32(BX), Y13, Y14; \
	VADD     Y14, hi, hi; \
	VMASKMOV hi, Y13, 32(BX)

// HUPDATE is MUPDATE for the half block: the mask is in Y13, hi is unused.
#define HUPDATE(lo, hi) \
	VMASKMOV (BX), Y13, Y14; \
	VADD     Y14, lo, lo; \
	VMASKMOV lo, Y13, (BX)

// ROWS applies U (UPDATE or MUPDATE) to the first mr tile rows, then jumps
// to next.
#define ROWS(U, next) \
	MOVQ R14, BX; \
	U(Y0, Y1); \
	CMPQ mr+0(FP), $2; \
	JLT  next; \
	ADDQ ldcb-8(SP), BX; \
	U(Y2, Y3); \
	CMPQ mr+0(FP), $3; \
	JLT  next; \
	ADDQ ldcb-8(SP), BX; \
	U(Y4, Y5); \
	CMPQ mr+0(FP), $4; \
	JLT  next; \
	ADDQ ldcb-8(SP), BX; \
	U(Y6, Y7); \
	CMPQ mr+0(FP), $5; \
	JLT  next; \
	ADDQ ldcb-8(SP), BX; \
	U(Y8, Y9); \
	CMPQ mr+0(FP), $6; \
	JLT  next; \
	ADDQ ldcb-8(SP), BX; \
	U(Y10, Y11)

TEXT NAME(SB), NOSPLIT, $8-72
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

	MOVQ ldc+64(FP), AX
	SHLQ $LOGES, AX
	MOVQ AX, ldcb-8(SP)
	MOVQ ldb+48(FP), CX
	SHLQ $LOGES, CX
	MOVQ k+16(FP), SI
	SHLQ $LOGES, SI
	MOVQ SI, DX
	ANDQ $(-4*ES), DX
	MOVQ n+8(FP), R15
	SHLQ $LOGES, R15
	MOVQ b+40(FP), DI
	MOVQ c+56(FP), R14

block:
	CMPQ R15, $64
	JLT  tail
	ZERO12
	MOVQ DI, BX
	XORQ AX, AX
	CMPQ AX, DX
	JGE  k1

k4:
	STEP(0)
	STEP(ES)
	STEP(2*ES)
	STEP(3*ES)
	ADDQ $(4*ES), AX
	CMPQ AX, DX
	JLT  k4

k1:
	CMPQ AX, SI
	JGE  update
	STEP(0)
	ADDQ $ES, AX
	JMP  k1

update:
	ROWS(UPDATE, next)

next:
	ADDQ $64, DI
	ADDQ $64, R14
	SUBQ $64, R15
	JMP  block

tail:
	TESTQ R15, R15
	JEQ   done
	LEAQ  maskTable<>+64(SB), BX
	SUBQ  R15, BX
	CMPQ  R15, $32
	MOVQ  BX, R15
	JLE   half
	ZERO12
	MOVQ  DI, BX
	XORQ  AX, AX

t1:
	CMPQ AX, SI
	JGE  tupdate
	MSTEP
	ADDQ $ES, AX
	JMP  t1

tupdate:
	VMOVDQU (R15), Y12
	VMOVDQU 32(R15), Y13
	ROWS(MUPDATE, done)
	JMP done

half:
	// At most 32 bytes are left: half the work of the two-register tail.
	VMOVDQU (R15), Y13
	ZERO12
	MOVQ    DI, BX
	XORQ    AX, AX

h1:
	CMPQ AX, SI
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
#undef ZERO12
#undef UPDATE
#undef MUPDATE
#undef HSTEP
#undef HUPDATE
#undef ROWS
