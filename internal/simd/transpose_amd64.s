//go:build !noasm

#include "textflag.h"

// func transpose8x8AVX2(src *float32, lds int, dst *float32, ldd int, mode int)
//
// Rows r0 … r7 of src into Y0 … Y7; unpacks interleave pairs of rows,
// shuffles pairs of pairs, and 128-bit lane permutes put column c of
// the block in one register, stored as row c of dst: as it is (mode
// blockCopy), plus 0 (blockStore) or added to dst (blockAdd).
TEXT ·transpose8x8AVX2(SB), NOSPLIT, $0-40
	MOVQ src+0(FP), SI
	MOVQ lds+8(FP), AX
	MOVQ dst+16(FP), DI
	MOVQ ldd+24(FP), BX
	SHLQ $2, AX
	SHLQ $2, BX
	LEAQ (AX)(AX*2), CX // 3·lds bytes
	LEAQ (SI)(AX*4), DX // row 4

	VMOVUPS (SI), Y0
	VMOVUPS (SI)(AX*1), Y1
	VMOVUPS (SI)(AX*2), Y2
	VMOVUPS (SI)(CX*1), Y3
	VMOVUPS (DX), Y4
	VMOVUPS (DX)(AX*1), Y5
	VMOVUPS (DX)(AX*2), Y6
	VMOVUPS (DX)(CX*1), Y7

	VUNPCKLPS Y1, Y0, Y8  // r0[0] r1[0] r0[1] r1[1] | r0[4] r1[4] r0[5] r1[5]
	VUNPCKHPS Y1, Y0, Y9  // r0[2] r1[2] r0[3] r1[3] | …6, 7
	VUNPCKLPS Y3, Y2, Y10
	VUNPCKHPS Y3, Y2, Y11
	VUNPCKLPS Y5, Y4, Y12
	VUNPCKHPS Y5, Y4, Y13
	VUNPCKLPS Y7, Y6, Y14
	VUNPCKHPS Y7, Y6, Y15

	VSHUFPS $0x44, Y10, Y8, Y0  // column 0 of rows 0–3 | column 4
	VSHUFPS $0xEE, Y10, Y8, Y1  // column 1 | 5
	VSHUFPS $0x44, Y11, Y9, Y2  // column 2 | 6
	VSHUFPS $0xEE, Y11, Y9, Y3  // column 3 | 7
	VSHUFPS $0x44, Y14, Y12, Y4 // the same for rows 4–7
	VSHUFPS $0xEE, Y14, Y12, Y5
	VSHUFPS $0x44, Y15, Y13, Y6
	VSHUFPS $0xEE, Y15, Y13, Y7

	VPERM2F128 $0x20, Y4, Y0, Y8  // column 0
	VPERM2F128 $0x20, Y5, Y1, Y9  // column 1
	VPERM2F128 $0x20, Y6, Y2, Y10 // column 2
	VPERM2F128 $0x20, Y7, Y3, Y11 // column 3
	VPERM2F128 $0x31, Y4, Y0, Y12 // column 4
	VPERM2F128 $0x31, Y5, Y1, Y13 // column 5
	VPERM2F128 $0x31, Y6, Y2, Y14 // column 6
	VPERM2F128 $0x31, Y7, Y3, Y15 // column 7

	LEAQ (BX)(BX*2), CX // 3·ldd bytes
	LEAQ (DI)(BX*4), DX // row 4 of dst
	MOVQ mode+32(FP), R8
	CMPQ R8, $1
	JLT  write  // blockCopy
	JEQ  addzero // blockStore

	VADDPS (DI), Y8, Y8
	VADDPS (DI)(BX*1), Y9, Y9
	VADDPS (DI)(BX*2), Y10, Y10
	VADDPS (DI)(CX*1), Y11, Y11
	VADDPS (DX), Y12, Y12
	VADDPS (DX)(BX*1), Y13, Y13
	VADDPS (DX)(BX*2), Y14, Y14
	VADDPS (DX)(CX*1), Y15, Y15
	JMP    write

addzero:
	// x + 0, as the generic store does: −0 becomes +0.
	VXORPS Y0, Y0, Y0
	VADDPS Y0, Y8, Y8
	VADDPS Y0, Y9, Y9
	VADDPS Y0, Y10, Y10
	VADDPS Y0, Y11, Y11
	VADDPS Y0, Y12, Y12
	VADDPS Y0, Y13, Y13
	VADDPS Y0, Y14, Y14
	VADDPS Y0, Y15, Y15

write:
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, (DI)(BX*1)
	VMOVUPS Y10, (DI)(BX*2)
	VMOVUPS Y11, (DI)(CX*1)
	VMOVUPS Y12, (DX)
	VMOVUPS Y13, (DX)(BX*1)
	VMOVUPS Y14, (DX)(BX*2)
	VMOVUPS Y15, (DX)(CX*1)
	VZEROUPPER
	RET
