package kernels

import (
	"fmt"
	"math"

	"github.com/gorgonia-flash/flashattention/internal/simd"
)

// Dropout describes dropout on the attention probabilities: each P_ij of
// the softmax is dropped (set to 0) with probability P, and the kept ones
// are scaled by KeepScale = 1/(1−P), so that the expected output is that of
// attention without dropout. Its zero value is off.
//
// # The mask
//
// Whether entry (row i, key j) of head bh is kept is a pure function of
// (Seed, Offset, bh, i, j), so that a forward and its backward, the CPU
// kernels and the CUDA kernels, and the float64 reference all draw the same
// mask bit for bit without storing it. Here bh = b·H + h is the index of the
// query head among the B·H (b the batch entry, h the query head, H the
// number of query heads; under grouped-query attention it is still the
// query head), i the query row and j the key, all counted from 0 and all
// below 2^31 (Params.Validate bounds them). With
//
//	ctr = {uint32(j/8), uint32(i), uint32(bh), uint32(Offset)}
//	key = {uint32(Seed), uint32(Seed>>32)}
//	w   = philox4x32(ctr, key)[(j mod 8)/2]
//	u   = (w >> (16·(j mod 2))) mod 2^16
//	t   = Threshold() = floor(P·2^16)
//
// the entry is kept if and only if u ≥ t, so that it is dropped with
// probability t/2^16 (P rounded down to a multiple of 2^−16), and KeepScale
// is 2^16/(2^16 − t), the inverse of the keep probability itself. One
// Philox block gives the 16-bit draws of eight consecutive keys 8m … 8m+7
// of a row, in that order (each word's low half first). Sixteen bits per
// entry rather than a whole word halve the Philox work of every kernel,
// and the dropping probability stays within 2^−16 of P (FlashAttention 2
// draws 8 bits, probabilities in steps of 1/256). Only the low 32 bits of
// Offset reach the counter: Offset and Offset + 2^32 draw the same mask.
//
// philox4x32 is Philox4x32-10 of Random123 (Salmon, Moraes, Dror and Shaw,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11), which in unsigned
// 32-bit arithmetic (additions wrap, mulhi and mullo the high and low 32
// bits of the 64-bit product) is:
//
//	x0, x1, x2, x3 = ctr[0], ctr[1], ctr[2], ctr[3]
//	k0, k1 = key[0], key[1]
//	repeat 10 times:
//	    x0, x1, x2, x3 = mulhi(0xCD9E8D57, x2) ^ x1 ^ k0, mullo(0xCD9E8D57, x2),
//	                     mulhi(0xD2511F53, x0) ^ x3 ^ k1, mullo(0xD2511F53, x0)
//	    k0, k1 = k0 + 0x9E3779B9, k1 + 0xBB67AE85
//	return {x0, x1, x2, x3}
//
// (the four new words are computed from the old ones, all at once; the
// last key bump is unused). The same function underlies curand's
// Philox4_32_10 generator, whose state and counter layout are its own: a
// CUDA kernel computes the function directly (mulhi is __umulhi) rather
// than through curand_init and curand4. The host should pass Threshold() to
// a kernel as an integer and compare the 16-bit draws with it as unsigned
// integers, rather than compare floats in [0, 1), so that no rounding can
// tell the two apart.
type Dropout struct {
	// P is the probability of dropping an attention probability: 0 is off,
	// and it must be in [0, 1).
	P float64
	// Seed is chosen by the user; one seed gives a reproducible sequence of
	// masks.
	Seed uint64
	// Offset is a per-run counter that the op advances, so that every run
	// draws a fresh mask while a seed still gives a reproducible sequence
	// of masks. Only its low 32 bits are used: it wraps at 2^32.
	Offset uint64
}

// Philox4x32-10 constants (Random123: PHILOX_M4x32_0, PHILOX_M4x32_1,
// PHILOX_W32_0, PHILOX_W32_1).
const (
	philoxM0 = 0xD2511F53
	philoxM1 = 0xCD9E8D57
	philoxW0 = 0x9E3779B9 // golden ratio
	philoxW1 = 0xBB67AE85 // √3 − 1
)

