//go:build !noasm

#include "textflag.h"

// Philox4x32-10 for 16 consecutive counters at once (see kernels.Dropout
// for the generator and its constants): lane l holds the block of counter
// (ctr0 + l, c1, c2, c3). 32×32→64-bit products come from VPMULUDQ, which
// multiplies the even dwords; the odd ones are shifted down first, and a
// blend under K1 (the odd lanes) puts each high half back in its lane.

DATA philoxIota<>+0(SB)/8, $0x0000000100000000
DATA philoxIota<>+8(SB)/8, $0x0000000300000002
DATA philoxIota<>+16(SB)/8, $0x0000000500000004
DATA philoxIota<>+24(SB)/8, $0x0000000700000006
DATA philoxIota<>+32(SB)/8, $0x0000000900000008
DATA philoxIota<>+40(SB)/8, $0x0000000b0000000a
DATA philoxIota<>+48(SB)/8, $0x0000000d0000000c
DATA philoxIota<>+56(SB)/8, $0x0000000f0000000e
GLOBL philoxIota<>(SB), RODATA|NOPTR, $64

DATA philoxConst<>+0(SB)/4, $0xD2511F53
DATA philoxConst<>+4(SB)/4, $0xCD9E8D57
DATA philoxConst<>+8(SB)/4, $0x9E3779B9
DATA philoxConst<>+12(SB)/4, $0xBB67AE85
GLOBL philoxConst<>(SB), RODATA|NOPTR, $16

// MULHILO sets hi and lo to the high and low 32 bits of m·x, lane by lane
// (m the same in every lane); t is scratch.
#define MULHILO(m, x, hi, lo, t) \
	VPMULUDQ  m, x, hi; \
	VPSRLQ    $32, x, t; \
	VPMULUDQ  m, t, t; \
	VPSRLQ    $32, hi, hi; \
	VPBLENDMD t, hi, K1, hi; \
	VPMULLD   m, x, lo

// func philox16AVX512(out *[64]uint32, ctr0, c1, c2, c3, k0, k1 uint32)
TEXT ·philox16AVX512(SB), NOSPLIT, $0-32
	MOVQ         out+0(FP), DI
	MOVL         ctr0+8(FP), AX
	VPBROADCASTD AX, Z0
	VPADDD       philoxIota<>(SB), Z0, Z0
	MOVL         c1+12(FP), AX
	VPBROADCASTD AX, Z1
	MOVL         c2+16(FP), AX
	VPBROADCASTD AX, Z2
	MOVL         c3+20(FP), AX
	VPBROADCASTD AX, Z3
	MOVL         k0+24(FP), AX
	VPBROADCASTD AX, Z4
	MOVL         k1+28(FP), AX
	VPBROADCASTD AX, Z5
	LEAQ         philoxConst<>(SB), SI
	VPBROADCASTD 0(SI), Z6
	VPBROADCASTD 4(SI), Z7
	VPBROADCASTD 8(SI), Z8
	VPBROADCASTD 12(SI), Z9
	MOVW         $0xAAAA, AX
	KMOVW        AX, K1
	MOVQ         $10, CX

round:
	MULHILO(Z6, Z0, Z10, Z12, Z16) // hi0, lo0 = M0·x0
	MULHILO(Z7, Z2, Z13, Z14, Z16) // hi1, lo1 = M1·x2
	VPTERNLOGD   $0x96, Z4, Z1, Z13 // x0' = hi1 ^ x1 ^ k0
	VPTERNLOGD   $0x96, Z5, Z3, Z10 // x2' = hi0 ^ x3 ^ k1
	VMOVDQA32    Z13, Z0
	VMOVDQA32    Z14, Z1 // x1' = lo1
	VMOVDQA32    Z10, Z2
	VMOVDQA32    Z12, Z3 // x3' = lo0
	VPADDD       Z8, Z4, Z4
	VPADDD       Z9, Z5, Z5
	DECQ         CX
	JNZ          round

	// Words to key order, out[4l + w] = word w of lane l: a 4×4 dword
	// transpose inside each 128-bit chunk (chunk g of r_m is then lane
	// 4g + m, whole), then chunks regrouped so that output vector g holds
	// lanes 4g … 4g+3.
	VPUNPCKLDQ   Z1, Z0, Z16 // t0
	VPUNPCKHDQ   Z1, Z0, Z17 // t1
	VPUNPCKLDQ   Z3, Z2, Z18 // t2
	VPUNPCKHDQ   Z3, Z2, Z19 // t3
	VPUNPCKLQDQ  Z18, Z16, Z0 // r0
	VPUNPCKHQDQ  Z18, Z16, Z1 // r1
	VPUNPCKLQDQ  Z19, Z17, Z2 // r2
	VPUNPCKHQDQ  Z19, Z17, Z3 // r3
	VSHUFI32X4   $0x44, Z1, Z0, Z16 // r0.c0 r0.c1 r1.c0 r1.c1
	VSHUFI32X4   $0x44, Z3, Z2, Z17 // r2.c0 r2.c1 r3.c0 r3.c1
	VSHUFI32X4   $0xEE, Z1, Z0, Z18 // r0.c2 r0.c3 r1.c2 r1.c3
	VSHUFI32X4   $0xEE, Z3, Z2, Z19 // r2.c2 r2.c3 r3.c2 r3.c3
	VSHUFI32X4   $0x88, Z17, Z16, Z0 // lanes 0–3
	VSHUFI32X4   $0xDD, Z17, Z16, Z1 // lanes 4–7
	VSHUFI32X4   $0x88, Z19, Z18, Z2 // lanes 8–11
	VSHUFI32X4   $0xDD, Z19, Z18, Z3 // lanes 12–15
	VMOVDQU32    Z0, 0(DI)
	VMOVDQU32    Z1, 64(DI)
	VMOVDQU32    Z2, 128(DI)
	VMOVDQU32    Z3, 192(DI)
	VZEROUPPER
	RET
