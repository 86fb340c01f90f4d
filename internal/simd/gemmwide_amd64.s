//go:build !noasm

#include "textflag.h"

// gemmWide32AVX512: the AVX-512F float32 GEMM microkernel for at most 4
// rows of C (gemm_amd64.go), 256 bytes of C's columns (64 float32, four
// zmm) at a time; n is a multiple of 64. Accumulators Z0..Z15 hold the 4×4
// zmm tile, Z16..Z19 the current row's run of B, Z20..Z23 the broadcast
// elements of A. Each element is summed as in gemmKernel32AVX512 (one
// fused multiply-add per term, p ascending, into a zeroed accumulator, C
// added once at the end), so the two give the same bits.
//
// Rows beyond mr re-read the last valid row of A (their pointers are
// clamped); their results are dropped when C is updated.
//
// Registers:
//	R8..R11  A row pointers (clamped), indexed by AX = p·4
//	BX   cursor down the current column block of B (advances by ldb)
//	CX   ldb in bytes
//	DI   B at the current column block
//	R14  C at the current column block
//	R15  bytes of the row left to do
// Locals: kb (k in bytes), k4b (kb rounded down to 4 elements), ldcb.

#define WSTEP(off) \
	VMOVUPS      (BX), Z16; \
	VMOVUPS      64(BX), Z17; \
	VMOVUPS      128(BX), Z18; \
	VMOVUPS      192(BX), Z19; \
	ADDQ         CX, BX; \
	VBROADCASTSS (off)(R8)(AX*1), Z20; \
	VBROADCASTSS (off)(R9)(AX*1), Z21; \
	VFMADD231PS  Z16, Z20, Z0; \
	VFMADD231PS  Z17, Z20, Z1; \
	VFMADD231PS  Z18, Z20, Z2; \
	VFMADD231PS  Z19, Z20, Z3; \
	VBROADCASTSS (off)(R10)(AX*1), Z22; \
	VFMADD231PS  Z16, Z21, Z4; \
	VFMADD231PS  Z17, Z21, Z5; \
	VFMADD231PS  Z18, Z21, Z6; \
	VFMADD231PS  Z19, Z21, Z7; \
	VBROADCASTSS (off)(R11)(AX*1), Z23; \
	VFMADD231PS  Z16, Z22, Z8; \
	VFMADD231PS  Z17, Z22, Z9; \
	VFMADD231PS  Z18, Z22, Z10; \
	VFMADD231PS  Z19, Z22, Z11; \
	VFMADD231PS  Z16, Z23, Z12; \
	VFMADD231PS  Z17, Z23, Z13; \
	VFMADD231PS  Z18, Z23, Z14; \
	VFMADD231PS  Z19, Z23, Z15

// WUPDATE adds one tile row to C at (BX).
#define WUPDATE(z0, z1, z2, z3) \
	VADDPS  (BX), z0, z0; \
	VMOVUPS z0, (BX); \
	VADDPS  64(BX), z1, z1; \
	VMOVUPS z1, 64(BX); \
	VADDPS  128(BX), z2, z2; \
	VMOVUPS z2, 128(BX); \
	VADDPS  192(BX), z3, z3; \
	VMOVUPS z3, 192(BX)

// func gemmWide32AVX512(mr, n, k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)
TEXT ·gemmWide32AVX512(SB), NOSPLIT, $24-72
	// Row pointers of A: row i is a + min(i, mr-1)·lda.
	MOVQ    mr+0(FP), AX
	MOVQ    lda+32(FP), BX
	SHLQ    $2, BX
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

	MOVQ ldc+64(FP), AX
	SHLQ $2, AX
	MOVQ AX, ldcb-24(SP)
	MOVQ k+16(FP), AX
	SHLQ $2, AX
	MOVQ AX, kb-8(SP)
	ANDQ $-16, AX
	MOVQ AX, k4b-16(SP)
	MOVQ ldb+48(FP), CX
	SHLQ $2, CX
	MOVQ n+8(FP), R15
	SHLQ $2, R15
	MOVQ b+40(FP), DI
	MOVQ c+56(FP), R14

block:
	CMPQ   R15, $256
	JLT    done
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	MOVQ   DI, BX
	XORQ   AX, AX
	CMPQ   AX, k4b-16(SP)
	JGE    k1

k4:
	WSTEP(0)
	WSTEP(4)
	WSTEP(8)
	WSTEP(12)
	ADDQ $16, AX
	CMPQ AX, k4b-16(SP)
	JLT  k4

k1:
	CMPQ AX, kb-8(SP)
	JGE  update
	WSTEP(0)
	ADDQ $4, AX
	JMP  k1

update:
	MOVQ R14, BX
	WUPDATE(Z0, Z1, Z2, Z3)
	CMPQ mr+0(FP), $2
	JLT  next
	ADDQ ldcb-24(SP), BX
	WUPDATE(Z4, Z5, Z6, Z7)
	CMPQ mr+0(FP), $3
	JLT  next
	ADDQ ldcb-24(SP), BX
	WUPDATE(Z8, Z9, Z10, Z11)
	CMPQ mr+0(FP), $4
	JLT  next
	ADDQ ldcb-24(SP), BX
	WUPDATE(Z12, Z13, Z14, Z15)

next:
	ADDQ $256, DI
	ADDQ $256, R14
	SUBQ $256, R15
	JMP  block

done:
	VZEROUPPER
	RET
