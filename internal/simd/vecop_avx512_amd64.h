// Template for an element-wise AVX-512F operation s[i] = s[i] OP t[i]
// over two slices (t at least as long as s, which the Go wrapper checks):
// NAMEOP is the function, VOP the instruction (VADDPS, VSUBPD, …); the
// including file defines LOGES and MOVU as for vec_avx512_amd64.h. The
// partial last vector goes through the opmask K1, so no element past s
// is read or written.

TEXT NAMEOP(SB), NOSPLIT, $0-48
	MOVQ s_base+0(FP), DI
	MOVQ s_len+8(FP), CX
	MOVQ t_base+24(FP), SI
	SHLQ $LOGES, CX
	XORQ AX, AX

op128:
	MOVQ    CX, DX
	SUBQ    AX, DX
	CMPQ    DX, $128
	JLT     op64
	VMOVUPS (DI)(AX*1), Z0
	VMOVUPS 64(DI)(AX*1), Z1
	VOP     (SI)(AX*1), Z0, Z0
	VOP     64(SI)(AX*1), Z1, Z1
	VMOVUPS Z0, (DI)(AX*1)
	VMOVUPS Z1, 64(DI)(AX*1)
	ADDQ    $128, AX
	JMP     op128

op64:
	CMPQ    DX, $64
	JLT     optail
	VMOVUPS (DI)(AX*1), Z0
	VOP     (SI)(AX*1), Z0, Z0
	VMOVUPS Z0, (DI)(AX*1)
	ADDQ    $64, AX
	SUBQ    $64, DX

optail:
	TESTQ  DX, DX
	JEQ    opdone
	MOVQ   DX, CX
	SHRQ   $LOGES, CX
	MOVQ   $1, BX
	SHLQ   CX, BX
	DECQ   BX
	KMOVW  BX, K1
	MOVU.Z (DI)(AX*1), K1, Z0
	MOVU.Z (SI)(AX*1), K1, Z1
	VOP    Z1, Z0, Z0
	MOVU   Z0, K1, (DI)(AX*1)

opdone:
	VZEROUPPER
	RET
