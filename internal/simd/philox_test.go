package simd

import (
	"math/rand/v2"
	"testing"
)

// philoxScalar is Philox4x32-10 written out once more, word by word, as the
// reference for Philox16 (kernels.Dropout holds the project's scalar form
// and its known-answer tests).
func philoxScalar(x [4]uint32, k0, k1 uint32) [4]uint32 {
	for r := range 10 {
		if r > 0 {
			k0, k1 = k0+0x9E3779B9, k1+0xBB67AE85
		}
		p0 := uint64(0xD2511F53) * uint64(x[0])
		p1 := uint64(0xCD9E8D57) * uint64(x[2])
		x = [4]uint32{uint32(p1>>32) ^ x[1] ^ k0, uint32(p1), uint32(p0>>32) ^ x[3] ^ k1, uint32(p0)}
	}
	return x
}

// TestPhilox16 compares every word of Philox16 with the scalar generator,
// for random counters and keys, counters that wrap at 2^32 inside the 16,
// and Random123's all-zero known answer; without a vector implementation
// it requires that Philox16 report false.
func TestPhilox16(t *testing.T) {
	var out [64]uint32
	if !Philox16(&out, 0, 0, 0, 0, 0, 0) {
		t.Skip("no vector Philox on this CPU or build")
	}
	if want := [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}; [4]uint32(out[:4]) != want {
		t.Fatalf("counter 0, key 0: %08x, want %08x (Random123 known answer)", out[:4], want)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 2000 {
		c := [4]uint32{rng.Uint32(), rng.Uint32(), rng.Uint32(), rng.Uint32()}
		if trial == 0 {
			c[0] = 0xFFFFFFF8 // the counter wraps after 8 lanes
		}
		k0, k1 := rng.Uint32(), rng.Uint32()
		if !Philox16(&out, c[0], c[1], c[2], c[3], k0, k1) {
			t.Fatal("Philox16 reported false after reporting true")
		}
		for l := range 16 {
			want := philoxScalar([4]uint32{c[0] + uint32(l), c[1], c[2], c[3]}, k0, k1)
			if got := [4]uint32(out[4*l : 4*l+4]); got != want {
				t.Fatalf("counter %08x+%d, %08x %08x %08x, key %08x %08x: %08x, want %08x", c[0], l, c[1], c[2], c[3], k0, k1, got, want)
			}
		}
	}
}

func BenchmarkPhilox16(b *testing.B) {
	var out [64]uint32
	if !Philox16(&out, 0, 0, 0, 0, 0, 0) {
		b.Skip("no vector Philox on this CPU or build")
	}
	var ctr uint32
	for b.Loop() {
		Philox16(&out, ctr, 1, 2, 3, 4, 5)
		ctr += 16
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/64, "ns/word")
}

// TestPhilox32 checks Philox32 against the scalar reference on random
// counters and keys, one trial wrapping the first word between its two
// sets of 16.
func TestPhilox32(t *testing.T) {
	var out [128]uint32
	if !Philox32(&out, 0, 0, 0, 0, 0, 0) {
		t.Skip("no vector Philox on this CPU or build")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 2000 {
		c := [4]uint32{rng.Uint32(), rng.Uint32(), rng.Uint32(), rng.Uint32()}
		if trial == 0 {
			c[0] = 0xFFFFFFF0 // the counter wraps between the two sets
		}
		k0, k1 := rng.Uint32(), rng.Uint32()
		Philox32(&out, c[0], c[1], c[2], c[3], k0, k1)
		for l := range 32 {
			want := philoxScalar([4]uint32{c[0] + uint32(l), c[1], c[2], c[3]}, k0, k1)
			if got := [4]uint32(out[4*l : 4*l+4]); got != want {
				t.Fatalf("counter %08x+%d, %08x %08x %08x, key %08x %08x: %08x, want %08x", c[0], l, c[1], c[2], c[3], k0, k1, got, want)
			}
		}
	}
}

func BenchmarkPhilox32(b *testing.B) {
	var out [128]uint32
	if !Philox32(&out, 0, 0, 0, 0, 0, 0) {
		b.Skip("no vector Philox on this CPU or build")
	}
	ctr := uint32(0)
	for b.Loop() {
		Philox32(&out, ctr, 1, 2, 3, 4, 5)
		ctr += 32
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/128, "ns/word")
}

// TestSplitHalves checks SplitHalves against the definition for lengths
// around the vector chunk of 16 draws, with dst shorter and longer than
// the words' halves.
func TestSplitHalves(t *testing.T) {
	words := make([]uint32, 40)
	for m := range words {
		words[m] = 0x9e3779b9*uint32(m+1) ^ 0x7f4a7c15
	}
	for _, nw := range []int{0, 1, 7, 8, 9, 16, 17, 40} {
		for _, nd := range []int{0, 1, 15, 16, 17, 31, 32, 33, 80} {
			dst := make([]uint32, nd)
			for x := range dst {
				dst[x] = 0xdeadbeef
			}
			n := SplitHalves(dst, words[:nw])
			if want := min(nd, 2*nw); n != want {
				t.Fatalf("SplitHalves(dst[%d], words[%d]) = %d, want %d", nd, nw, n, want)
			}
			for x := range dst {
				want := uint32(0xdeadbeef)
				if x < n {
					want = words[x/2] >> (16 * (x % 2)) & 0xffff
				}
				if dst[x] != want {
					t.Fatalf("SplitHalves(dst[%d], words[%d]): dst[%d] = %#x, want %#x", nd, nw, x, dst[x], want)
				}
			}
		}
	}
}
