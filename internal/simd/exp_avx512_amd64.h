// Template for the AVX-512F shifted exponential, instantiated by
// exp_amd64.s for float32 and float64. It takes L, log2e and the two parts
// of ln2 from the AVX2 template's constant table (CONSTS), but rounds with
// VRNDSCALE, applies 2^n with VSCALEF and gets every special case from
// those two and one comparison, with no blend and no branch. The
// including file defines, besides the AVX2 template's names, VMUL,
// VRNDSCALE, VSCALEF, MOVU (VMOVUPS/VMOVUPD, for masked moves), BCASTZ
// (scalar broadcast into a zmm register), C_CAP (the offset of cap in
// CONSTS), POLYINIT (loads what POLYZ reads from registers, if anything),
// POLYZ(r, p), which sets p = exp(r) for |r| ≤ ln2/2 with a constant term
// of exactly 1, and HSUMZ (reduce Z11 into X0).
//
// Per element, with y = x − shift:
//
//	y  = min(y, cap)
//	k  = not (y < L)                      (true for NaN)
//	n  = round(y·log2e) where k, else 0   (to nearest even)
//	r  = y − n·ln2hi − n·ln2lo            (Cody–Waite: n·ln2hi is exact)
//	e  = POLYZ(r)·2^n where k, else +0    (VSCALEF, zero-masked by k)
//
// Below L (x = −Inf included) e is +0, and from L up n is at least the
// smallest normal exponent plus one, so no result is subnormal; the lanes
// below L scale by 2^0 before the mask clears them, so that they produce
// no subnormal either. Above H, VSCALEF overflows to +Inf by itself; cap,
// past the overflow threshold, keeps n·ln2hi exact and r finite for +Inf
// and huge y, which then overflow the same way. NaN passes through every
// step: VMIN returns its second operand, y, when one is NaN.
//
// y is computed as x + (−shift), the same sum as x − shift but for the
// sign of an exact zero, which exp ignores: that lets the main loop's load
// be the addition's memory operand.
//
// Registers: Z15 −shift, Z14 L, Z13 cap, Z11 sum, Z10 log2e, Z9 ln2hi,
// Z8 ln2lo; Z0..Z2 and Z16..Z18 two independent working sets; Z21..Z26
// POLYZ's constants (float32). K1 and K2 the working sets' k, K4 the tail
// mask.

#define C_LOG2E 0
#define C_LN2HI 64
#define C_LN2LO 96
#define C_L 128
#define C_NEGINF 448

// EXPZ maps x (a register or memory operand) to p = exp(x − shift), with
// y and n as scratch and k as above.
#define EXPZ(x, y, n, p, k) \
	VADD        x, Z15, y; \
	VMIN        y, Z13, y; \
	VCMP        $0x05, Z14, y, k; \
	VMUL        Z10, y, n; \
	VRNDSCALE.Z $0, n, k, n; \
	VFNMA231    Z9, n, y; \
	VFNMA231    Z8, n, y; \
	POLYZ(y, p); \
	VSCALEF.Z   n, p, k, p

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
	MOVQ   x_base+0(FP), DI
	MOVQ   x_len+8(FP), CX
	SHLQ   $LOGES, CX
	BCASTZ shift+24(FP), Z15
#endif
	LEAQ   CONSTS, SI
	BCASTZ C_L(SI), Z14
	BCASTZ C_CAP(SI), Z13
	BCASTZ C_LOG2E(SI), Z10
	BCASTZ C_LN2HI(SI), Z9
	BCASTZ C_LN2LO(SI), Z8
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
	VPXORD Z11, Z11, Z11
	VSUB   Z15, Z11, Z15 // −shift
	XORQ   AX, AX
	MOVQ   CX, DX
	SUBQ   $128, DX      // DX: the bytes past the next pair
	JLT    pairsdone

loop128:
	EXPZ((DI)(AX*1), Z0, Z1, Z2, K1)
	EXPZ(64(DI)(AX*1), Z16, Z17, Z18, K2)
	VMOVUPS Z2, (DI)(AX*1)
	VMOVUPS Z18, 64(DI)(AX*1)
	VADD    Z2, Z11, Z11
	VADD    Z18, Z11, Z11
	ADDQ    $128, AX
	SUBQ    $128, DX
	JGE     loop128

pairsdone:
	ADDQ $128, DX // DX: the bytes left
	CMPQ DX, $64
	JLT  tail
	EXPZ((DI)(AX*1), Z0, Z1, Z2, K1)
	VMOVUPS Z2, (DI)(AX*1)
	VADD    Z2, Z11, Z11
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
	EXPZ(Z0, Z0, Z1, Z2, K1)
	MOVU   Z2, K4, (DI)(AX*1)
	VADD   Z2, Z11, K4, Z11

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

#undef EXPZ
#undef C_LOG2E
#undef C_LN2HI
#undef C_LN2LO
#undef C_L
#undef C_NEGINF
