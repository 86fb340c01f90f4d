//go:build !noasm

#include "textflag.h"
#include "gemmnt_avx512_amd64.h"

// The four tile loops below differ only in their loads (rows past n, and
// columns past k). Their loads, transposes and fused multiply-adds are
// the macros of gemmnt_avx512_amd64.h, written out in full there, with
// the registers renamed as the transpose frees them.

// func gemmNT32AVX512(m, n, k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)
//
// A tile is 16 rows of B (keys j0..j0+15) by 16 columns p: loaded one row
// a register (Z0-Z15; rows past n repeat the last one, columns past k
// load as 0 under K1), transposed in registers so that each register holds
// one column p of the 16 rows, then multiplied into the accumulators of
// the chunk's 4 rows of A, Z28-Z31, column by column in ascending p, each
// column times A[i][p] broadcast from memory. The chain of fused
// multiply-adds per element of C is therefore GemmNN32's exactly.
//
// R8-R11: the chunk's rows of A (a short chunk repeats its last); AX: the
// byte offset 4·p along the rows of A and B; SI: row j0 of B; DI: the row
// being loaded; BX: ldb in bytes; R12: j0; R13: rows of B left from j0;
// R14: rows of A left; DX: row i0 of C; CX: the count of 16-column blocks,
// then k mod 16.
TEXT ·gemmNT32AVX512(SB), NOSPLIT, $0-72
	MOVQ a+24(FP), R8
	MOVQ c+56(FP), DX
	MOVQ m+0(FP), R14
	MOVQ ldb+48(FP), BX
	SHLQ $2, BX

	// K1 = the first k mod 16 columns.
	MOVQ  k+16(FP), CX
	ANDQ  $15, CX
	MOVQ  $1, AX
	SHLQ  CX, AX
	DECQ  AX
	KMOVW AX, K1

rows:
	// The chunk's rows of A: each next one, or the last valid one again.
	MOVQ lda+32(FP), R15
	SHLQ $2, R15
	MOVQ R8, R9
	CMPQ R14, $1
	JEQ  a1
	ADDQ R15, R9

a1:
	MOVQ R9, R10
	CMPQ R14, $2
	JLE  a2
	ADDQ R15, R10

a2:
	MOVQ R10, R11
	CMPQ R14, $3
	JLE  a3
	ADDQ R15, R11

a3:
	MOVQ b+40(FP), SI
	XORQ R12, R12

cols:
	MOVQ   n+8(FP), R13
	SUBQ   R12, R13
	VPXORD Z28, Z28, Z28
	VPXORD Z29, Z29, Z29
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31
	XORQ   AX, AX
	MOVQ   k+16(FP), CX
	SHRQ   $4, CX
	CMPQ   R13, $16
	JLT    tailtile
	TESTQ  CX, CX
	JEQ    fullrest

fullblock:
	NT_LOADS_PF
	NT_TRANSPOSE
	NT_FMA16
	ADDQ $64, AX
	DECQ CX
	JNE  fullblock

fullrest:
	MOVQ k+16(FP), CX
	ANDQ $15, CX
	JEQ  store
	NT_LOADS_REST
	NT_TRANSPOSE
	NT_FMA_REST
	JMP  store

tailtile:
	// Fewer than 16 rows of B left: the loads stop at the last one.
	TESTQ CX, CX
	JEQ   tailrest

tailblock:
	NT_LOADS_TAIL
	NT_TRANSPOSE
	NT_FMA16
	ADDQ $64, AX
	DECQ CX
	JNE  tailblock

tailrest:
	MOVQ k+16(FP), CX
	ANDQ $15, CX
	JEQ  store
	NT_LOADS_TAIL_REST
	NT_TRANSPOSE
	NT_FMA_REST

store:
	// C's valid rows, under K4 = the tile's valid columns, C added after
	// the sum as GemmNN32 adds it.
	MOVQ    R13, CX
	MOVQ    $16, R15
	CMPQ    CX, R15
	CMOVQGT R15, CX
	MOVQ    $1, AX
	SHLQ    CX, AX
	DECQ    AX
	KMOVW   AX, K4
	LEAQ    (DX)(R12*4), DI
	MOVQ    ldc+64(FP), R15
	SHLQ    $2, R15
	VMOVUPS.Z (DI), K4, Z16
	VADDPS    Z16, Z28, Z16
	VMOVUPS   Z16, K4, (DI)
	CMPQ R14, $1
	JEQ  colsdone
	ADDQ R15, DI
	VMOVUPS.Z (DI), K4, Z16
	VADDPS    Z16, Z29, Z16
	VMOVUPS   Z16, K4, (DI)
	CMPQ R14, $2
	JEQ  colsdone
	ADDQ R15, DI
	VMOVUPS.Z (DI), K4, Z16
	VADDPS    Z16, Z30, Z16
	VMOVUPS   Z16, K4, (DI)
	CMPQ R14, $3
	JEQ  colsdone
	ADDQ R15, DI
	VMOVUPS.Z (DI), K4, Z16
	VADDPS    Z16, Z31, Z16
	VMOVUPS   Z16, K4, (DI)

colsdone:
	ADDQ $16, R12
	MOVQ BX, AX
	SHLQ $4, AX
	ADDQ AX, SI
	CMPQ R12, n+8(FP)
	JLT  cols

	MOVQ lda+32(FP), AX
	SHLQ $4, AX
	ADDQ AX, R8
	MOVQ ldc+64(FP), AX
	SHLQ $4, AX
	ADDQ AX, DX
	SUBQ $4, R14
	JGT  rows

	VZEROUPPER
	RET
