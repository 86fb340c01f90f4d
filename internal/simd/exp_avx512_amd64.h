// Template for the AVX-512F shifted exponential: the algorithm and constant
// table of exp_avx2_amd64.h on zmm registers, with the special cases and the
// tail handled by opmasks. The including file defines, besides the AVX2
// template's names, MOVU (VMOVUPS/VMOVUPD, for masked moves), VPTERNLOG,
// BCASTZ (scalar broadcast into a zmm register), POLYINIT (loads what
// POLYZ reads from registers, if anything), POLYZ(r, p) and HSUMZ (reduce
// Z11 into X0).
//
// Registers: Z15 shift, Z14 L, Z13 H, Z12 magic, Z11 sum, Z10 log2e,
// Z9 ln2hi, Z8 ln2lo, Z7 +Inf, Z6 all ones (a NaN); Z0..Z4 and Z16..Z20
// two independent working sets; Z21..Z27 POLYZ's constants (float32).
// K1..K3 special cases, K4 tail mask, K5..K7 the main loop's test for
// special lanes.
//
// The main loop tests for special lanes (y below L, above H, or NaN) with
// one comparison per vector and fixes them up out of line: in attention
// they are rare, and the three comparisons and masked moves of the fix-up
// were a fifth of the instructions of each vector, at the end of its
// dependency chain, where they held scheduler entries that the next
// vectors' independent work could use. A vector without special lanes
// gets the same bits either way (the masked moves change nothing there).

#define C_LOG2E 0
#define C_MAGIC 32
#define C_LN2HI 64
#define C_LN2LO 96
#define C_L 128
#define C_H 160
#define C_INF 192
#define C_POLY 224
#define C_NEGINF 448

// EXPR is the range reduction and polynomial both forms below share: from
// r, y clamped to [L, H], it leaves p = exp(y) for the lanes inside the
// range (t and m are scratch).
#define EXPR(r, t, p, m) \
	VMOVUPS  Z12, t; \
	VFMA231  Z10, r, t; \
	VSUB     Z12, t, m; \
	VFNMA231 Z9, m, r; \
	VFNMA231 Z8, m, r; \
	POLYZ(r, p); \
	VPSLL    $MANT, t, t; \
	VPADD    t, p, p

// EXPZ maps x to p = exp(x − shift) like EXP of the AVX2 template, with
// opmasks for the special cases.
#define EXPZ(x, r, t, p, m) \
	VSUB     Z15, x, x; \
	VMAX     x, Z14, r; \
	VMIN     Z13, r, r; \
	EXPR(r, t, p, m); \
	FIXZ(x, p)

// EXPF is EXPZ without the special cases: it leaves in k the lanes whose y
// is not its own clamp to [L, H] (below L, above H, or NaN), for FIXZ.
#define EXPF(x, r, t, p, m, k) \
	VSUB     Z15, x, x; \
	VMAX     x, Z14, r; \
	VMIN     Z13, r, r; \
	VCMP     $0x04, x, r, k; \
	EXPR(r, t, p, m)

// FIXZ applies EXPZ's special cases to p, from y in x.
#define FIXZ(x, p) \
	VCMP   $0x05, Z14, x, K1; \
	MOVU.Z p, K1, p; \
	VCMP   $0x1e, Z13, x, K2; \
	MOVU   Z7, K2, p; \
	VCMP   $0x03, x, x, K3; \
	MOVU   Z6, K3, p

#ifdef ROWS
// The rows form (float32 only): each of rows rows of cols elements, ld
// apart from s, first gets its maximum as max32AVX512 finds it (NaNs
// skipped, −Inf for none) and its shift mNew[r] = max(mOld[r], that)
// with the rounding of Go's max (+0 over −0); a row whose shift is ±Inf is
// left as it is, for the caller, and any other runs through the loop
// below with that shift, its sum stored in sum[r]. One call per tile in
// place of two per row: the calls' set-up (the constants, the call layers
// above the assembly) cost as much as a row's work at 256 keys.
//
// Rows registers: R8 the row, R9 ld in bytes, R10 cols in bytes, R11 mOld,
// R12 mNew, R13 sum, R14 the row index.
TEXT NAME(SB), NOSPLIT, $0-56
#else
TEXT NAME(SB), NOSPLIT, $0-FRAMEARGS
	MOVQ      x_base+0(FP), DI
	MOVQ      x_len+8(FP), CX
	SHLQ      $LOGES, CX
	BCASTZ    shift+24(FP), Z15
