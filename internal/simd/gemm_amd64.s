//go:build !noasm

#include "textflag.h"
#include "mask_amd64.h"

// func gemmKernel32AVX2(mr, n, k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)
#define NAME ·gemmKernel32AVX2
#define LOGES 2
#define ES 4
#define BCAST VBROADCASTSS
#define VFMA VFMADD231PS
#define VADD VADDPS
#define VMASKMOV VMASKMOVPS
#include "gemm_avx2_amd64.h"
#undef NAME
#undef LOGES
#undef ES
#undef BCAST
#undef VFMA
#undef VADD
#undef VMASKMOV

// func gemmKernel64AVX2(mr, n, k int, a *float64, lda int, b *float64, ldb int, c *float64, ldc int)
#define NAME ·gemmKernel64AVX2
#define LOGES 3
#define ES 8
#define BCAST VBROADCASTSD
#define VFMA VFMADD231PD
#define VADD VADDPD
#define VMASKMOV VMASKMOVPD
#include "gemm_avx2_amd64.h"
#undef NAME
#undef LOGES
#undef ES
#undef BCAST
#undef VFMA
#undef VADD
#undef VMASKMOV

// func gemmKernel32AVX512(mr, n, k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)
#define NAME ·gemmKernel32AVX512
#define LOGES 2
#define ES 4
#define VW 16
#define MOVU VMOVUPS
#define BCAST VBROADCASTSS
#define VFMA VFMADD231PS
#define VADD VADDPS
#include "gemm_avx512_amd64.h"
#undef NAME
#undef LOGES
#undef ES
#undef VW
#undef MOVU
#undef BCAST
#undef VFMA
#undef VADD

// func gemmKernel64AVX512(mr, n, k int, a *float64, lda int, b *float64, ldb int, c *float64, ldc int)
#define NAME ·gemmKernel64AVX512
#define LOGES 3
#define ES 8
#define VW 8
#define MOVU VMOVUPD
#define BCAST VBROADCASTSD
#define VFMA VFMADD231PD
#define VADD VADDPD
#include "gemm_avx512_amd64.h"
#undef NAME
#undef LOGES
#undef ES
#undef VW
#undef MOVU
#undef BCAST
#undef VFMA
#undef VADD

// The Store kernels set C = A·B without reading it (GemmNNStore32).
#define STOREC

// func gemmKernel32AVX512Store(mr, n, k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)
#define NAME ·gemmKernel32AVX512Store
#define LOGES 2
#define ES 4
#define VW 16
#define MOVU VMOVUPS
#define BCAST VBROADCASTSS
#define VFMA VFMADD231PS
#define VADD VADDPS
#include "gemm_avx512_amd64.h"
#undef NAME
#undef LOGES
#undef ES
#undef VW
#undef MOVU
#undef BCAST
#undef VFMA
#undef VADD

// func gemmKernel64AVX512Store(mr, n, k int, a *float64, lda int, b *float64, ldb int, c *float64, ldc int)
#define NAME ·gemmKernel64AVX512Store
#define LOGES 3
#define ES 8
#define VW 8
#define MOVU VMOVUPD
#define BCAST VBROADCASTSD
#define VFMA VFMADD231PD
#define VADD VADDPD
#include "gemm_avx512_amd64.h"
