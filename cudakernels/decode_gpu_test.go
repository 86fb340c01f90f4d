//go:build flashgpu

package cudakernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// decodeCase is a paged decode problem whose keys and values sit in a pool
// of pages (every page in use, in order: the layout is not what this test
// is about) with its float64 copy.
type decodeCase struct {
	p              kernels.Params
	q, k, v        []float32
	q64, k64, v64  []float64
	wantO, wantLSE []float64
}

func newDecodeCase(t *testing.T, p kernels.Params, seed uint64) decodeCase {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 17))
	size := 16
	pages := 0
	p.Pages = &kernels.Pages{Size: size, Table: make([][]int, p.B)}
	for b := range p.B {
		n := (p.Mask(b).Lk + size - 1) / size
		for range n {
			p.Pages.Table[b] = append(p.Pages.Table[b], pages)
			pages++
		}
	}
	p.Pages.Count = max(pages, 1)
	c := decodeCase{p: p, q: randn[float32](rng, p.QLen()), k: randn[float32](rng, p.KLen()), v: randn[float32](rng, p.KLen())}
	c.q64, c.k64, c.v64 = widen(c.q), widen(c.k), widen(c.v)
	c.wantO, c.wantLSE = make([]float64, p.QLen()), make([]float64, p.LSELen())
	if err := kernels.NaiveForward(p, c.q64, c.k64, c.v64, c.wantO, c.wantLSE); err != nil {
		t.Fatal(err)
	}
	return c
}

// setSplits fixes the decoder's key splits (0: kernels.SplitKV's choice).
func setSplits(t *testing.T, b *Backend, n int) {
	t.Helper()
	if err := b.run(func() error { b.reg.dec.splitsOverride = n; return nil }); err != nil {
		t.Fatal(err)
	}
}

// TestDecodeSplitsGPU checks the split-KV merge on its own: every split
// count from 1 to 64 (many of them holding no key a row sees: 20 keys in
// 64 splits, a window, a sequence of length 0) gives the unsplit result
// within float32 rounding, in float32 and float64, against the float64
// reference.
func TestDecodeSplitsGPU(t *testing.T) {
	b := newTestBackend(t)
	defer setSplits(t, b, 0)
	cases := []kernels.Params{
		{B: 2, H: 8, Hkv: 2, Nq: 1, Nk: 1000, D: 64, Causal: true, KLens: []int{1000, 20}},
		{B: 3, H: 4, Hkv: 4, Nq: 3, Nk: 517, D: 128, Causal: true, KLens: []int{517, 0, 3}, QLens: []int{3, 1, 3}},
		{B: 1, H: 4, Hkv: 1, Nq: 2, Nk: 800, D: 40, Causal: true, Window: kernels.Window{On: true, Left: 100, Right: -1}},
		{B: 1, H: 2, Nq: 1, Nk: 300, D: 256, Softcap: 4, ALiBi: []float64{0.5, 0.25}},
	}
	for i, p := range cases {
		p.Scale = 1 / math.Sqrt(float64(p.D))
		c := newDecodeCase(t, p, uint64(i))
		for _, n := range []int{1, 2, 3, 5, 8, 13, 16, 31, 32, 33, 63, 64} {
			setSplits(t, b, n)
			name := fmt.Sprintf("case%d_splits%d", i, n)
			o, lse := make([]float32, p.QLen()), make([]float32, p.LSELen())
			if err := b.Forward32(c.p, c.q, c.k, c.v, o, lse); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			checkClose(t, name+" float32 o", widen(o), c.wantO, 2e-5)
			checkClose(t, name+" float32 lse", widen(lse), c.wantLSE, 2e-5)
			o64, lse64 := make([]float64, p.QLen()), make([]float64, p.LSELen())
			if err := b.Forward64(c.p, c.q64, c.k64, c.v64, o64, lse64); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			checkClose(t, name+" float64 o", o64, c.wantO, 1e-12)
			checkClose(t, name+" float64 lse", lse64, c.wantLSE, 1e-12)
		}
	}
}

// checkClose fails when got and want differ by more than tol relative to
// want's largest finite magnitude, or where one is not finite and the other
// is not the same non-finite value.
func checkClose(t *testing.T, name string, got, want []float64, tol float64) {
	t.Helper()
	scale := max(maxAbs(want), 1)
	for i := range want {
		g, w := got[i], want[i]
		if math.IsNaN(w) || math.IsInf(w, 0) {
			if !(math.IsNaN(w) && math.IsNaN(g)) && g != w {
				t.Errorf("%s[%d] = %v, want %v", name, i, g, w)
				return
			}
			continue
		}
		if e := math.Abs(g-w) / scale; !(e <= tol) {
			t.Errorf("%s[%d] = %v, want %v (relative error %.3g > %.3g)", name, i, g, w, e, tol)
			return
		}
	}
}

