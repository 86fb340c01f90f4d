package simd

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDropScale32 requires DropScale32 (the assembly where the CPU has
// it) to give the portable loop's bits on every length up to 70 and two
// long rows, with NaN and ±Inf among the probabilities and words equal to
// the threshold, to leave the elements around x alone, and the portable
// loop to be the definition: x·scale where kept, +0 where dropped.
func TestDropScale32(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	const threshold, scale = 0x40000000, float32(1 / 0.75)
	for n := range 300 {
		if n > 70 && n != 257 && n != 299 {
			continue
		}
		const guard = 9
		buf := guarded[float32](n, guard)
		x := buf[guard : guard+n]
		words := make([]uint32, n+3) // longer than x: only its first n are read
		for i := range x {
			x[i] = rng.Float32()
			switch rng.IntN(10) {
			case 0:
				x[i] = float32(math.NaN())
			case 1:
				x[i] = float32(math.Inf(1 - 2*rng.IntN(2)))
			}
			words[i] = rng.Uint32()
			if rng.IntN(10) == 0 {
				words[i] = threshold
			}
		}
		x0 := append([]float32(nil), x...)
		want := append([]float32(nil), x...)
		dropScale32Generic(want, words, threshold, scale)
		for i, v := range want {
			def := float32(0)
			if words[i] >= threshold {
				def = x0[i] * scale
			}
			if math.Float32bits(v) != math.Float32bits(def) && !(v != v && def != def) {
				t.Fatalf("n=%d: portable loop gives %v at %d for %v and word %#x, want %v", n, v, i, x0[i], words[i], def)
			}
		}
		DropScale32(x, words, threshold, scale)
		if !sameBits(x, want) {
			t.Fatalf("n=%d: DropScale32 = %v, want %v", n, x, want)
		}
		checkGuards(t, "DropScale32", buf, guard, n)
	}
}

func TestDropScale64(t *testing.T) {
	x := []float64{1, math.NaN(), math.Inf(1), 2}
	DropScale64(x, []uint32{5, 4, 9, 10}, 5, 2)
	if x[0] != 2 || math.Float64bits(x[1]) != 0 || !math.IsInf(x[2], 1) || x[3] != 4 {
		t.Errorf("DropScale64 = %v, want [2 0 +Inf 4]", x)
	}
}
