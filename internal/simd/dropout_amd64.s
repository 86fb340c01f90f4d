//go:build !noasm

#include "textflag.h"

// func dropScale32AVX512(x []float32, words []uint32, threshold uint32, scale float32)
TEXT ·dropScale32AVX512(SB), NOSPLIT, $0-56
	MOVQ         x_base+0(FP), DI
	MOVQ         x_len+8(FP), CX
	MOVQ         words_base+24(FP), SI
	MOVL         threshold+48(FP), AX
	VPBROADCASTD AX, Z7
	VBROADCASTSS scale+52(FP), Z6

drop16:
	CMPQ      CX, $16
	JLT       droptail
	VMOVDQU32 (SI), Z0
	VPCMPUD   $5, Z7, Z0, K1 // K1: words ≥ threshold (not less than)
	VMULPS.Z  (DI), Z6, K1, Z1
	VMOVUPS   Z1, (DI)
	ADDQ      $64, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JMP       drop16

droptail:
	// K2 selects the n < 16 lanes left; lanes outside it are neither read
	// nor written.
	TESTQ       CX, CX
	JEQ         dropdone
	MOVQ        $1, BX
	SHLQ        CX, BX
	DECQ        BX
	KMOVW       BX, K2
	VMOVDQU32.Z (SI), K2, Z0
	VPCMPUD     $5, Z7, Z0, K2, K1
	VMULPS.Z    (DI), Z6, K1, Z1
	VMOVUPS     Z1, K2, (DI)

dropdone:
	VZEROUPPER
	RET