// philox4x32 is Philox4x32-10 of Random123 (see Dropout): a bijection of
// the 128-bit counter ctr for each 64-bit key.
func philox4x32(ctr [4]uint32, key [2]uint32) [4]uint32 {
	x0, x1, x2, x3 := philox(ctr[0], ctr[1], ctr[2], ctr[3], key[0], key[1])
	return [4]uint32{x0, x1, x2, x3}
}

// philox is philox4x32 on words, which stay in registers: ten rounds,
// unrolled, the key bumped after each.
func philox(x0, x1, x2, x3, k0, k1 uint32) (uint32, uint32, uint32, uint32) {
	x0, x1, x2, x3 = philoxRound(x0, x1, x2, x3, k0, k1)
	k0, k1 = k0+philoxW0, k1+philoxW1
	x0, x1, x2, x3 = philoxRound(x0, x1, x2, x3, k0, k1)
	k0, k1 = k0+philoxW0, k1+philoxW1
	x0, x1, x2, x3 = philoxRound(x0, x1, x2, x3, k0, k1)
	k0, k1 = k0+philoxW0, k1+philoxW1
	x0, x1, x2, x3 = philoxRound(x0, x1, x2, x3, k0, k1)
	k0, k1 = k0+philoxW0, k1+philoxW1
	x0, x1, x2, x3 = philoxRound(x0, x1, x2, x3, k0, k1)
	k0, k1 = k0+philoxW0, k1+philoxW1
	x0, x1, x2, x3 = philoxRound(x0, x1, x2, x3, k0, k1)
	k0, k1 = k0+philoxW0, k1+philoxW1
	x0, x1, x2, x3 = philoxRound(x0, x1, x2, x3, k0, k1)
	k0, k1 = k0+philoxW0, k1+philoxW1
	x0, x1, x2, x3 = philoxRound(x0, x1, x2, x3, k0, k1)
	k0, k1 = k0+philoxW0, k1+philoxW1
	x0, x1, x2, x3 = philoxRound(x0, x1, x2, x3, k0, k1)
	k0, k1 = k0+philoxW0, k1+philoxW1
	return philoxRound(x0, x1, x2, x3, k0, k1)
}

// philoxRound is one round of Philox4x32 with round key (k0, k1).
func philoxRound(x0, x1, x2, x3, k0, k1 uint32) (uint32, uint32, uint32, uint32) {
	p0 := uint64(philoxM0) * uint64(x0)
	p1 := uint64(philoxM1) * uint64(x2)
	return uint32(p1>>32) ^ x1 ^ k0, uint32(p1), uint32(p0>>32) ^ x3 ^ k1, uint32(p0)
}

// Validate reports whether P is a probability that dropout can use, in
// [0, 1); the error wraps ErrInvalidParams.
func (d Dropout) Validate() error {
	if !(d.P >= 0 && d.P < 1) { // also refuses NaN
		return fmt.Errorf("%w: dropout probability %v, must be in [0, 1) (0 is off)", ErrInvalidParams, d.P)
	}
	return nil
}

// On reports whether dropout drops anything: Threshold() > 0, that is
// P ≥ 2^−16 (a smaller P rounds to 0 and keeps every entry).
func (d Dropout) On() bool { return d.Threshold() > 0 }

// KeepScale is 2^16/(2^16 − t) for t = Threshold(), the inverse of the
// probability that an entry is kept: the factor of the kept probabilities,
// so that the expected output is exactly that of attention without
// dropout. It is within 2^−16·KeepScale² of 1/(1−P).
func (d Dropout) KeepScale() float64 { return drawRange / (drawRange - float64(d.Threshold())) }

// drawRange is 2^16, the number of values of an entry's draw.
const drawRange = 1 << 16

// Threshold returns t = floor(P·2^16): an entry is kept if and only if its
// 16-bit draw is at least t, so that it is dropped with probability
// t/2^16. P < 2^−16 gives 0 (every entry kept). For a P that Validate
// refuses, NaN and P < 0 give 0 and P ≥ 1 gives 2^16 − 1.
func (d Dropout) Threshold() uint32 {
	switch {
	case !(d.P > 0):
		return 0
	case d.P >= 1:
		return drawRange - 1
	}
	return uint32(math.Floor(d.P * drawRange))
}

