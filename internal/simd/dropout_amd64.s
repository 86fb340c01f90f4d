//go:build !noasm

#include "textflag.h"
#include "mask_amd64.h"

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

// func dropScale32AVX2(x []float32, words []uint32, threshold uint32, scale float32)
//
// 8 lanes: AVX2 has no unsigned compare, so words ≥ threshold is
// max(words, threshold) = words; the kept lanes' products pass an AND with
// that mask, the dropped ones become +0, as in dropScale32Generic. The
// tail goes through a mask from maskTable<> (CX counts bytes there).
TEXT ·dropScale32AVX2(SB), NOSPLIT, $0-56
	MOVQ         x_base+0(FP), DI
	MOVQ         x_len+8(FP), CX
	MOVQ         words_base+24(FP), SI
	MOVL         threshold+48(FP), AX
	VMOVD        AX, X7
	VPBROADCASTD X7, Y7
	VBROADCASTSS scale+52(FP), Y6

drop8:
	CMPQ    CX, $8
	JLT     drop8tail
	VMOVDQU (SI), Y0
	VPMAXUD Y7, Y0, Y2
	VPCMPEQD Y0, Y2, Y2
	VMULPS  (DI), Y6, Y1
	VANDPS  Y2, Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     drop8

drop8tail:
	TESTQ      CX, CX
	JEQ        drop8done
	SHLQ       $2, CX
	LEAQ       maskTable<>+64(SB), BX
	SUBQ       CX, BX
	VMOVDQU    (BX), Y5
	VMASKMOVPS (SI), Y5, Y0
	VMASKMOVPS (DI), Y5, Y3
	VPMAXUD    Y7, Y0, Y2
	VPCMPEQD   Y0, Y2, Y2
	VMULPS     Y3, Y6, Y1
	VANDPS     Y2, Y1, Y1
	VMASKMOVPS Y1, Y5, (DI)

drop8done:
	VZEROUPPER
	RET
