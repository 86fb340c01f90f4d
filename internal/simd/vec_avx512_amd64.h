// Template for the AVX-512F vector helpers (see vec_avx2_amd64.h); the
// partial last vector is handled with the opmask K1. The including file
// also defines VW (elements per zmm), MOVU (VMOVUPS/VMOVUPD), BCASTZ and
// HMAXZ (reduce Z0 to the maximum in X0).

TEXT NAMEMAX(SB), NOSPLIT, $0-FRAMEMAX
	MOVQ    x_base+0(FP), DI
	MOVQ    x_len+8(FP), CX
	SHLQ    $LOGES, CX
	LEAQ    NEGINF, SI
	BCASTZ  (SI), Z0
	VMOVUPS Z0, Z1
	XORQ    AX, AX

	MAXLOOPZ
	MOVS X0, ret+24(FP)
	VZEROUPPER
	RET

TEXT NAMESCALE(SB), NOSPLIT, $0-32
	MOVQ   x_base+0(FP), DI
	MOVQ   x_len+8(FP), CX
	SHLQ   $LOGES, CX
	BCASTZ a+24(FP), Z6
	XORQ   AX, AX

scale128:
	MOVQ    CX, DX
	SUBQ    AX, DX
	CMPQ    DX, $128
	JLT     scale64
	VMUL    (DI)(AX*1), Z6, Z2
	VMUL    64(DI)(AX*1), Z6, Z3
	VMOVUPS Z2, (DI)(AX*1)
	VMOVUPS Z3, 64(DI)(AX*1)
	ADDQ    $128, AX
	JMP     scale128

scale64:
	CMPQ    DX, $64
	JLT     scaletail
	VMUL    (DI)(AX*1), Z6, Z2
	VMOVUPS Z2, (DI)(AX*1)
	ADDQ    $64, AX
	SUBQ    $64, DX

scaletail:
	TESTQ  DX, DX
	JEQ    scaledone
	MOVQ   DX, CX
	SHRQ   $LOGES, CX
	MOVQ   $1, BX
	SHLQ   CX, BX
	DECQ   BX
	KMOVW  BX, K1
	MOVU.Z (DI)(AX*1), K1, Z2
	VMUL   Z2, Z6, Z2
	MOVU   Z2, K1, (DI)(AX*1)

scaledone:
	VZEROUPPER
	RET
