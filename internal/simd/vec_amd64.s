//go:build !noasm

#include "textflag.h"
#include "max_amd64.h"
#include "mask_amd64.h"

DATA negInf32<>+0(SB)/8, $0xFF800000FF800000
DATA negInf32<>+8(SB)/8, $0xFF800000FF800000
DATA negInf32<>+16(SB)/8, $0xFF800000FF800000
DATA negInf32<>+24(SB)/8, $0xFF800000FF800000
GLOBL negInf32<>(SB), RODATA|NOPTR, $32

DATA negInf64<>+0(SB)/8, $0xFFF0000000000000
DATA negInf64<>+8(SB)/8, $0xFFF0000000000000
DATA negInf64<>+16(SB)/8, $0xFFF0000000000000
DATA negInf64<>+24(SB)/8, $0xFFF0000000000000
GLOBL negInf64<>(SB), RODATA|NOPTR, $32

// ---- float32 ----

#define ES 4
#define LOGES 2
#define FRAMEMAX 28
#define NEGINF negInf32<>(SB)
#define BCASTC VBROADCASTSS
#define BCASTZ VBROADCASTSS
#define MOVS VMOVSS
#define MOVU VMOVUPS
#define VMAX VMAXPS
#define VMUL VMULPS
#define VBLENDV VBLENDVPS
#define VMASKMOV VMASKMOVPS

#define HMAX HMAX32
#define HMAXZ HMAXZ32

// func max32AVX2(x []float32) float32
// func scale32AVX2(x []float32, a float32)
#define NAMEMAX ·max32AVX2
#define NAMESCALE ·scale32AVX2
#include "vec_avx2_amd64.h"
#undef NAMEMAX
#undef NAMESCALE

// func max32AVX512(x []float32) float32
// func scale32AVX512(x []float32, a float32)
#define NAMEMAX ·max32AVX512
#define NAMESCALE ·scale32AVX512
#include "vec_avx512_amd64.h"
#undef NAMEMAX
#undef NAMESCALE

// func add32AVX512(s, t []float32)
#define NAMEOP ·add32AVX512
#define VOP VADDPS
#include "vecop_avx512_amd64.h"
#undef NAMEOP
#undef VOP

// func sub32AVX512(s, t []float32)
#define NAMEOP ·sub32AVX512
#define VOP VSUBPS
#include "vecop_avx512_amd64.h"
#undef NAMEOP
#undef VOP

// func mul32AVX512(s, t []float32)
#define NAMEOP ·mul32AVX512
#define VOP VMULPS
#include "vecop_avx512_amd64.h"
#undef NAMEOP
#undef VOP

// func add32AVX2(s, t []float32)
#define NAMEOP ·add32AVX2
#define VOP VADDPS
#include "vecop_avx2_amd64.h"
#undef NAMEOP
#undef VOP

// func sub32AVX2(s, t []float32)
#define NAMEOP ·sub32AVX2
#define VOP VSUBPS
#include "vecop_avx2_amd64.h"
#undef NAMEOP
#undef VOP

// func mul32AVX2(s, t []float32)
#define NAMEOP ·mul32AVX2
#define VOP VMULPS
#include "vecop_avx2_amd64.h"
#undef NAMEOP
#undef VOP

#undef ES
#undef LOGES
#undef FRAMEMAX
#undef NEGINF
#undef BCASTC
#undef BCASTZ
#undef MOVS
#undef MOVU
#undef VMAX
#undef VMUL
#undef VBLENDV
#undef VMASKMOV
#undef HMAX
#undef HMAXZ

// ---- float64 ----

#define ES 8
#define LOGES 3
#define FRAMEMAX 32
#define NEGINF negInf64<>(SB)
#define BCASTC VBROADCASTSD
#define BCASTZ VBROADCASTSD
#define MOVS VMOVSD
#define MOVU VMOVUPD
#define VMAX VMAXPD
#define VMUL VMULPD
#define VBLENDV VBLENDVPD
#define VMASKMOV VMASKMOVPD

#define HMAX \
	VEXTRACTF128 $1, Y0, X1; \
	VMAXPD       X1, X0, X0; \
	VPERMILPD    $0x01, X0, X1; \
	VMAXSD       X1, X0, X0

#define HMAXZ \
	VEXTRACTF64X4 $1, Z0, Y1; \
	VMAXPD        Y1, Y0, Y0; \
	HMAX

// func max64AVX2(x []float64) float64
// func scale64AVX2(x []float64, a float64)
#define NAMEMAX ·max64AVX2
#define NAMESCALE ·scale64AVX2
#include "vec_avx2_amd64.h"
#undef NAMEMAX
#undef NAMESCALE

// func max64AVX512(x []float64) float64
// func scale64AVX512(x []float64, a float64)
#define NAMEMAX ·max64AVX512
#define NAMESCALE ·scale64AVX512
#include "vec_avx512_amd64.h"

// func add64AVX512(s, t []float64)
#define NAMEOP ·add64AVX512
#define VOP VADDPD
#include "vecop_avx512_amd64.h"
#undef NAMEOP
#undef VOP

// func sub64AVX512(s, t []float64)
#define NAMEOP ·sub64AVX512
#define VOP VSUBPD
#include "vecop_avx512_amd64.h"
#undef NAMEOP
#undef VOP

// func add64AVX2(s, t []float64)
#define NAMEOP ·add64AVX2
#define VOP VADDPD
#include "vecop_avx2_amd64.h"
#undef NAMEOP
#undef VOP

// func sub64AVX2(s, t []float64)
#define NAMEOP ·sub64AVX2
#define VOP VSUBPD
#include "vecop_avx2_amd64.h"
#undef NAMEOP
#undef VOP
