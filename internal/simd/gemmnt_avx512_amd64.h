// Macros of gemmNT32AVX512 (gemmnt_amd64.s) for one 16×16 tile of B:
// its 16 rows are loaded into Z0-Z15 from SI at byte column AX (BX: ldb in
// bytes), transposed in registers, and multiplied into the accumulators
// Z28-Z31 of the four rows of A at R8-R11. Each macro is written out in
// full. The order and the registers are what make GemmNT32 bit-identical
// to GemmNN32 on the transposed B (gemmnt_amd64.s says why).

// NT_ROW loads the row of B at DI, 16 columns from byte AX; NT_ROWZ the
// first k mod 16 of them (K1), zero beyond. NT_STEP moves DI to the next
// row; NT_STEP_TAIL(i) only while rows are left past row i (R13 of them
// from j0), so that the rows past n repeat the last one.
#define NT_ROW(z) VMOVUPS (DI)(AX*1), z
#define NT_ROWZ(z) VMOVUPS.Z (DI)(AX*1), K1, z
#define NT_STEP ADDQ BX, DI
#define NT_STEP_TAIL(i) LEAQ (DI)(BX*1), R15; CMPQ R13, $i; CMOVQGT R15, DI

// NT_LOADS loads 16 full rows of 16 columns.
#define NT_LOADS \
	MOVQ SI, DI; \
	NT_ROW(Z0); \
	NT_STEP; \
	NT_ROW(Z1); \
	NT_STEP; \
	NT_ROW(Z2); \
	NT_STEP; \
	NT_ROW(Z3); \
	NT_STEP; \
	NT_ROW(Z4); \
	NT_STEP; \
	NT_ROW(Z5); \
	NT_STEP; \
	NT_ROW(Z6); \
	NT_STEP; \
	NT_ROW(Z7); \
	NT_STEP; \
	NT_ROW(Z8); \
	NT_STEP; \
	NT_ROW(Z9); \
	NT_STEP; \
	NT_ROW(Z10); \
	NT_STEP; \
	NT_ROW(Z11); \
	NT_STEP; \
	NT_ROW(Z12); \
	NT_STEP; \
	NT_ROW(Z13); \
	NT_STEP; \
	NT_ROW(Z14); \
	NT_STEP; \
	NT_ROW(Z15)

// NT_LOADS_PF is NT_LOADS that also prefetches the same columns of the
// next tile's 16 rows (R15 walks them), so that the rows of B stream from
// memory ahead of the loads: a tile's 16 rows at once are 16 short
// streams, too short for the hardware's prefetchers to follow.
#define NT_PF PREFETCHT0 (R15)(AX*1); ADDQ BX, R15
#define NT_LOADS_PF \
	MOVQ SI, DI; \
	LEAQ (SI)(BX*8), R15; \
	LEAQ (R15)(BX*8), R15; \
	NT_ROW(Z0); \
	NT_PF; \
	NT_STEP; \
	NT_ROW(Z1); \
	NT_PF; \
	NT_STEP; \
	NT_ROW(Z2); \
	NT_PF; \
	NT_STEP; \
	NT_ROW(Z3); \
	NT_PF; \
	NT_STEP; \
	NT_ROW(Z4); \
	NT_PF; \
	NT_STEP; \
	NT_ROW(Z5); \
	NT_PF; \
	NT_STEP; \
	NT_ROW(Z6); \
	NT_PF; \
	NT_STEP; \
	NT_ROW(Z7); \
	NT_PF; \
	NT_STEP; \
	NT_ROW(Z8); \
	NT_PF; \
	NT_STEP; \
	NT_ROW(Z9); \
	NT_PF; \
	NT_STEP; \
	NT_ROW(Z10); \
	NT_PF; \
	NT_STEP; \
	NT_ROW(Z11); \
	NT_PF; \
	NT_STEP; \
	NT_ROW(Z12); \
	NT_PF; \
	NT_STEP; \
	NT_ROW(Z13); \
	NT_PF; \
	NT_STEP; \
	NT_ROW(Z14); \
	NT_PF; \
	NT_STEP; \
	NT_ROW(Z15); \
	NT_PF

