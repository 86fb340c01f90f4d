//go:build !noasm

#include "textflag.h"
#include "max_amd64.h"
#include "mask_amd64.h"

// A constant repeated over 32 bytes, so that AVX2 instructions can take it
// as a memory operand and AVX-512 ones can broadcast its first element.
#define SPLAT4(sym, off, bits) \
	DATA sym+(off)(SB)/4, $bits; \
	DATA sym+(off+4)(SB)/4, $bits; \
	DATA sym+(off+8)(SB)/4, $bits; \
	DATA sym+(off+12)(SB)/4, $bits; \
	DATA sym+(off+16)(SB)/4, $bits; \
	DATA sym+(off+20)(SB)/4, $bits; \
	DATA sym+(off+24)(SB)/4, $bits; \
	DATA sym+(off+28)(SB)/4, $bits

#define SPLAT8(sym, off, bits) \
	DATA sym+(off)(SB)/8, $bits; \
	DATA sym+(off+8)(SB)/8, $bits; \
	DATA sym+(off+16)(SB)/8, $bits; \
	DATA sym+(off+24)(SB)/8, $bits

// float32 constants. ln2hi = 0.693359375 has 9 significant bits, so n·ln2hi
// is exact for |n| < 2^15; ln2hi + ln2lo = ln 2 to 5e-14. L = -86.98 keeps
// n ≥ -125, so POLY(r)·2^n stays normal; H = 88.72283 is the largest float32
// below ln(MaxFloat32). The AVX2 polynomial is the degree-7 Taylor series
// of exp: for |r| ≤ ln2/2 its truncation error is below 0.05 ulp. The
// AVX-512 one (POLYZ) is of degree 5 with 1 as its constant term, fitted
// to exp on |r| ≤ 0.3466 for the least largest error in float32 ulps and
// then moved by a few ulps, coefficient by coefficient, for the least
// error of the whole computation with its roundings: 1.89 ulp at most
// over every float32 argument (TestExpShift32Exhaustive, -exhaustive).
// cap = 128 (AVX-512 only) is past the overflow threshold, with n = 185.
SPLAT4(exp32Consts<>, 0, 0x3FB8AA3B)   // log2e
SPLAT4(exp32Consts<>, 32, 0x4B400000)  // 1.5·2^23
SPLAT4(exp32Consts<>, 64, 0x3F318000)  // ln2hi
SPLAT4(exp32Consts<>, 96, 0xB95E8083)  // ln2lo
SPLAT4(exp32Consts<>, 128, 0xC2ADF5C3) // L = -86.98
SPLAT4(exp32Consts<>, 160, 0x42B17217) // H
SPLAT4(exp32Consts<>, 192, 0x7F800000) // +Inf
SPLAT4(exp32Consts<>, 224, 0x39500D01) // 1/7!
SPLAT4(exp32Consts<>, 256, 0x3AB60B61) // 1/6!
SPLAT4(exp32Consts<>, 288, 0x3C088889) // 1/5!
SPLAT4(exp32Consts<>, 320, 0x3D2AAAAB) // 1/4!
SPLAT4(exp32Consts<>, 352, 0x3E2AAAAB) // 1/3!
SPLAT4(exp32Consts<>, 384, 0x3F000000) // 1/2!
SPLAT4(exp32Consts<>, 416, 0x3F800000) // 1
SPLAT4(exp32Consts<>, 448, 0xFF800000) // −Inf, where softmaxRows32AVX512's maxima start
SPLAT4(exp32Consts<>, 480, 0x43000000) // cap = 128
SPLAT4(exp32Consts<>, 512, 0x3C076DCF) // POLYZ's r^5
SPLAT4(exp32Consts<>, 544, 0x3D2B9E56) // r^4
SPLAT4(exp32Consts<>, 576, 0x3E2AAE61) // r^3
SPLAT4(exp32Consts<>, 608, 0x3EFFFEDF) // r^2
SPLAT4(exp32Consts<>, 640, 0x3F7FFFF8) // r
GLOBL exp32Consts<>(SB), RODATA|NOPTR, $672

