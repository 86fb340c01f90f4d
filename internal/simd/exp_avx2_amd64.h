// Template for the AVX2+FMA shifted exponential, instantiated by exp_amd64.s
// for float32 and float64. The including file defines the element size
// (ES, LOGES), the mantissa width MANT, the packed instructions (VSUB, VMAX,
// VMIN, VADD, VAND, VANDN, VOR, VCMP, VMASKMOV, VFMA231, VFNMA231, VPSLL,
// VPADD), BCASTC (a scalar broadcast), MOVS (a scalar store), the constant
// table CONSTS (32-byte splats, offsets below), POLY(r, p) which sets
// p = exp(r) for |r| ≤ ln2/2, and HSUM which reduces Y11 into X0.
//
// Per element, with y = x − shift:
//
//	n  = round(y·log2e)                (adding 1.5·2^MANT rounds and leaves n
//	                                    in the low bits of t)
//	r  = y − n·ln2hi − n·ln2lo         (Cody–Waite: n·ln2hi is exact)
//	e  = POLY(r) · 2^n                 (n added to the exponent field)
//	e  = 0     if y < L                (covers −Inf; below L the exponent
//	                                    add would leave the normal range)
//	e  = +Inf  if y > H                (H just below ln(MaxFloat))
//	e  = NaN   if y is NaN
//
// y is clamped to [L, H] before the reduction, so n stays small and no lane
// computes garbage that could leak through the masks.
//
// Registers: Y15 shift, Y14 L, Y13 H, Y12 magic, Y11 sum; Y0..Y4 and
// Y5..Y9 two independent working sets, Y10 tail mask; log2e, ln2hi, ln2lo
// and the polynomial are memory operands. DI x, CX len(x) in bytes, AX
// offset, SI constants.

#define C_LOG2E 0
#define C_MAGIC 32
#define C_LN2HI 64
#define C_LN2LO 96
#define C_L 128
#define C_H 160
#define C_INF 192
#define C_POLY 224

// EXP maps x to p = exp(x − shift), leaving y = x − shift in x; r, t and m
// are scratch. Two expansions on disjoint registers overlap in the
// out-of-order core, hiding the latency of the polynomial chain.
// Overflowing lanes get +Inf by adding (m AND +Inf) to a finite p.
#define EXP(x, r, t, p, m) \
	VSUB     Y15, x, x; \
	VMAX     x, Y14, r; \
	VMIN     Y13, r, r; \
	VMOVUPS  Y12, t; \
	VFMA231  C_LOG2E(SI), r, t; \
	VSUB     Y12, t, m; \
	VFNMA231 C_LN2HI(SI), m, r; \
	VFNMA231 C_LN2LO(SI), m, r; \
	POLY(r, p); \
	VPSLL    $MANT, t, t; \
	VPADD    t, p, p; \
	VCMP     $0x01, Y14, x, m; \
	VANDN    p, m, p; \
	VCMP     $0x1e, Y13, x, m; \
	VAND     C_INF(SI), m, m; \
	VADD     m, p, p; \
	VCMP     $0x03, x, x, m; \
	VOR      m, p, p

TEXT NAME(SB), NOSPLIT, $0-FRAMEARGS
	MOVQ    x_base+0(FP), DI
	MOVQ    x_len+8(FP), CX
	SHLQ    $LOGES, CX
	BCASTC  shift+24(FP), Y15
	LEAQ    CONSTS, SI
	VMOVUPS C_L(SI), Y14
	VMOVUPS C_H(SI), Y13
	VMOVUPS C_MAGIC(SI), Y12
	VXORPS  Y11, Y11, Y11
	XORQ    AX, AX

loop64:
	MOVQ    CX, DX
	SUBQ    AX, DX
	CMPQ    DX, $64
	JLT     loop32
	VMOVUPS (DI)(AX*1), Y0
	VMOVUPS 32(DI)(AX*1), Y5
	EXP(Y0, Y1, Y2, Y3, Y4)
	EXP(Y5, Y6, Y7, Y8, Y9)
	VMOVUPS Y3, (DI)(AX*1)
	VMOVUPS Y8, 32(DI)(AX*1)
	VADD    Y3, Y11, Y11
	VADD    Y8, Y11, Y11
	ADDQ    $64, AX
	JMP     loop64

loop32:
	CMPQ    DX, $32
	JLT     tail
	VMOVUPS (DI)(AX*1), Y0
	EXP(Y0, Y1, Y2, Y3, Y4)
	VMOVUPS Y3, (DI)(AX*1)
	VADD    Y3, Y11, Y11
	ADDQ    $32, AX
	SUBQ    $32, DX

tail:
	// DX < 32 bytes remain: load, compute and store them under a mask, and
	// keep the dead lanes out of the sum.
	TESTQ    DX, DX
	JEQ      reduce
	LEAQ     maskTable<>+64(SB), BX
	SUBQ     DX, BX
	VMOVDQU  (BX), Y10
	VMASKMOV (DI)(AX*1), Y10, Y0
	EXP(Y0, Y1, Y2, Y3, Y4)
	VMASKMOV Y3, Y10, (DI)(AX*1)
	VAND     Y10, Y3, Y3
	VADD     Y3, Y11, Y11

reduce:
	HSUM
	MOVS X0, ret+32(FP)
	VZEROUPPER
	RET

#undef EXP
#undef C_LOG2E
#undef C_MAGIC
#undef C_LN2HI
#undef C_LN2LO
#undef C_L
#undef C_H
#undef C_INF
#undef C_POLY
