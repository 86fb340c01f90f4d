package simd

// Philox16 writes the Philox4x32-10 blocks (Random123's, as
// kernels.Dropout defines them) of the 16 counters (ctr0 + l, c1, c2, c3),
// l < 16, under key (k0, k1), word w of block l at out[4l + w], and
// reports true; where no vector implementation exists (no AVX2, or the
// noasm build tag) it writes nothing and reports false, and the caller
// computes the blocks itself.
func Philox16(out *[64]uint32, ctr0, c1, c2, c3, k0, k1 uint32) bool {
	return philox16(out, ctr0, c1, c2, c3, k0, k1)
}

// Philox32 is Philox16 for the 32 counters (ctr0 + l, c1, c2, c3), l <
// 32: word w of block l at out[4l + w]. Two sets of 16 share each round's
// latency, so a 128-key row costs less than two Philox16 calls.
func Philox32(out *[128]uint32, ctr0, c1, c2, c3, k0, k1 uint32) bool {
	return philox32(out, ctr0, c1, c2, c3, k0, k1)
}

// SplitHalves writes the 16-bit halves of words, each word's low half
// first, zero-extended, into dst: dst[2m] = words[m] & 0xffff and
// dst[2m+1] = words[m] >> 16, for as many as fit (min(len(dst),
// 2·len(words))), and returns that count. kernels.Dropout takes an
// entry's draw from half a Philox word; the vector routine (AVX2) splits
// 16 at a time, the rest here.
func SplitHalves(dst, words []uint32) int {
	n := min(len(dst), 2*len(words))
	x := 0
	if chunks := n / 16; chunks > 0 && splitHalves(dst[:16*chunks], words[:8*chunks]) {
		x = 16 * chunks
	}
	for ; x+1 < n; x += 2 {
		w := words[x/2]
		dst[x], dst[x+1] = w&0xffff, w>>16
	}
	if x < n {
		dst[x] = words[x/2] & 0xffff
	}
	return n
}
