//go:build !noasm

package simd

// fmaPeakAVX2 runs n rounds of twelve independent VFMADD231PS on ymm
// registers (8 lanes each).
//
//go:noescape
func fmaPeakAVX2(n int)

// fmaPeakAVX512 runs n rounds of twelve independent VFMADD231PS on zmm
// registers (16 lanes each).
//
//go:noescape
func fmaPeakAVX512(n int)

// fmaPeakRound32 runs n rounds on the widest path and returns the flops of
// one round.
func fmaPeakRound32(n int) float64 {
	switch {
	case hasAVX512:
		fmaPeakAVX512(n)
		return 12 * 16 * 2
	case hasAVX2:
		fmaPeakAVX2(n)
		return 12 * 8 * 2
	}
	return fmaPeakGeneric(n)
}
