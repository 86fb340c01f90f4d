//go:build !amd64 || noasm

package simd

func fmaPeakRound32(n int) float64 { return fmaPeakGeneric(n) }
