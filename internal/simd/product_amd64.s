//go:build !noasm

#include "textflag.h"
#include "mask_amd64.h"

// Every function: DI dst, SI a, (R8 g), CX the elements left, Z6 (Y6) s;
// the products in Go's order, ((s·a)·dst)·g, one rounding each, no FMA.

// func scaledProduct32AVX512(dst, a []float32, s float32)
TEXT ·scaledProduct32AVX512(SB), NOSPLIT, $0-52
	MOVQ         dst_base+0(FP), DI
	MOVQ         dst_len+8(FP), CX
	MOVQ         a_base+24(FP), SI
	VBROADCASTSS s+48(FP), Z6

sp16:
	CMPQ    CX, $16
	JLT     sptail
	VMULPS  (SI), Z6, Z0
	VMULPS  (DI), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     sp16

sptail:
	TESTQ     CX, CX
	JEQ       spdone
	MOVQ      $1, BX
	SHLQ      CX, BX
	DECQ      BX
	KMOVW     BX, K1
	VMOVUPS.Z (SI), K1, Z1
	VMOVUPS.Z (DI), K1, Z2
	VMULPS    Z1, Z6, Z0
	VMULPS    Z2, Z0, Z0
	VMOVUPS   Z0, K1, (DI)

spdone:
	VZEROUPPER
	RET

// func scaledProductG32AVX512(dst, a, g []float32, s float32)
TEXT ·scaledProductG32AVX512(SB), NOSPLIT, $0-76
	MOVQ         dst_base+0(FP), DI
	MOVQ         dst_len+8(FP), CX
	MOVQ         a_base+24(FP), SI
	MOVQ         g_base+48(FP), R8
	VBROADCASTSS s+72(FP), Z6

spg16:
	CMPQ    CX, $16
	JLT     spgtail
	VMULPS  (SI), Z6, Z0
	VMULPS  (DI), Z0, Z0
	VMULPS  (R8), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	ADDQ    $64, R8
	SUBQ    $16, CX
	JMP     spg16

spgtail:
	TESTQ     CX, CX
	JEQ       spgdone
	MOVQ      $1, BX
	SHLQ      CX, BX
	DECQ      BX
	KMOVW     BX, K1
	VMOVUPS.Z (SI), K1, Z1
	VMOVUPS.Z (DI), K1, Z2
	VMOVUPS.Z (R8), K1, Z3
	VMULPS    Z1, Z6, Z0
	VMULPS    Z2, Z0, Z0
	VMULPS    Z3, Z0, Z0
	VMOVUPS   Z0, K1, (DI)

spgdone:
	VZEROUPPER
	RET

// The AVX2 form without g, 8 lanes, the tail through a mask from
// maskTable<> (CX counts bytes there).

// func scaledProduct32AVX2(dst, a []float32, s float32)
TEXT ·scaledProduct32AVX2(SB), NOSPLIT, $0-52
	MOVQ         dst_base+0(FP), DI
	MOVQ         dst_len+8(FP), CX
	MOVQ         a_base+24(FP), SI
	VBROADCASTSS s+48(FP), Y6

sp8:
	CMPQ    CX, $8
	JLT     sptail
	VMULPS  (SI), Y6, Y0
	VMULPS  (DI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     sp8

sptail:
	TESTQ      CX, CX
	JEQ        spdone
	SHLQ       $2, CX
	LEAQ       maskTable<>+64(SB), BX
	SUBQ       CX, BX
	VMOVDQU    (BX), Y7
	VMASKMOVPS (SI), Y7, Y1
	VMASKMOVPS (DI), Y7, Y2
	VMULPS     Y1, Y6, Y0
	VMULPS     Y2, Y0, Y0
	VMASKMOVPS Y0, Y7, (DI)

spdone:
	VZEROUPPER
	RET
