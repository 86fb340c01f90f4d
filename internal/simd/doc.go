// Package simd holds the inner loops of the CPU attention kernels: a small
// row-major GEMM (C += A·B) and a shifted exponential with its sum. Each has a
// portable Go version that always compiles and is always tested, and amd64
// assembly chosen at run time from the CPU's features.
package simd