// key returns the Philox key of the seed.
func (d Dropout) key() (k0, k1 uint32) { return uint32(d.Seed), uint32(d.Seed >> 32) }

// Kept reports whether entry (row i, key j) of query head bh is kept: half
// j mod 2 of word (j mod 8)/2 of philox4x32({j/8, i, bh, Offset}, Seed) is
// at least Threshold(). It is the definition, entry by entry; KeepRow
// draws a row. bh, i and j must not be negative.
func (d Dropout) Kept(bh, i, j int) bool {
	k0, k1 := d.key()
	w := philox4x32([4]uint32{uint32(j / 8), uint32(i), uint32(bh), uint32(d.Offset)}, [2]uint32{k0, k1})
	return w[j%8/2]>>(16*(j%2))&0xffff >= d.Threshold()
}

// KeepRow sets keep[x] = Kept(bh, i, j0+x) for every x < len(keep),
// computing each Philox block once for its eight keys (and none when the
// threshold is 0, which keeps every entry); j0 need not be a multiple of
// 8. It allocates nothing. bh, i and j0 must not be negative.
func (d Dropout) KeepRow(bh, i, j0 int, keep []bool) {
	t := d.Threshold()
	if t == 0 { // every word is at least 0
		for x := range keep {
			keep[x] = true
		}
		return
	}
	// The draws through a buffer on the stack, as many keys at a time as
	// one vector draw gives, in pieces that end on block boundaries so that
	// no block is drawn twice.
	var words [128]uint32
	for x := 0; x < len(keep); {
		n := min(len(keep)-x, len(words)-(j0+x)%8)
		k, w := keep[x:x+n], words[:n]
		d.RowWords(bh, i, j0+x, w)
		for y := range k {
			k[y] = w[y] >= t
		}
		x += n
	}
}

// RowWords sets words[x] to the 16-bit draw of entry (i, j0+x) of query
// head bh, the one that Kept compares with Threshold, for every
// x < len(words), computing each Philox block once for its eight keys; j0
// need not be a multiple of 8. It allocates nothing. A kernel that applies
// the mask with a vector comparison takes the draws rather than KeepRow's
// booleans. bh, i and j0 must not be negative.
func (d Dropout) RowWords(bh, i, j0 int, words []uint32) {
	k0, k1 := d.key()
	c1, c2, c3 := uint32(i), uint32(bh), uint32(d.Offset)
	blk := uint32(j0 / 8)
	x := 0
	var block [8]uint32
	if s := j0 % 8; s != 0 && len(words) > 0 { // the keys of j0's block from j0 on
		drawBlock(&block, blk, c1, c2, c3, k0, k1)
		x = copy(words, block[s:])
		blk++
	}
	// 16 blocks at a time through the vector generator where the CPU has
	// one (simd.Philox16: the same function, bit for bit), 32 (two sets of
	// 16 sharing each round: simd.Philox32) while whole draws of 256 keys
	// remain, as long as more than 3 blocks' worth of keys remain (fewer
	// cost less one by one); the words are split into their halves after
	// (simd.SplitHalves).
	var vec [128]uint32
	for len(words)-x >= 256 && simd.Philox32(&vec, blk, c1, c2, c3, k0, k1) {
		x += simd.SplitHalves(words[x:], vec[:])
		blk += 32
	}
	for len(words)-x > 24 && simd.Philox16((*[64]uint32)(vec[:64]), blk, c1, c2, c3, k0, k1) {
		x += simd.SplitHalves(words[x:], vec[:64])
		blk += 16
	}
	for ; x+8 <= len(words); x += 8 { // whole blocks
		drawBlock((*[8]uint32)(words[x:x+8]), blk, c1, c2, c3, k0, k1)
		blk++
	}
	if x < len(words) { // the first keys of the last block
		drawBlock(&block, blk, c1, c2, c3, k0, k1)
		copy(words[x:], block[:])
	}
}

// drawBlock sets the draws of the eight keys of Philox block (c0, c1, c2,
// c3) under key (k0, k1).
func drawBlock(draws *[8]uint32, c0, c1, c2, c3, k0, k1 uint32) {
	var w [4]uint32
	w[0], w[1], w[2], w[3] = philox(c0, c1, c2, c3, k0, k1)
	simd.SplitHalves(draws[:], w[:])
}
