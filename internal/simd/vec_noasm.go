//go:build !amd64 || noasm

package simd

func max32(x []float32) float32 { return maxGeneric(x) }

func max64(x []float64) float64 { return maxGeneric(x) }

func scale32(x []float32, a float32) { scaleGeneric(x, a) }

func scale64(x []float64, a float64) { scaleGeneric(x, a) }

func add32(s, t []float32) { addGeneric(s, t) }

func sub32(s, t []float32) { subGeneric(s, t) }

func add64(s, t []float64) { addGeneric(s, t) }

func sub64(s, t []float64) { subGeneric(s, t) }

func mul32(s, t []float32) { mulGeneric(s, t) }
