// Template for the AVX2 vector helpers, instantiated by vec_amd64.s for
// float32 and float64. The including file defines NAMEMAX, NAMESCALE, ES,
// LOGES, FRAMEMAX (argument frame size of the max function), NEGINF (the
// 32-byte splat of −Inf), BCASTC (scalar broadcast), MOVS (scalar store),
// VMAX, VMUL, VBLENDV, VMASKMOV and HMAX (reduce Y0 to the maximum in X0).

// Maximum with NaN lanes ignored: VMAX acc, x, acc keeps acc unless x > acc.
TEXT NAMEMAX(SB), NOSPLIT, $0-FRAMEMAX
	MOVQ    x_base+0(FP), DI
	MOVQ    x_len+8(FP), CX
	SHLQ    $LOGES, CX
	VMOVUPS NEGINF, Y6
	VMOVUPS Y6, Y0
	VMOVUPS Y6, Y1
	XORQ    AX, AX

max64:
	MOVQ    CX, DX
	SUBQ    AX, DX
	CMPQ    DX, $64
	JLT     max32
	VMOVUPS (DI)(AX*1), Y2
	VMOVUPS 32(DI)(AX*1), Y3
	VMAX    Y0, Y2, Y0
	VMAX    Y1, Y3, Y1
	ADDQ    $64, AX
	JMP     max64

max32:
	CMPQ    DX, $32
	JLT     maxtail
	VMOVUPS (DI)(AX*1), Y2
	VMAX    Y0, Y2, Y0
	ADDQ    $32, AX
	SUBQ    $32, DX

maxtail:
	// Dead lanes of the masked load read as 0: replace them by −Inf.
	TESTQ    DX, DX
	JEQ      maxreduce
	LEAQ     maskTable<>+64(SB), BX
	SUBQ     DX, BX
	VMOVDQU  (BX), Y7
	VMASKMOV (DI)(AX*1), Y7, Y2
	VBLENDV  Y7, Y2, Y6, Y2
	VMAX     Y0, Y2, Y0

maxreduce:
	VMAX Y1, Y0, Y0
	HMAX
	MOVS X0, ret+24(FP)
	VZEROUPPER
	RET

TEXT NAMESCALE(SB), NOSPLIT, $0-32
	MOVQ   x_base+0(FP), DI
	MOVQ   x_len+8(FP), CX
	SHLQ   $LOGES, CX
	BCASTC a+24(FP), Y6
	XORQ   AX, AX

scale64:
	MOVQ    CX, DX
	SUBQ    AX, DX
	CMPQ    DX, $64
	JLT     scale32
	VMUL    (DI)(AX*1), Y6, Y2
	VMUL    32(DI)(AX*1), Y6, Y3
	VMOVUPS Y2, (DI)(AX*1)
	VMOVUPS Y3, 32(DI)(AX*1)
	ADDQ    $64, AX
	JMP     scale64

scale32:
	CMPQ    DX, $32
	JLT     scaletail
	VMUL    (DI)(AX*1), Y6, Y2
	VMOVUPS Y2, (DI)(AX*1)
	ADDQ    $32, AX
	SUBQ    $32, DX

scaletail:
	TESTQ    DX, DX
	JEQ      scaledone
	LEAQ     maskTable<>+64(SB), BX
	SUBQ     DX, BX
	VMOVDQU  (BX), Y7
	VMASKMOV (DI)(AX*1), Y7, Y2
	VMUL     Y2, Y6, Y2
	VMASKMOV Y2, Y7, (DI)(AX*1)

scaledone:
	VZEROUPPER
	RET