// NT_LOADS_REST loads the first k mod 16 columns of 16 rows.
#define NT_LOADS_REST \
	MOVQ SI, DI; \
	NT_ROWZ(Z0); \
	NT_STEP; \
	NT_ROWZ(Z1); \
	NT_STEP; \
	NT_ROWZ(Z2); \
	NT_STEP; \
	NT_ROWZ(Z3); \
	NT_STEP; \
	NT_ROWZ(Z4); \
	NT_STEP; \
	NT_ROWZ(Z5); \
	NT_STEP; \
	NT_ROWZ(Z6); \
	NT_STEP; \
	NT_ROWZ(Z7); \
	NT_STEP; \
	NT_ROWZ(Z8); \
	NT_STEP; \
	NT_ROWZ(Z9); \
	NT_STEP; \
	NT_ROWZ(Z10); \
	NT_STEP; \
	NT_ROWZ(Z11); \
	NT_STEP; \
	NT_ROWZ(Z12); \
	NT_STEP; \
	NT_ROWZ(Z13); \
	NT_STEP; \
	NT_ROWZ(Z14); \
	NT_STEP; \
	NT_ROWZ(Z15)

// NT_LOADS_TAIL loads the R13 < 16 rows left, the last one repeated.
#define NT_LOADS_TAIL \
	MOVQ SI, DI; \
	NT_ROW(Z0); \
	NT_STEP_TAIL(1); \
	NT_ROW(Z1); \
	NT_STEP_TAIL(2); \
	NT_ROW(Z2); \
	NT_STEP_TAIL(3); \
	NT_ROW(Z3); \
	NT_STEP_TAIL(4); \
	NT_ROW(Z4); \
	NT_STEP_TAIL(5); \
	NT_ROW(Z5); \
	NT_STEP_TAIL(6); \
	NT_ROW(Z6); \
	NT_STEP_TAIL(7); \
	NT_ROW(Z7); \
	NT_STEP_TAIL(8); \
	NT_ROW(Z8); \
	NT_STEP_TAIL(9); \
	NT_ROW(Z9); \
	NT_STEP_TAIL(10); \
	NT_ROW(Z10); \
	NT_STEP_TAIL(11); \
	NT_ROW(Z11); \
	NT_STEP_TAIL(12); \
	NT_ROW(Z12); \
	NT_STEP_TAIL(13); \
	NT_ROW(Z13); \
	NT_STEP_TAIL(14); \
	NT_ROW(Z14); \
	NT_STEP_TAIL(15); \
	NT_ROW(Z15)

// NT_LOADS_TAIL_REST is NT_LOADS_TAIL on the first k mod 16 columns.
#define NT_LOADS_TAIL_REST \
	MOVQ SI, DI; \
	NT_ROWZ(Z0); \
	NT_STEP_TAIL(1); \
	NT_ROWZ(Z1); \
	NT_STEP_TAIL(2); \
	NT_ROWZ(Z2); \
	NT_STEP_TAIL(3); \
	NT_ROWZ(Z3); \
	NT_STEP_TAIL(4); \
	NT_ROWZ(Z4); \
	NT_STEP_TAIL(5); \
	NT_ROWZ(Z5); \
	NT_STEP_TAIL(6); \
	NT_ROWZ(Z6); \
	NT_STEP_TAIL(7); \
	NT_ROWZ(Z7); \
	NT_STEP_TAIL(8); \
	NT_ROWZ(Z8); \
	NT_STEP_TAIL(9); \
	NT_ROWZ(Z9); \
	NT_STEP_TAIL(10); \
	NT_ROWZ(Z10); \
	NT_STEP_TAIL(11); \
	NT_ROWZ(Z11); \
	NT_STEP_TAIL(12); \
	NT_ROWZ(Z12); \
	NT_STEP_TAIL(13); \
	NT_ROWZ(Z13); \
	NT_STEP_TAIL(14); \
	NT_ROWZ(Z14); \
	NT_STEP_TAIL(15); \
	NT_ROWZ(Z15)

