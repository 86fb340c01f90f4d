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

// PHILOX_ROUND is one round from state (x0, x1, x2, x3) into (y0, y1,
// y2, y3), a register set of its own: y0 = hi(M1·x2) ^ x1 ^ k0,
// y1 = lo(M1·x2), y2 = hi(M0·x0) ^ x3 ^ k1, y3 = lo(M0·x0); then the key
// (Z4, Z5) takes its Weyl step.
#define PHILOX_ROUND(x0, x1, x2, x3, y0, y1, y2, y3) \
	PHILOX_MIX(x0, x1, x2, x3, y0, y1, y2, y3, Z16); \
	PHILOX_KEY_STEP

// PHILOX_MIX is a round without the key's step, t its scratch register:
// philox32AVX512 mixes two independent sets under one key.
#define PHILOX_MIX(x0, x1, x2, x3, y0, y1, y2, y3, t) \
	MULHILO(Z6, x0, y2, y3, t); \
	MULHILO(Z7, x2, y0, y1, t); \
	VPTERNLOGD $0x96, Z4, x1, y0; \
	VPTERNLOGD $0x96, Z5, x3, y2

#define PHILOX_KEY_STEP \
	VPADDD Z8, Z4, Z4; \
	VPADDD Z9, Z5, Z5

// PHILOX_SETUP loads the counters (Z0: ctr0 + lane; Z1–Z3: c1–c3), the
// key (Z4, Z5), the constants (Z6–Z9: M0, M1 and the Weyl steps) and K1
// (the odd lanes) from philox16AVX512's and philox32AVX512's arguments,
// and out into DI.
#define PHILOX_SETUP \
	MOVQ         out+0(FP), DI; \
	MOVL         ctr0+8(FP), AX; \
	VPBROADCASTD AX, Z0; \
	VPADDD       philoxIota<>(SB), Z0, Z0; \
	MOVL         c1+12(FP), AX; \
	VPBROADCASTD AX, Z1; \
	MOVL         c2+16(FP), AX; \
	VPBROADCASTD AX, Z2; \
	MOVL         c3+20(FP), AX; \
	VPBROADCASTD AX, Z3; \
	MOVL         k0+24(FP), AX; \
	VPBROADCASTD AX, Z4; \
	MOVL         k1+28(FP), AX; \
	VPBROADCASTD AX, Z5; \
	LEAQ         philoxConst<>(SB), SI; \
	VPBROADCASTD 0(SI), Z6; \
	VPBROADCASTD 4(SI), Z7; \
	VPBROADCASTD 8(SI), Z8; \
	VPBROADCASTD 12(SI), Z9; \
	MOVW         $0xAAAA, AX; \
	KMOVW        AX, K1

// PHILOX_STORE writes the 16 blocks of (r0, r1, r2, r3) (word w of lane
// l in r_w) in key order from off(DI): out[4l + w] = word w of lane l. A
// 4×4 dword transpose inside each 128-bit chunk (chunk g of r_m is then
// lane 4g + m, whole), then chunks regrouped so that output vector g
// holds lanes 4g … 4g+3. Z16–Z19 are scratch; r0–r3 are overwritten.
#define PHILOX_STORE(r0, r1, r2, r3, off) \
	VPUNPCKLDQ  r1, r0, Z16; \
	VPUNPCKHDQ  r1, r0, Z17; \
	VPUNPCKLDQ  r3, r2, Z18; \
	VPUNPCKHDQ  r3, r2, Z19; \
	VPUNPCKLQDQ Z18, Z16, r0; \
	VPUNPCKHQDQ Z18, Z16, r1; \
	VPUNPCKLQDQ Z19, Z17, r2; \
	VPUNPCKHQDQ Z19, Z17, r3; \
	VSHUFI32X4  $0x44, r1, r0, Z16; \
	VSHUFI32X4  $0x44, r3, r2, Z17; \
	VSHUFI32X4  $0xEE, r1, r0, Z18; \
	VSHUFI32X4  $0xEE, r3, r2, Z19; \
	VSHUFI32X4  $0x88, Z17, Z16, r0; \
	VSHUFI32X4  $0xDD, Z17, Z16, r1; \
	VSHUFI32X4  $0x88, Z19, Z18, r2; \
	VSHUFI32X4  $0xDD, Z19, Z18, r3; \
	VMOVDQU32   r0, off(DI); \
	VMOVDQU32   r1, off+64(DI); \
	VMOVDQU32   r2, off+128(DI); \
	VMOVDQU32   r3, off+192(DI)

// func philox16AVX512(out *[64]uint32, ctr0, c1, c2, c3, k0, k1 uint32)
TEXT ·philox16AVX512(SB), NOSPLIT, $0-32
	PHILOX_SETUP
	MOVQ $5, CX

	// Two rounds per iteration, the state alternating between Z0–Z3 and
	// Z10–Z13, so that no round moves its result back (ten rounds end in
	// Z0–Z3).
round:
	PHILOX_ROUND(Z0, Z1, Z2, Z3, Z10, Z11, Z12, Z13)
	PHILOX_ROUND(Z10, Z11, Z12, Z13, Z0, Z1, Z2, Z3)
	DECQ CX
	JNZ  round

	PHILOX_STORE(Z0, Z1, Z2, Z3, 0)
	VZEROUPPER
	RET

