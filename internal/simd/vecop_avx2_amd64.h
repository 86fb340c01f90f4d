// Template for an element-wise AVX2 operation s[i] = s[i] OP t[i] over two
// slices (t at least as long as s, which the Go wrapper checks): NAMEOP is
// the function, VOP the instruction (VADDPS, VSUBPD, …); the including file
// defines LOGES and VMASKMOV as for vec_avx2_amd64.h. The partial last
// vector goes through a mask from maskTable<>, so no element past s is read
// or written (masked-off lanes load as 0, and 0 OP 0 raises nothing that
// reaches memory).

TEXT NAMEOP(SB), NOSPLIT, $0-48
	MOVQ s_base+0(FP), DI
	MOVQ s_len+8(FP), CX
	MOVQ t_base+24(FP), SI
	SHLQ $LOGES, CX
	XORQ AX, AX

op64:
	MOVQ    CX, DX
	SUBQ    AX, DX
	CMPQ    DX, $64
	JLT     op32
	VMOVUPS (DI)(AX*1), Y0
	VMOVUPS 32(DI)(AX*1), Y1
	VOP     (SI)(AX*1), Y0, Y0
	VOP     32(SI)(AX*1), Y1, Y1
	VMOVUPS Y0, (DI)(AX*1)
	VMOVUPS Y1, 32(DI)(AX*1)
	ADDQ    $64, AX
	JMP     op64

op32:
	CMPQ    DX, $32
	JLT     optail
	VMOVUPS (DI)(AX*1), Y0
	VOP     (SI)(AX*1), Y0, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ    $32, AX
	SUBQ    $32, DX

optail:
	TESTQ    DX, DX
	JEQ      opdone
	LEAQ     maskTable<>+64(SB), BX
	SUBQ     DX, BX
	VMOVDQU  (BX), Y7
	VMASKMOV (DI)(AX*1), Y7, Y0
	VMASKMOV (SI)(AX*1), Y7, Y1
	VOP      Y1, Y0, Y0
	VMASKMOV Y0, Y7, (DI)(AX*1)

opdone:
	VZEROUPPER
	RET