// NT_TRANSPOSE transposes Z0-Z15 in registers. Column p of the tile is then
// in the register NT_FMA16 names for it: Z0, Z24, Z16, Z25, Z9, Z11, Z13,
// Z15, Z10, Z14, Z4, Z18, Z21, Z23, Z26, Z27 for p = 0 … 15.
#define NT_TRANSPOSE \
	VUNPCKHPS Z1, Z0, Z16; \
	VUNPCKLPS Z1, Z0, Z0; \
	VUNPCKHPS Z3, Z2, Z17; \
	VUNPCKLPS Z3, Z2, Z2; \
	VUNPCKHPS Z5, Z4, Z18; \
	VUNPCKLPS Z5, Z4, Z4; \
	VUNPCKHPS Z7, Z6, Z19; \
	VUNPCKLPS Z7, Z6, Z6; \
	VUNPCKHPS Z9, Z8, Z20; \
	VUNPCKLPS Z9, Z8, Z8; \
	VUNPCKHPS Z11, Z10, Z21; \
	VUNPCKLPS Z11, Z10, Z10; \
	VUNPCKHPS Z13, Z12, Z22; \
	VUNPCKLPS Z13, Z12, Z12; \
	VUNPCKHPS Z15, Z14, Z23; \
	VUNPCKLPS Z15, Z14, Z14; \
	VUNPCKHPD Z2, Z0, Z24; \
	VUNPCKLPD Z2, Z0, Z0; \
	VUNPCKHPD Z17, Z16, Z25; \
	VUNPCKLPD Z17, Z16, Z16; \
	VUNPCKHPD Z6, Z4, Z26; \
	VUNPCKLPD Z6, Z4, Z4; \
	VUNPCKHPD Z19, Z18, Z27; \
	VUNPCKLPD Z19, Z18, Z18; \
	VUNPCKHPD Z10, Z8, Z1; \
	VUNPCKLPD Z10, Z8, Z8; \
	VUNPCKHPD Z21, Z20, Z3; \
	VUNPCKLPD Z21, Z20, Z20; \
	VUNPCKHPD Z14, Z12, Z5; \
	VUNPCKLPD Z14, Z12, Z12; \
	VUNPCKHPD Z23, Z22, Z7; \
	VUNPCKLPD Z23, Z22, Z22; \
	VSHUFF32X4 $0xDD, Z4, Z0, Z9; \
	VSHUFF32X4 $0x88, Z4, Z0, Z0; \
	VSHUFF32X4 $0xDD, Z26, Z24, Z11; \
	VSHUFF32X4 $0x88, Z26, Z24, Z24; \
	VSHUFF32X4 $0xDD, Z18, Z16, Z13; \
	VSHUFF32X4 $0x88, Z18, Z16, Z16; \
	VSHUFF32X4 $0xDD, Z27, Z25, Z15; \
	VSHUFF32X4 $0x88, Z27, Z25, Z25; \
	VSHUFF32X4 $0xDD, Z12, Z8, Z2; \
	VSHUFF32X4 $0x88, Z12, Z8, Z8; \
	VSHUFF32X4 $0xDD, Z5, Z1, Z17; \
	VSHUFF32X4 $0x88, Z5, Z1, Z1; \
	VSHUFF32X4 $0xDD, Z22, Z20, Z6; \
	VSHUFF32X4 $0x88, Z22, Z20, Z20; \
	VSHUFF32X4 $0xDD, Z7, Z3, Z19; \
	VSHUFF32X4 $0x88, Z7, Z3, Z3; \
	VSHUFF32X4 $0xDD, Z8, Z0, Z10; \
	VSHUFF32X4 $0x88, Z8, Z0, Z0; \
	VSHUFF32X4 $0xDD, Z2, Z9, Z21; \
	VSHUFF32X4 $0x88, Z2, Z9, Z9; \
	VSHUFF32X4 $0xDD, Z1, Z24, Z14; \
	VSHUFF32X4 $0x88, Z1, Z24, Z24; \
	VSHUFF32X4 $0xDD, Z17, Z11, Z23; \
	VSHUFF32X4 $0x88, Z17, Z11, Z11; \
	VSHUFF32X4 $0xDD, Z20, Z16, Z4; \
	VSHUFF32X4 $0x88, Z20, Z16, Z16; \
	VSHUFF32X4 $0xDD, Z6, Z13, Z26; \
	VSHUFF32X4 $0x88, Z6, Z13, Z13; \
	VSHUFF32X4 $0xDD, Z3, Z25, Z18; \
	VSHUFF32X4 $0x88, Z3, Z25, Z25; \
	VSHUFF32X4 $0xDD, Z19, Z15, Z27; \
	VSHUFF32X4 $0x88, Z19, Z15, Z15

