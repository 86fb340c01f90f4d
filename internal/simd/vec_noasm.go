//go:build !amd64 || noasm

package simd

func max32(x []float32) float32 { return maxGeneric(x) }

func max64(x []float64) float64 { return maxGeneric(x) }

func scale32(x []float32, a float32) { scaleGeneric(x, a) }

func scale64(x []float64, a float64) { scaleGeneric(x, a) }
