//go:build !amd64 || noasm

package simd

func expShift32(x []float32, shift float32) float32 { return expShiftGeneric(x, shift) }

func expShift64(x []float64, shift float64) float64 { return expShiftGeneric(x, shift) }

func softmaxRows32(rows, cols int, s []float32, ld int, mOld, mNew, sum []float32) {
	softmaxRowsGeneric(rows, cols, s, ld, mOld, mNew, sum, Max32, ExpShift32)
}
