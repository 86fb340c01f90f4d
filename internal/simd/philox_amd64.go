//go:build !noasm

package simd

// philox16AVX512 writes the Philox4x32-10 blocks of the 16 counters
// (ctr0 + l, c1, c2, c3), l < 16, under key (k0, k1): word w of block l
// at out[4l + w].
//
//go:noescape
func philox16AVX512(out *[64]uint32, ctr0, c1, c2, c3, k0, k1 uint32)

// philox32AVX512 is philox16AVX512 for the 32 counters ctr0 + l, l < 32
// (out[4l + w]), two sets of 16 in one loop.
//
//go:noescape
func philox32AVX512(out *[128]uint32, ctr0, c1, c2, c3, k0, k1 uint32)

// philox8AVX2 is philox16AVX512 for the 8 counters ctr0 + l, l < 8
// (out[4l + w]), in AVX2.
//
//go:noescape
func philox8AVX2(out *[32]uint32, ctr0, c1, c2, c3, k0, k1 uint32)

// philox32 is philox32AVX512 where the CPU has AVX-512, four philox8AVX2
// calls where it has AVX2, and reports false (writing nothing) where it
// has neither.
func philox32(out *[128]uint32, ctr0, c1, c2, c3, k0, k1 uint32) bool {
	switch {
	case hasAVX512:
		philox32AVX512(out, ctr0, c1, c2, c3, k0, k1)
	case hasAVX2:
		for s := range uint32(4) {
			philox8AVX2((*[32]uint32)(out[32*s:]), ctr0+8*s, c1, c2, c3, k0, k1)
		}
	default:
		return false
	}
	return true
}

// philox16 is philox16AVX512 where the CPU has AVX-512, two philox8AVX2
// calls where it has AVX2, and reports false (writing nothing) where it
// has neither.
func philox16(out *[64]uint32, ctr0, c1, c2, c3, k0, k1 uint32) bool {
	switch {
	case hasAVX512:
		philox16AVX512(out, ctr0, c1, c2, c3, k0, k1)
	case hasAVX2:
		philox8AVX2((*[32]uint32)(out[:32]), ctr0, c1, c2, c3, k0, k1)
		philox8AVX2((*[32]uint32)(out[32:]), ctr0+8, c1, c2, c3, k0, k1)
	default:
		return false
	}
	return true
}

// splitHalvesAVX2 is SplitHalves for chunks whole chunks of 16 draws (8
// words).
//
//go:noescape
func splitHalvesAVX2(dst *uint32, words *uint32, chunks int)

// splitHalves is splitHalvesAVX2 on whole chunks (len(words) = len(dst)/2,
// a multiple of 8) where the CPU has AVX2, and reports false (writing
// nothing) where it does not.
func splitHalves(dst, words []uint32) bool {
	if !hasAVX2 {
		return false
	}
	splitHalvesAVX2(&dst[0], &words[0], len(words)/8)
	return true
}