#endif
	LEAQ      CONSTS, SI
	BCASTZ    C_L(SI), Z14
	BCASTZ    C_H(SI), Z13
	BCASTZ    C_MAGIC(SI), Z12
	BCASTZ    C_LOG2E(SI), Z10
	BCASTZ    C_LN2HI(SI), Z9
	BCASTZ    C_LN2LO(SI), Z8
	BCASTZ    C_INF(SI), Z7
	VPTERNLOG $0xff, Z6, Z6, Z6
	POLYINIT
#ifdef ROWS
	MOVQ s+16(FP), R8
	MOVQ ld+24(FP), R9
	SHLQ $LOGES, R9
	MOVQ cols+8(FP), R10
	SHLQ $LOGES, R10
	MOVQ mOld+32(FP), R11
	MOVQ mNew+40(FP), R12
	MOVQ sum+48(FP), R13
	XORQ R14, R14

row:
	CMPQ R14, rows+0(FP)
	JGE  rowsdone
	MOVQ R8, DI
	MOVQ R10, CX

	// The row's maximum, by max32AVX512's instructions.
	BCASTZ  C_NEGINF(SI), Z0
	VMOVUPS Z0, Z1
	XORQ    AX, AX

	MAXLOOPZ
	MOVQ R10, CX // MAXLOOPZ's tail shifted by CX

	// Go's max(mOld, x): neither is NaN here, so VMAXSS either way
	// round gives the larger, and the AND of the two picks +0 from a
	// pair of zeros of opposite signs (VMAXSS returns its second).
	MOVS  (R11)(R14*ES), X1
	VMAXSS X0, X1, X2
	VMAXSS X1, X0, X3
	VANDPS X2, X3, X2
	MOVS  X2, (R12)(R14*ES)
	VMOVD X2, DX
	ANDL  $0x7fffffff, DX
	CMPL  DX, $0x7f800000
	JEQ   nextrow
	VBROADCASTSS X2, Z15
#endif
	VPXORD    Z11, Z11, Z11
	XORQ      AX, AX
loop128:
	MOVQ    CX, DX
	SUBQ    AX, DX
	CMPQ    DX, $128
	JLT     loop64
	VMOVUPS   (DI)(AX*1), Z0
	VMOVUPS   64(DI)(AX*1), Z16
	EXPF(Z0, Z1, Z2, Z3, Z4, K5)
	EXPF(Z16, Z17, Z18, Z19, Z20, K6)
	KORW      K5, K6, K7
	KORTESTW  K7, K7
	JNE       fix128

store128:
	VMOVUPS Z3, (DI)(AX*1)
	VMOVUPS Z19, 64(DI)(AX*1)
	VADD    Z3, Z11, Z11
	VADD    Z19, Z11, Z11
	ADDQ    $128, AX
	JMP     loop128

fix128:
	FIXZ(Z0, Z3)
	FIXZ(Z16, Z19)
	JMP store128

loop64:
	CMPQ    DX, $64
	JLT     tail
	VMOVUPS (DI)(AX*1), Z0
	EXPZ(Z0, Z1, Z2, Z3, Z4)
	VMOVUPS Z3, (DI)(AX*1)
	VADD    Z3, Z11, Z11
	ADDQ    $64, AX
	SUBQ    $64, DX

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
	EXPZ(Z0, Z1, Z2, Z3, Z4)
	MOVU   Z3, K4, (DI)(AX*1)
	VADD   Z3, Z11, K4, Z11

reduce:
	HSUMZ
#ifdef ROWS
	MOVS X0, (R13)(R14*ES)

nextrow:
	ADDQ R9, R8
	INCQ R14
	JMP  row

rowsdone:
#else
	MOVS X0, ret+32(FP)
#endif
	VZEROUPPER
	RET

#undef EXPR
#undef EXPZ
#undef EXPF
#undef FIXZ
#undef C_LOG2E
#undef C_MAGIC
#undef C_LN2HI
#undef C_LN2LO
#undef C_L
#undef C_H
#undef C_INF
#undef C_POLY
#undef C_NEGINF
