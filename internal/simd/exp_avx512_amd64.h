// Template for the AVX-512F shifted exponential: the algorithm and constant
// table of exp_avx2_amd64.h on zmm registers, with the special cases and the
// tail handled by opmasks. The including file defines, besides the AVX2
// template's names, MOVU (VMOVUPS/VMOVUPD, for masked moves), VPTERNLOG,
// BCASTZ (scalar broadcast into a zmm register), POLYZ(r, p) and HSUMZ
// (reduce Z8 into X0).
//
// Registers: Z15 shift, Z14 L, Z13 H, Z12 log2e, Z11 magic, Z10 ln2hi,
// Z9 ln2lo, Z8 sum, Z7 +Inf, Z6 all ones (a NaN); Z0..Z4 work.
// K1..K3 special cases, K4 tail mask.

#define C_LOG2E 0
#define C_MAGIC 32
#define C_LN2HI 64
#define C_LN2LO 96
#define C_L 128
#define C_H 160
#define C_INF 192
#define C_POLY 224

#define EXPZ \
	VSUB     Z15, Z0, Z0; \
	VMAX     Z0, Z14, Z1; \
	VMIN     Z13, Z1, Z1; \
	VMOVUPS  Z11, Z2; \
	VFMA231  Z12, Z1, Z2; \
	VSUB     Z11, Z2, Z4; \
	VFNMA231 Z10, Z4, Z1; \
	VFNMA231 Z9, Z4, Z1; \
	POLYZ(Z1, Z3); \
	VPSLL    $MANT, Z2, Z2; \
	VPADD    Z2, Z3, Z3; \
	VCMP     $0x05, Z14, Z0, K1; \
	MOVU.Z   Z3, K1, Z3; \
	VCMP     $0x1e, Z13, Z0, K2; \
	MOVU     Z7, K2, Z3; \
	VCMP     $0x03, Z0, Z0, K3; \
	MOVU     Z6, K3, Z3

TEXT NAME(SB), NOSPLIT, $0-FRAMEARGS
	MOVQ      x_base+0(FP), DI
	MOVQ      x_len+8(FP), CX
	SHLQ      $LOGES, CX
	BCASTZ    shift+24(FP), Z15
	LEAQ      CONSTS, SI
	BCASTZ    C_L(SI), Z14
	BCASTZ    C_H(SI), Z13
	BCASTZ    C_LOG2E(SI), Z12
	BCASTZ    C_MAGIC(SI), Z11
	BCASTZ    C_LN2HI(SI), Z10
	BCASTZ    C_LN2LO(SI), Z9
	BCASTZ    C_INF(SI), Z7
	VPTERNLOG $0xff, Z6, Z6, Z6
	VPXORD    Z8, Z8, Z8
	XORQ      AX, AX

loop:
	MOVQ    CX, DX
	SUBQ    AX, DX
	CMPQ    DX, $64
	JLT     tail
	VMOVUPS (DI)(AX*1), Z0
	EXPZ
	VMOVUPS Z3, (DI)(AX*1)
	VADD    Z3, Z8, Z8
	ADDQ    $64, AX
	JMP     loop

tail:
	// DX < 64 bytes remain: K4 selects their t = DX/ES elements.
	TESTQ  DX, DX
	JEQ    reduce
	MOVQ   DX, CX
	SHRQ   $LOGES, CX
	MOVQ   $1, BX
	SHLQ   CX, BX
	DECQ   BX
	KMOVW  BX, K4
	MOVU.Z (DI)(AX*1), K4, Z0
	EXPZ
	MOVU   Z3, K4, (DI)(AX*1)
	VADD   Z3, Z8, K4, Z8

reduce:
	HSUMZ
	MOVS X0, ret+32(FP)
	VZEROUPPER
	RET

#undef EXPZ
#undef C_LOG2E
#undef C_MAGIC
#undef C_LN2HI
#undef C_LN2LO
#undef C_L
#undef C_H
#undef C_INF
#undef C_POLY
