//go:build !noasm

#include "textflag.h"

// K1 = the first n bits (n < 16) in its low 16 bits, for 16 float32
// lanes and the first 8 float64 lanes; K2 = the 8 bits after them, for
// the second 8 float64 lanes. Clobbers BX.
#define TAILMASKS(n) \
	MOVQ  $1, BX; \
	SHLQ  n, BX; \
	DECQ  BX; \
	KMOVW BX, K1; \
	SHRQ  $8, BX; \
	KMOVW BX, K2

// func widenScale32AVX512(dst []float64, src []float32, a float64)
TEXT ·widenScale32AVX512(SB), NOSPLIT, $0-56
	MOVQ         dst_base+0(FP), DI
	MOVQ         dst_len+8(FP), CX
	MOVQ         src_base+24(FP), SI
	VBROADCASTSD a+48(FP), Z6

widen16:
	CMPQ      CX, $16
	JLT       widentail
	VCVTPS2PD (SI), Z0
	VCVTPS2PD 32(SI), Z1
	VMULPD    Z6, Z0, Z0
	VMULPD    Z6, Z1, Z1
	VMOVUPD   Z0, (DI)
	VMOVUPD   Z1, 64(DI)
	ADDQ      $64, SI
	ADDQ      $128, DI
	SUBQ      $16, CX
	JMP       widen16

widentail:
	TESTQ         CX, CX
	JEQ           widendone
	TAILMASKS(CX)
	VMOVUPS.Z     (SI), K1, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VCVTPS2PD     Y0, Z0
	VCVTPS2PD     Y1, Z1
	VMULPD        Z6, Z0, Z0
	VMULPD        Z6, Z1, Z1
	VMOVUPD       Z0, K1, (DI)
	VMOVUPD       Z1, K2, 64(DI)

widendone:
	VZEROUPPER
	RET

// TANH16 takes e in Z0 (lanes 0-7) and Z1 (lanes 8-15) and leaves the 16
// float32 c·t in Z2 and 1 − t² in Z4, t = 1 − 2/(1 + e), with Z6 = c,
// Z7 = 1, Z8 = 2. Clobbers Z0, Z1, Z3, Z5.
#define TANH16 \
	VADDPD       Z7, Z0, Z0; \
	VADDPD       Z7, Z1, Z1; \
	VDIVPD       Z0, Z8, Z0; \
	VDIVPD       Z1, Z8, Z1; \
	VSUBPD       Z0, Z7, Z0; \
	VSUBPD       Z1, Z7, Z1; \
	VMULPD       Z0, Z6, Z2; \
	VMULPD       Z1, Z6, Z3; \
	VCVTPD2PS    Z2, Y2; \
	VCVTPD2PS    Z3, Y3; \
	VINSERTF64X4 $1, Y3, Z2, Z2; \
	VMULPD       Z0, Z0, Z0; \
	VMULPD       Z1, Z1, Z1; \
	VSUBPD       Z0, Z7, Z4; \
	VSUBPD       Z1, Z7, Z5; \
	VCVTPD2PS    Z4, Y4; \
	VCVTPD2PS    Z5, Y5; \
	VINSERTF64X4 $1, Y5, Z4, Z4

// func tanhScaleFromExp32AVX512(dst, grad []float32, e []float64, c float64)
TEXT ·tanhScaleFromExp32AVX512(SB), NOSPLIT, $0-80
	MOVQ         dst_base+0(FP), DI
	MOVQ         dst_len+8(FP), CX
	MOVQ         grad_base+24(FP), R8
	MOVQ         grad_len+32(FP), R9
	MOVQ         e_base+48(FP), SI
	VBROADCASTSD c+72(FP), Z6
	MOVQ         $0x3FF0000000000000, AX
	VPBROADCASTQ AX, Z7
	MOVQ         $0x4000000000000000, AX
	VPBROADCASTQ AX, Z8

tanh16:
	CMPQ    CX, $16
	JLT     tanhtail
	VMOVUPD (SI), Z0
	VMOVUPD 64(SI), Z1
	TANH16
	VMOVUPS Z2, (DI)
	TESTQ   R9, R9
	JEQ     tanhnext
	VMOVUPS Z4, (R8)
	ADDQ    $64, R8

tanhnext:
	ADDQ $128, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  tanh16

tanhtail:
	TESTQ         CX, CX
	JEQ           tanhdone
	TAILMASKS(CX)
	VMOVUPD.Z     (SI), K1, Z0
	VMOVUPD.Z     64(SI), K2, Z1
	TANH16
	VMOVUPS       Z2, K1, (DI)
	TESTQ         R9, R9
	JEQ           tanhdone
	VMOVUPS       Z4, K1, (R8)

tanhdone:
	VZEROUPPER
	RET