// NT_FMA adds column p of the tile (register z; off = 4p, its byte offset
// along the rows of A), times A[i][p] broadcast, to the accumulator of
// each row i.
#define NT_FMA(off, z) \
	VFMADD231PS.BCST off(R8)(AX*1), z, Z28; \
	VFMADD231PS.BCST off(R9)(AX*1), z, Z29; \
	VFMADD231PS.BCST off(R10)(AX*1), z, Z30; \
	VFMADD231PS.BCST off(R11)(AX*1), z, Z31

// NT_FMA16 adds all 16 columns, in ascending p.
#define NT_FMA16 \
	NT_FMA(0, Z0); \
	NT_FMA(4, Z24); \
	NT_FMA(8, Z16); \
	NT_FMA(12, Z25); \
	NT_FMA(16, Z9); \
	NT_FMA(20, Z11); \
	NT_FMA(24, Z13); \
	NT_FMA(28, Z15); \
	NT_FMA(32, Z10); \
	NT_FMA(36, Z14); \
	NT_FMA(40, Z4); \
	NT_FMA(44, Z18); \
	NT_FMA(48, Z21); \
	NT_FMA(52, Z23); \
	NT_FMA(56, Z26); \
	NT_FMA(60, Z27)

// NT_FMA_REST adds the first CX = k mod 16 columns, leaving for store
// after column CX − 1 (after the last, it falls through).
#define NT_FMA_REST \
	NT_FMA(0, Z0); \
	CMPQ CX, $1; \
	JEQ  store; \
	NT_FMA(4, Z24); \
	CMPQ CX, $2; \
	JEQ  store; \
	NT_FMA(8, Z16); \
	CMPQ CX, $3; \
	JEQ  store; \
	NT_FMA(12, Z25); \
	CMPQ CX, $4; \
	JEQ  store; \
	NT_FMA(16, Z9); \
	CMPQ CX, $5; \
	JEQ  store; \
	NT_FMA(20, Z11); \
	CMPQ CX, $6; \
	JEQ  store; \
	NT_FMA(24, Z13); \
	CMPQ CX, $7; \
	JEQ  store; \
	NT_FMA(28, Z15); \
	CMPQ CX, $8; \
	JEQ  store; \
	NT_FMA(32, Z10); \
	CMPQ CX, $9; \
	JEQ  store; \
	NT_FMA(36, Z14); \
	CMPQ CX, $10; \
	JEQ  store; \
	NT_FMA(40, Z4); \
	CMPQ CX, $11; \
	JEQ  store; \
	NT_FMA(44, Z18); \
	CMPQ CX, $12; \
	JEQ  store; \
	NT_FMA(48, Z21); \
	CMPQ CX, $13; \
	JEQ  store; \
	NT_FMA(52, Z23); \
	CMPQ CX, $14; \
	JEQ  store; \
	NT_FMA(56, Z26); \
	CMPQ CX, $15; \
	JEQ  store; \
	NT_FMA(60, Z27)