// float64 constants. ln2hi has 21 trailing zero bits, so n·ln2hi is exact
// for |n| < 2^21. L = -708 keeps n ≥ -1021; H is math.Exp's overflow
// threshold. The polynomial is the degree-13 Taylor series: for
// |r| ≤ ln2/2 its truncation error is below 0.02 ulp. cap = 1024
// (AVX-512 only) is past the overflow threshold with n = 1477.
SPLAT8(exp64Consts<>, 0, 0x3FF71547652B82FE)   // log2e
SPLAT8(exp64Consts<>, 32, 0x4338000000000000)  // 1.5·2^52
SPLAT8(exp64Consts<>, 64, 0x3FE62E42FEE00000)  // ln2hi
SPLAT8(exp64Consts<>, 96, 0x3DEA39EF35793C76)  // ln2lo
SPLAT8(exp64Consts<>, 128, 0xC086200000000000) // L = -708
SPLAT8(exp64Consts<>, 160, 0x40862E42FEFA39EF) // H
SPLAT8(exp64Consts<>, 192, 0x7FF0000000000000) // +Inf
SPLAT8(exp64Consts<>, 224, 0x3DE6124613A86D09) // 1/13!
SPLAT8(exp64Consts<>, 256, 0x3E21EED8EFF8D898) // 1/12!
SPLAT8(exp64Consts<>, 288, 0x3E5AE64567F544E4) // 1/11!
SPLAT8(exp64Consts<>, 320, 0x3E927E4FB7789F5C) // 1/10!
SPLAT8(exp64Consts<>, 352, 0x3EC71DE3A556C734) // 1/9!
SPLAT8(exp64Consts<>, 384, 0x3EFA01A01A01A01A) // 1/8!
SPLAT8(exp64Consts<>, 416, 0x3F2A01A01A01A01A) // 1/7!
SPLAT8(exp64Consts<>, 448, 0x3F56C16C16C16C17) // 1/6!
SPLAT8(exp64Consts<>, 480, 0x3F81111111111111) // 1/5!
SPLAT8(exp64Consts<>, 512, 0x3FA5555555555555) // 1/4!
SPLAT8(exp64Consts<>, 544, 0x3FC5555555555555) // 1/3!
SPLAT8(exp64Consts<>, 576, 0x3FE0000000000000) // 1/2!
SPLAT8(exp64Consts<>, 608, 0x3FF0000000000000) // 1
SPLAT8(exp64Consts<>, 640, 0x4090000000000000) // cap = 1024
GLOBL exp64Consts<>(SB), RODATA|NOPTR, $672

// ---- float32 ----

#define ES 4
#define LOGES 2
#define MANT 23
#define FRAMEARGS 36
#define CONSTS exp32Consts<>(SB)
#define VSUB VSUBPS
#define VMAX VMAXPS
#define VMIN VMINPS
#define VADD VADDPS
#define VAND VANDPS
#define VANDN VANDNPS
#define VOR VORPS
#define VCMP VCMPPS
#define VMASKMOV VMASKMOVPS
#define VFMA231 VFMADD231PS
#define VFNMA231 VFNMADD231PS
#define VPSLL VPSLLD
#define VPADD VPADDD
#define MOVS VMOVSS
#define BCASTC VBROADCASTSS

// Horner's rule from 1/7! down to the constant term.
#define POLY(r, p) \
	VMOVUPS     224(SI), p; \
	VFMADD213PS 256(SI), r, p; \
	VFMADD213PS 288(SI), r, p; \
	VFMADD213PS 320(SI), r, p; \
	VFMADD213PS 352(SI), r, p; \
	VFMADD213PS 384(SI), r, p; \
	VFMADD213PS 416(SI), r, p; \
	VFMADD213PS 416(SI), r, p

#define HSUM \
	VEXTRACTF128 $1, Y11, X0; \
	VADDPS       X11, X0, X0; \
	VPERMILPS    $0x0e, X0, X1; \
	VADDPS       X1, X0, X0; \
	VPERMILPS    $0x01, X0, X1; \
	VADDSS       X1, X0, X0

// func expShift32AVX2(x []float32, shift float32) float32
#define NAME ·expShift32AVX2
#include "exp_avx2_amd64.h"
#undef NAME

#define MOVU VMOVUPS
#define BCASTZ VBROADCASTSS
#define VMUL VMULPS
#define VRNDSCALE VRNDSCALEPS
#define VSCALEF VSCALEFPS
#define C_CAP 480

// The six coefficients stay in Z21..Z26 for the whole call rather than
// being broadcast from memory by each of the polynomial's FMAs.
#define POLYINIT \
	VBROADCASTSS 512(SI), Z21; \
	VBROADCASTSS 544(SI), Z22; \
	VBROADCASTSS 576(SI), Z23; \
	VBROADCASTSS 608(SI), Z24; \
	VBROADCASTSS 640(SI), Z25; \
	VBROADCASTSS 416(SI), Z26

#define POLYZ(r, p) \
	VMOVAPS     Z21, p; \
	VFMADD213PS Z22, r, p; \
	VFMADD213PS Z23, r, p; \
	VFMADD213PS Z24, r, p; \
	VFMADD213PS Z25, r, p; \
	VFMADD213PS Z26, r, p

#define HSUMZ \
	VEXTRACTF64X4 $1, Z11, Y0; \
	VADDPS        Y11, Y0, Y11; \
	HSUM

