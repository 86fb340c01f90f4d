package simd

// Philox16 writes the Philox4x32-10 blocks (Random123's, as
// kernels.Dropout defines them) of the 16 counters (ctr0 + l, c1, c2, c3),
// l < 16, under key (k0, k1), word w of block l at out[4l + w], and
// reports true; where no vector implementation exists (no AVX-512, or the
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
