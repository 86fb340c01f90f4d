//go:build !noasm

#include "textflag.h"

// Constants of softcap32Consts, by byte offset: P(z) from z⁶ (0 … 24),
// exp(r) from r⁷ (28 … 56), log₂e 60, ln 2 hi 64 and lo 68, ½ 72, 1 76,
// 2 80, the exponent argument's cap 84, the sign bit 88.
//
// Registers: Z8-Z14 P, Z15-Z22 exp, Z23 log₂e, Z24 ln2 hi, Z25 ln2 lo,
// Z26 ½, Z27 1, Z28 2, Z29 cap, Z30 sign, Z31 c; Z0-Z7 work; K1 tail,
// K2 |x| < ½.

// SOFTCAP_POLY takes 16 scores in Z0: x = s/c in Z1, |x| in Z2, K2 the
// lanes with |x| < ½, and the odd polynomial's tanh x in Z5 (the answer
// on those lanes).
#define SOFTCAP_POLY \
	VDIVPS       Z31, Z0, Z1; \
	VANDNPS      Z1, Z30, Z2; \
	VCMPPS       $0x11, Z26, Z2, K2; \
	VMULPS       Z1, Z1, Z3; \
	VMOVAPS      Z8, Z4; \
	VFMADD213PS  Z9, Z3, Z4; \
	VFMADD213PS  Z10, Z3, Z4; \
	VFMADD213PS  Z11, Z3, Z4; \
	VFMADD213PS  Z12, Z3, Z4; \
	VFMADD213PS  Z13, Z3, Z4; \
	VFMADD213PS  Z14, Z3, Z4; \
	VMULPS       Z3, Z1, Z5; \
	VFMADD213PS  Z1, Z4, Z5

// SOFTCAP_REST finishes SOFTCAP_POLY for 16 lanes some of which have
// |x| ≥ ½ (or NaN): 1 − 2/(1 + e^2|x|) with x's sign there, the
// polynomial's value elsewhere; c·tanh(s/c) in Z6 and the derivative in
// Z7.
#define SOFTCAP_REST \
	VADDPS       Z2, Z2, Z6; \
	VMINPS       Z6, Z29, Z6; \
	VMULPS       Z23, Z6, Z7; \
	VRNDSCALEPS  $0, Z7, Z7; \
	VFNMADD231PS Z24, Z7, Z6; \
	VFNMADD231PS Z25, Z7, Z6; \
	VMOVAPS      Z15, Z4; \
	VFMADD213PS  Z16, Z6, Z4; \
	VFMADD213PS  Z17, Z6, Z4; \
	VFMADD213PS  Z18, Z6, Z4; \
	VFMADD213PS  Z19, Z6, Z4; \
	VFMADD213PS  Z20, Z6, Z4; \
	VFMADD213PS  Z21, Z6, Z4; \
	VFMADD213PS  Z22, Z6, Z4; \
	VSCALEFPS    Z7, Z4, Z4; \
	VADDPS       Z27, Z4, Z4; \
	VDIVPS       Z4, Z28, Z4; \
	VSUBPS       Z4, Z27, Z6; \
	VANDPS       Z1, Z30, Z7; \
	VORPS        Z7, Z6, Z6; \
	VSUBPS       Z4, Z28, Z7; \
	VMULPS       Z7, Z4, Z7; \
	VBLENDMPS    Z5, Z6, K2, Z6; \
	VMULPS       Z5, Z5, Z3; \
	VSUBPS       Z3, Z27, Z3; \
	VBLENDMPS    Z3, Z7, K2, Z7; \
	VMULPS       Z31, Z6, Z6

// SOFTCAP_POLYONLY finishes SOFTCAP_POLY where every lane has |x| < ½,
// the common case at a large cap: SOFTCAP_REST's results on those lanes,
// bit for bit, without the exponential and its division.
#define SOFTCAP_POLYONLY \
	VMULPS Z5, Z5, Z3; \
	VSUBPS Z3, Z27, Z7; \
	VMULPS Z31, Z5, Z6

// func softcap32AVX512(s, grad []float32, c float32, consts *[softcap32NConsts]float32)
TEXT ·softcap32AVX512(SB), NOSPLIT, $0-64
	MOVQ         s_base+0(FP), DI
	MOVQ         s_len+8(FP), CX
	MOVQ         grad_base+24(FP), R8
	MOVQ         grad_len+32(FP), R9
	VBROADCASTSS c+48(FP), Z31
	MOVQ         consts+56(FP), SI
	VBROADCASTSS 0(SI), Z8
	VBROADCASTSS 4(SI), Z9
	VBROADCASTSS 8(SI), Z10
	VBROADCASTSS 12(SI), Z11
	VBROADCASTSS 16(SI), Z12
	VBROADCASTSS 20(SI), Z13
	VBROADCASTSS 24(SI), Z14
	VBROADCASTSS 28(SI), Z15
	VBROADCASTSS 32(SI), Z16
	VBROADCASTSS 36(SI), Z17
	VBROADCASTSS 40(SI), Z18
	VBROADCASTSS 44(SI), Z19
	VBROADCASTSS 48(SI), Z20
	VBROADCASTSS 52(SI), Z21
	VBROADCASTSS 56(SI), Z22
	VBROADCASTSS 60(SI), Z23
	VBROADCASTSS 64(SI), Z24
	VBROADCASTSS 68(SI), Z25
	VBROADCASTSS 72(SI), Z26
	VBROADCASTSS 76(SI), Z27
	VBROADCASTSS 80(SI), Z28
	VBROADCASTSS 84(SI), Z29
	VBROADCASTSS 88(SI), Z30

loop16:
	CMPQ    CX, $16
	JLT     tail
	VMOVUPS (DI), Z0
	SOFTCAP_POLY
	KORTESTW K2, K2
	JCS      polyonly // every lane below ½
	SOFTCAP_REST
	JMP      store

polyonly:
	SOFTCAP_POLYONLY

store:
	VMOVUPS Z6, (DI)
	TESTQ   R9, R9
	JEQ     next
	VMOVUPS Z7, (R8)
	ADDQ    $64, R8

next:
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  loop16

tail:
	TESTQ     CX, CX
	JEQ       done
	MOVQ      $1, BX
	SHLQ      CX, BX
	DECQ      BX
	KMOVW     BX, K1
	VMOVUPS.Z (DI), K1, Z0
	SOFTCAP_POLY
	KORTESTW  K2, K2
	JCS       tailpoly // every lane below ½ (those past the tail are 0)
	SOFTCAP_REST
	JMP       tailstore

tailpoly:
	SOFTCAP_POLYONLY

tailstore:
	VMOVUPS   Z6, K1, (DI)
	TESTQ     R9, R9
	JEQ       done
	VMOVUPS   Z7, K1, (R8)

done:
	VZEROUPPER
	RET