// func expShift32AVX512(x []float32, shift float32) float32
#define NAME ·expShift32AVX512
#include "exp_avx512_amd64.h"
#undef NAME

// The rows form's maximum reduces Z0 as vec_amd64.s's max32AVX512 does.
#define HMAXZ HMAXZ32

// func softmaxRows32AVX512(rows, cols int, s *float32, ld int, mOld, mNew, sum *float32)
#define NAME ·softmaxRows32AVX512
#define ROWS
#include "exp_avx512_amd64.h"
#undef NAME
#undef ROWS
#undef HMAXZ

#undef ES
#undef LOGES
#undef MANT
#undef FRAMEARGS
#undef CONSTS
#undef VSUB
#undef VMAX
#undef VMIN
#undef VADD
#undef VAND
#undef VANDN
#undef VOR
#undef VCMP
#undef VMASKMOV
#undef VFMA231
#undef VFNMA231
#undef VPSLL
#undef VPADD
#undef MOVS
#undef BCASTC
#undef POLY
#undef HSUM
#undef MOVU
#undef BCASTZ
#undef VMUL
#undef VRNDSCALE
#undef VSCALEF
#undef C_CAP
#undef POLYINIT
#undef POLYZ
#undef HSUMZ

// ---- float64 ----

#define ES 8
#define LOGES 3
#define MANT 52
#define FRAMEARGS 40
#define CONSTS exp64Consts<>(SB)
#define VSUB VSUBPD
#define VMAX VMAXPD
#define VMIN VMINPD
#define VADD VADDPD
#define VAND VANDPD
#define VANDN VANDNPD
#define VOR VORPD
#define VCMP VCMPPD
#define VMASKMOV VMASKMOVPD
#define VFMA231 VFMADD231PD
#define VFNMA231 VFNMADD231PD
#define VPSLL VPSLLQ
#define VPADD VPADDQ
#define MOVS VMOVSD
#define BCASTC VBROADCASTSD

// Horner's rule from 1/13! down to the constant term.
#define POLY(r, p) \
	VMOVUPS     224(SI), p; \
	VFMADD213PD 256(SI), r, p; \
	VFMADD213PD 288(SI), r, p; \
	VFMADD213PD 320(SI), r, p; \
	VFMADD213PD 352(SI), r, p; \
	VFMADD213PD 384(SI), r, p; \
	VFMADD213PD 416(SI), r, p; \
	VFMADD213PD 448(SI), r, p; \
	VFMADD213PD 480(SI), r, p; \
	VFMADD213PD 512(SI), r, p; \
	VFMADD213PD 544(SI), r, p; \
	VFMADD213PD 576(SI), r, p; \
	VFMADD213PD 608(SI), r, p; \
	VFMADD213PD 608(SI), r, p

#define HSUM \
	VEXTRACTF128 $1, Y11, X0; \
	VADDPD       X11, X0, X0; \
	VPERMILPD    $0x01, X0, X1; \
	VADDSD       X1, X0, X0

// func expShift64AVX2(x []float64, shift float64) float64
#define NAME ·expShift64AVX2
#include "exp_avx2_amd64.h"
#undef NAME

#define MOVU VMOVUPD
#define BCASTZ VBROADCASTSD
#define VMUL VMULPD
#define VRNDSCALE VRNDSCALEPD
#define VSCALEF VSCALEFPD
#define C_CAP 640

// Each FMA broadcasts its coefficient from memory, a load folded into it.
#define POLYINIT

#define POLYZ(r, p) \
	VBROADCASTSD     224(SI), p; \
	VFMADD213PD.BCST 256(SI), r, p; \
	VFMADD213PD.BCST 288(SI), r, p; \
	VFMADD213PD.BCST 320(SI), r, p; \
	VFMADD213PD.BCST 352(SI), r, p; \
	VFMADD213PD.BCST 384(SI), r, p; \
	VFMADD213PD.BCST 416(SI), r, p; \
	VFMADD213PD.BCST 448(SI), r, p; \
	VFMADD213PD.BCST 480(SI), r, p; \
	VFMADD213PD.BCST 512(SI), r, p; \
	VFMADD213PD.BCST 544(SI), r, p; \
	VFMADD213PD.BCST 576(SI), r, p; \
	VFMADD213PD.BCST 608(SI), r, p; \
	VFMADD213PD.BCST 608(SI), r, p

#define HSUMZ \
	VEXTRACTF64X4 $1, Z11, Y0; \
	VADDPD        Y11, Y0, Y11; \
	HSUM

// func expShift64AVX512(x []float64, shift float64) float64
#define NAME ·expShift64AVX512
#include "exp_avx512_amd64.h"
