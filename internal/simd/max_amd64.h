// The running maximum's pieces that vec_amd64.s and exp_amd64.s share.

// HMAX32 reduces the float32 lanes of Y0 to their maximum in X0 (AVX2);
// HMAXZ32 those of Z0 (AVX-512F).
#define HMAX32 \
	VEXTRACTF128 $1, Y0, X1; \
	VMAXPS       X1, X0, X0; \
	VPERMILPS    $0x0e, X0, X1; \
	VMAXPS       X1, X0, X0; \
	VPERMILPS    $0x01, X0, X1; \
	VMAXSS       X1, X0, X0

#define HMAXZ32 \
	VEXTRACTF64X4 $1, Z0, Y1; \
	VMAXPS        Y1, Y0, Y0; \
	HMAX32

// MAXLOOPZ is the AVX-512 running maximum shared by max32/64AVX512
// (vec_avx512_amd64.h) and softmaxRows32AVX512 (exp_avx512_amd64.h): over
// the CX bytes at DI, two accumulators Z0 and Z1 (both set to −Inf by the
// caller; AX = 0) take 128 bytes a step, then 64, then the partial last
// vector under the opmask K1 (lanes outside K1 keep the accumulator: merge
// masking); the result is reduced into X0 by the including file's HMAXZ.
// It uses DX, BX and K1, and leaves CX shifted when there is a partial
// vector. The including file defines VMAX, MOVU, LOGES and HMAXZ.
#define MAXLOOPZ \
max128: \
	MOVQ    CX, DX \
	SUBQ    AX, DX \
	CMPQ    DX, $128 \
	JLT     max64 \
	VMOVUPS (DI)(AX*1), Z2 \
	VMOVUPS 64(DI)(AX*1), Z3 \
	VMAX    Z0, Z2, Z0 \
	VMAX    Z1, Z3, Z1 \
	ADDQ    $128, AX \
	JMP     max128 \
max64: \
	CMPQ    DX, $64 \
	JLT     maxtail \
	VMOVUPS (DI)(AX*1), Z2 \
	VMAX    Z0, Z2, Z0 \
	ADDQ    $64, AX \
	SUBQ    $64, DX \
maxtail: \
	TESTQ  DX, DX \
	JEQ    maxreduce \
	MOVQ   DX, CX \
	SHRQ   $LOGES, CX \
	MOVQ   $1, BX \
	SHLQ   CX, BX \
	DECQ   BX \
	KMOVW  BX, K1 \
	MOVU.Z (DI)(AX*1), K1, Z2 \
	VMAX   Z0, Z2, K1, Z0 \
maxreduce: \
	VMAX Z1, Z0, Z0 \
	HMAXZ
