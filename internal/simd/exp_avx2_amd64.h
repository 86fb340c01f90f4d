// Template for the AVX2+FMA shifted exponential, instantiated by exp_amd64.s
// for float32 and float64. The including file defines the element size
// (ES, LOGES), the mantissa width MANT, the packed instructions (VSUB, VMAX,
// VMIN, VADD, VAND, VANDN, VOR, VCMP, VBLENDV, VMASKMOV, VFMA231, VFNMA231,
// VPSLL, VPADD), BCASTC (a scalar broadcast), MOVS (a scalar store), the
// constant table CONSTS (32-byte splats, offsets below), POLY(r, p) which
// sets p = exp(r) for |r| ≤ ln2/2, and HSUM which reduces Y8 into X0.
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
// Registers: Y15 shift, Y14 L, Y13 H, Y12 log2e, Y11 magic, Y10 ln2hi,
// Y9 ln2lo, Y8 sum; Y0..Y4 work, Y7 tail mask. DI x, CX len(x) in bytes,
// AX offset, SI constants.

#define C_LOG2E 0
#define C_MAGIC 32
#define C_LN2HI 64
#define C_LN2LO 96
#define C_L 128
#define C_H 160
#define C_INF 192
#define C_POLY 224

// EXP maps Y0 = x to Y3 = exp(x − shift), leaving y in Y0.
#define EXP \
	VSUB     Y15, Y0, Y0; \
	VMAX     Y0, Y14, Y1; \
	VMIN     Y13, Y1, Y1; \
	VMOVUPS  Y11, Y2; \
	VFMA231  Y12, Y1, Y2; \
	VSUB     Y11, Y2, Y4; \
	VFNMA231 Y10, Y4, Y1; \
	VFNMA231 Y9, Y4, Y1; \
	POLY(Y1, Y3); \
	VPSLL    $MANT, Y2, Y2; \
	VPADD    Y2, Y3, Y3; \
	VCMP     $0x01, Y14, Y0, Y4; \
	VANDN    Y3, Y4, Y3; \
	VCMP     $0x1e, Y13, Y0, Y4; \
	VBLENDV  Y4, C_INF(SI), Y3, Y3; \
	VCMP     $0x03, Y0, Y0, Y4; \
	VOR      Y4, Y3, Y3

TEXT NAME(SB), NOSPLIT, $0-FRAMEARGS
	MOVQ    x_base+0(FP), DI
	MOVQ    x_len+8(FP), CX
	SHLQ    $LOGES, CX
	BCASTC  shift+24(FP), Y15
	LEAQ    CONSTS, SI
	VMOVUPS C_L(SI), Y14
	VMOVUPS C_H(SI), Y13
	VMOVUPS C_LOG2E(SI), Y12
	VMOVUPS C_MAGIC(SI), Y11
	VMOVUPS C_LN2HI(SI), Y10
	VMOVUPS C_LN2LO(SI), Y9
	VXORPS  Y8, Y8, Y8
	XORQ    AX, AX

loop:
	MOVQ    CX, DX
	SUBQ    AX, DX
	CMPQ    DX, $32
	JLT     tail
	VMOVUPS (DI)(AX*1), Y0
	EXP
	VMOVUPS Y3, (DI)(AX*1)
	VADD    Y3, Y8, Y8
	ADDQ    $32, AX
	JMP     loop

tail:
	// DX < 32 bytes remain: load, compute and store them under a mask, and
	// keep the dead lanes out of the sum.
	TESTQ    DX, DX
	JEQ      reduce
	LEAQ     maskTable<>+64(SB), BX
	SUBQ     DX, BX
	VMOVDQU  (BX), Y7
	VMASKMOV (DI)(AX*1), Y7, Y0
	EXP
	VMASKMOV Y3, Y7, (DI)(AX*1)
	VAND     Y7, Y3, Y3
	VADD     Y3, Y8, Y8

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