// TestCacheStoreGPU runs a cache's steps through the device store, dense
// and paged, in every storage format: a prefill of uneven prompts (QLens),
// then single-token steps, each against the float64 reference over
// everything appended so far, its K and V rounded to the store's format as
// the store rounds them. What is left is float32 arithmetic over at most
// 300 keys (300·2⁻²⁴ ≈ 1.8e-5 of the outputs' scale), whatever the format.
func TestCacheStoreGPU(t *testing.T) {
	const batch, heads, hkv, d, capacity = 2, 8, 2, 64, 300
	for _, prec := range []Precision{FP32, BF16, FP16} {
		for _, pageSize := range []int{0, 16} {
			t.Run(fmt.Sprintf("%v_pages%d", prec, pageSize), func(t *testing.T) {
				b := newTestBackend(t, WithPrecision(prec))
				st, err := b.NewCacheStore(kernels.CacheSpec{Batch: batch, KVHeads: hkv, D: d, Capacity: capacity, PageSize: pageSize})
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				runCacheSteps(t, st, pageSize, storeRounding(prec), 2e-5, batch, heads, hkv, d, capacity)
			})
		}
	}
}

// runCacheSteps drives st as autograd.Cache does (lengths, pages handed out
// in order, destinations), checking every step.
func runCacheSteps(t *testing.T, st kernels.CacheStore, pageSize int, round func(float32) float64, tol float64, batch, heads, hkv, d, capacity int) {
	rng := rand.New(rand.NewPCG(3, 4))
	lens := make([]int, batch)
	table := make([][]int, batch)
	pages := 0
	// The whole sequences, float64, [batch, hkv, capacity, d].
	allK, allV := make([]float64, batch*hkv*capacity*d), make([]float64, batch*hkv*capacity*d)
	steps := [][]int{{37, 5}, {1, 1}, {1, 1}, {1, 0}, {1, 1}}
	for si, news := range steps {
		nq := 0
		for _, n := range news {
			nq = max(nq, n)
		}
		p := kernels.Params{B: batch, H: heads, Hkv: hkv, Nq: nq, D: d, Scale: 0.125, Causal: true, QLens: news}
		q := randn[float32](rng, batch*heads*nq*d)
		k, v := randn[float32](rng, batch*hkv*nq*d), randn[float32](rng, batch*hkv*nq*d)
		newLens := make([]int, batch)
		for bi := range batch {
			newLens[bi] = lens[bi] + news[bi]
		}
		cp := p
		cp.KLens = newLens
		if pageSize == 0 {
			cp.Nk = capacity
		} else {
			for bi := range batch {
				for len(table[bi])*pageSize < newLens[bi] {
					table[bi] = append(table[bi], pages)
					pages++
				}
			}
			if err := st.Grow(pages); err != nil {
				t.Fatal(err)
			}
			cp.Nk = max(newLens[0], newLens[1])
			cp.Pages = &kernels.Pages{Size: pageSize, Count: pages, Table: table}
		}
		dest := make([]int64, batch*hkv*nq)
		for kvh := range batch * hkv {
			bi := kvh / hkv
			for tk := range nq {
				dest[kvh*nq+tk] = -1
				if tk < news[bi] {
					dest[kvh*nq+tk] = int64(cp.KeyRow(kvh, lens[bi]+tk) / d)
					for c := range d {
						allK[(kvh*capacity+lens[bi]+tk)*d+c] = round(k[(kvh*nq+tk)*d+c])
						allV[(kvh*capacity+lens[bi]+tk)*d+c] = round(v[(kvh*nq+tk)*d+c])
					}
				}
			}
		}
		o, lse := make([]float32, len(q)), make([]float32, batch*heads*nq)
		if err := st.Forward32(cp, dest, q, k, v, o, lse); err != nil {
			t.Fatalf("step %d: %v", si, err)
		}
		cs := st.(*cacheStore)
		if up, down := stepBytes(cp, 4); cs.up != up || cs.down != down {
			t.Errorf("step %d copied %d bytes up and %d down; the documented formula says %d and %d", si, cs.up, cs.down, up, down)
		}
		if si == len(steps)-1 {
			t.Logf("a step of %d new rows per sequence copies %d bytes up and %d down", nq, cs.up, cs.down)
		}
		ref := p
		ref.Nk, ref.KLens = capacity, newLens
		wantO, wantLSE := make([]float64, len(q)), make([]float64, len(lse))
		if err := kernels.NaiveForward(ref, widen(q), allK, allV, wantO, wantLSE); err != nil {
			t.Fatal(err)
		}
		checkClose(t, fmt.Sprintf("step %d o", si), widen(o), wantO, tol)
		checkClose(t, fmt.Sprintf("step %d lse", si), widen(lse), wantLSE, tol)
		copy(lens, newLens)
	}
}

// storeRounding returns the rounding a store of a backend of precision
// prec applies to a float32 it stores (storeFor): none for FP32 and TF32,
// to bf16 or fp16 by round-to-nearest-even for those.
func storeRounding(prec Precision) func(float32) float64 {
	switch storeFor(prec, false) {
	case storeBF16:
		return func(x float32) float64 {
			b := math.Float32bits(x)
			b += 0x7fff + (b>>16)&1
			return float64(math.Float32frombits(b &^ 0xffff))
		}
	case storeFP16:
		return func(x float32) float64 {
			if x == 0 {
				return 0
			}
			m, e := math.Frexp(float64(x)) // x = m·2^e, ½ ≤ |m| < 1
			bits := 11                     // fp16's significand, fewer below its normal range
			if e-1 < -14 {
				bits -= -14 - (e - 1)
			}
			scale := math.Ldexp(1, bits)
			return math.Ldexp(math.RoundToEven(m*scale)/scale, e)
		}
	}
	return func(x float32) float64 { return float64(x) }
}