// func philox32AVX512(out *[128]uint32, ctr0, c1, c2, c3, k0, k1 uint32)
//
// philox16AVX512 for counters ctr0 … ctr0 + 31: two sets of 16 (Z0–Z3,
// and Z20–Z23 from ctr0 + 16) mixed in the same loop under one key, so
// that each round's multiplications of one set overlap the other's: a
// round of one set alone waits on its own products.
TEXT ·philox32AVX512(SB), NOSPLIT, $0-32
	PHILOX_SETUP
	MOVL         $16, AX
	VPBROADCASTD AX, Z20
	VPADDD       Z0, Z20, Z20
	VMOVDQA32    Z1, Z21
	VMOVDQA32    Z2, Z22
	VMOVDQA32    Z3, Z23
	MOVQ         $5, CX

round2:
	PHILOX_MIX(Z0, Z1, Z2, Z3, Z10, Z11, Z12, Z13, Z16)
	PHILOX_MIX(Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z17)
	PHILOX_KEY_STEP
	PHILOX_MIX(Z10, Z11, Z12, Z13, Z0, Z1, Z2, Z3, Z16)
	PHILOX_MIX(Z24, Z25, Z26, Z27, Z20, Z21, Z22, Z23, Z17)
	PHILOX_KEY_STEP
	DECQ CX
	JNZ  round2

	PHILOX_STORE(Z0, Z1, Z2, Z3, 0)
	PHILOX_STORE(Z20, Z21, Z22, Z23, 256)
	VZEROUPPER
	RET

// The AVX2 form: 8 counters per call, lane l of Y0–Y3 holding the block
// of counter ctr0 + l. Sixteen Y registers hold one set at a time: the
// state (Y0–Y3, then Y8–Y11 after each round), the key (Y4, Y5), the
// constants (Y6, Y7: M0, M1; Y12, Y13: the Weyl steps) and two scratch
// registers (Y14, Y15). The high halves of the odd lanes' products are
// blended back with VPBLENDD (odd dwords).

DATA philoxIota8<>+0(SB)/8, $0x0000000100000000
DATA philoxIota8<>+8(SB)/8, $0x0000000300000002
DATA philoxIota8<>+16(SB)/8, $0x0000000500000004
DATA philoxIota8<>+24(SB)/8, $0x0000000700000006
GLOBL philoxIota8<>(SB), RODATA|NOPTR, $32

// MULHILO2 is MULHILO on Y registers.
#define MULHILO2(m, x, hi, lo, t) \
	VPMULUDQ m, x, hi; \
	VPSRLQ   $32, x, t; \
	VPMULUDQ m, t, t; \
	VPSRLQ   $32, hi, hi; \
	VPBLENDD $0xAA, t, hi, hi; \
	VPMULLD  m, x, lo

// PHILOX_ROUND2 is PHILOX_ROUND on Y registers, the key's step included.
#define PHILOX_ROUND2(x0, x1, x2, x3, y0, y1, y2, y3) \
	MULHILO2(Y6, x0, y2, y3, Y14); \
	MULHILO2(Y7, x2, y0, y1, Y15); \
	VPXOR  x1, y0, y0; \
	VPXOR  Y4, y0, y0; \
	VPXOR  x3, y2, y2; \
	VPXOR  Y5, y2, y2; \
	VPADDD Y12, Y4, Y4; \
	VPADDD Y13, Y5, Y5

// BCAST32 broadcasts a uint32 argument into every dword of y (through AX
// and X15: AVX2 broadcasts from a register only out of an XMM one).
#define BCAST32(arg, y) \
	MOVL         arg, AX; \
	VMOVD        AX, X15; \
	VPBROADCASTD X15, y

// func philox8AVX2(out *[32]uint32, ctr0, c1, c2, c3, k0, k1 uint32)
TEXT ·philox8AVX2(SB), NOSPLIT, $0-32
	MOVQ         out+0(FP), DI
	BCAST32(ctr0+8(FP), Y0)
	VPADDD       philoxIota8<>(SB), Y0, Y0
	BCAST32(c1+12(FP), Y1)
	BCAST32(c2+16(FP), Y2)
	BCAST32(c3+20(FP), Y3)
	BCAST32(k0+24(FP), Y4)
	BCAST32(k1+28(FP), Y5)
	LEAQ         philoxConst<>(SB), SI
	VPBROADCASTD 0(SI), Y6
	VPBROADCASTD 4(SI), Y7
	VPBROADCASTD 8(SI), Y12
	VPBROADCASTD 12(SI), Y13
	MOVQ         $5, CX

round8:
	PHILOX_ROUND2(Y0, Y1, Y2, Y3, Y8, Y9, Y10, Y11)
	PHILOX_ROUND2(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3)
	DECQ CX
	JNZ  round8

	// out[4l + w] = word w of lane l: a 4×4 transpose inside each 128-bit
	// half (half h of Y4+m is then lane 4h + m), then the halves paired.
	VPUNPCKLDQ  Y1, Y0, Y8
	VPUNPCKHDQ  Y1, Y0, Y9
	VPUNPCKLDQ  Y3, Y2, Y10
	VPUNPCKHDQ  Y3, Y2, Y11
	VPUNPCKLQDQ Y10, Y8, Y4
	VPUNPCKHQDQ Y10, Y8, Y5
	VPUNPCKLQDQ Y11, Y9, Y6
	VPUNPCKHQDQ Y11, Y9, Y7
	VPERM2I128  $0x20, Y5, Y4, Y0
	VPERM2I128  $0x20, Y7, Y6, Y1
	VPERM2I128  $0x31, Y5, Y4, Y2
	VPERM2I128  $0x31, Y7, Y6, Y3
	VMOVDQU     Y0, 0(DI)
	VMOVDQU     Y1, 32(DI)
	VMOVDQU     Y2, 64(DI)
	VMOVDQU     Y3, 96(DI)
	VZEROUPPER
	RET
