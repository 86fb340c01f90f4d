package cpukernels

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// TestSizeClasses checks the pools' size classes: a request's class holds
// it with at most an eighth to spare, and a buffer given back serves its
// class's every request.
func TestSizeClasses(t *testing.T) {
	check := func(n int) {
		c := classAbove(n)
		if c < n || (n > minClass && c > n+n/8) || classBelow(c) != c || classAbove(c) != c {
			t.Fatalf("classAbove(%d) = %d (classBelow of it %d)", n, c, classBelow(c))
		}
		if b := classBelow(n); n >= minClass && (b > n || b < n-n/8-1 || classAbove(b) != b) {
			t.Fatalf("classBelow(%d) = %d", n, b)
		}
	}
	for n := 1; n < 1<<16; n++ {
		check(n)
	}
	for _, n := range []int{1<<20 - 1, 1 << 20, 1<<20 + 1, 12345678, 1 << 40} {
		check(n)
	}
	if classBelow(minClass-1) != 0 {
		t.Error("a buffer below the smallest class is pooled")
	}
}

// TestRecycledBuffersAreOverwritten fills the buffer pool with NaN before
// a forward and backward and requires results bit-identical to those of a
// run on fresh buffers: every recycled element must be written or cleared
// before it is read. The problems take each path that leaves parts of a
// buffer alone (the softcap's zero LSE row, padding rows and keys, rows
// without keys under a causal mask).
func TestRecycledBuffersAreOverwritten(t *testing.T) {
	for _, p := range []kernels.Params{
		{B: 2, H: 2, Nq: 70, Nk: 150, D: 16, Scale: 0.25},
		{B: 2, H: 4, Hkv: 2, Nq: 150, Nk: 70, D: 16, Scale: 0.25, Causal: true, Softcap: 3},
		{B: 3, H: 2, Nq: 130, Nk: 130, D: 16, Scale: 0.25, Causal: true, QLens: []int{130, 1, 64}, KLens: []int{0, 130, 99}},
	} {
		rng := rand.New(rand.NewPCG(1, 2))
		fill := func(n int) []float32 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			return x
		}
		q, k, v, do := fill(p.QLen()), fill(p.KLen()), fill(p.KLen()), fill(p.QLen())
		run := func() [][]float32 {
			o, lse := make([]float32, p.QLen()), make([]float32, p.LSELen())
			dq, dk, dv := make([]float32, p.QLen()), make([]float32, p.KLen()), make([]float32, p.KLen())
			if err := forward(2, p, q, k, v, o, lse); err != nil {
				t.Fatal(err)
			}
			if err := backward(2, p, q, k, v, o, lse, do, nil, dq, dk, dv); err != nil {
				t.Fatal(err)
			}
			return [][]float32{o, lse, dq, dk, dv}
		}
		// Two collections empty the pool (sync.Pool keeps a victim cache
		// for one), so that this run's buffers are new ones.
		runtime.GC()
		runtime.GC()
		fresh := run()
		for i, x := range fresh {
			if slices.ContainsFunc(x, func(v float32) bool { return math.IsNaN(float64(v)) }) {
				t.Fatalf("%+v: result %d of finite inputs holds NaN", p, i)
			}
		}
		// Two NaN buffers of every size class up to past what the run
		// takes, for each pool a request may draw from.
		largest := 4*p.QLen() + 4*p.KLen() + p.B*p.H*p.Nq*(p.D+1)
		for class := minClass; class <= classAbove(largest); class = classAbove(class + 1) {
			for range 2 {
				poison := make([]float32, class)
				for i := range poison {
					poison[i] = float32(math.NaN())
				}
				giveBuffer(poison)
			}
		}
		recycled := run()
		for i, name := range []string{"O", "LSE", "dQ", "dK", "dV"} {
			if !slices.EqualFunc(fresh[i], recycled[i], func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
				t.Errorf("%+v: %s differs after the pool held NaN buffers", p, name)
			}
		}
	}
}
