//go:build !noasm

package simd

// softcap32AVX512 computes Softcap32 16 lanes at a time with a masked
// tail, for len(s) > 0 and grad either nil or as long as s; consts is
// softcap32Consts (its layout in softcap32_amd64.s).
//
//go:noescape
func softcap32AVX512(s, grad []float32, c float32, consts *[softcap32NConsts]float32)

func softcap32(s, grad []float32, c float32) {
	if hasAVX512 {
		softcap32AVX512(s, grad, c, &softcap32Consts)
		return
	}
	softcap32Generic(s, grad, c)
}
