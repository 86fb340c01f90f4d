//go:build flashgpu

package cudakernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/kernels/conformance"
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
func setSplits(t testing.TB, b *Backend, n int) {
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

// cacheCase is the shape of a TestCacheStoreGPU run: a grouped problem of
// two sequences, with its variants set by vary.
type cacheCase struct {
	name                    string
	heads, hkv, d, capacity int
	vary                    func(*kernels.Params)
}

// TestCacheStoreGPU drives device caches of every storage format (float32
// for FP32, bf16 and fp16 on the tensor-core units) dense and paged through
// a prefill and single-token steps, one sequence sometimes appending
// nothing, and checks each step's output with the conformance suite's
// bounds (conformance.CheckForward) against full attention over
// everything cached, and the bytes each step copies against stepBytes.
func TestCacheStoreGPU(t *testing.T) {
	for _, c := range []cacheCase{
		{name: "GQA", heads: 8, hkv: 2, d: 64, capacity: 300},
		{name: "MQA_D40_window_softcap_ALiBi", heads: 4, hkv: 1, d: 40, capacity: 200, vary: func(p *kernels.Params) {
			p.Window = kernels.Window{On: true, Left: 30, Right: -1}
			p.Softcap, p.ALiBi = 4, []float64{0.5, 0.25, 0.125, 0.0625}
		}},
	} {
		for _, prec := range []Precision{FP32, BF16, FP16} {
			for _, pageSize := range []int{0, 16} {
				t.Run(fmt.Sprintf("%s/%v_pages%d", c.name, prec, pageSize), func(t *testing.T) {
					b := newTestBackend(t, WithPrecision(prec))
					st, err := b.NewCacheStore(kernels.CacheSpec{Batch: 2, KVHeads: c.hkv, D: c.d, Capacity: c.capacity, PageSize: pageSize})
					if err != nil {
						t.Fatal(err)
					}
					defer st.Close()
					runCacheSteps(t, st, prec, pageSize, c)
				})
			}
		}
	}
}

// runCacheSteps drives st as autograd.Cache does (lengths, pages handed out
// in order, destinations), checking every step.
func runCacheSteps(t *testing.T, st kernels.CacheStore, prec Precision, pageSize int, c cacheCase) {
	const batch = 2
	heads, hkv, d, capacity := c.heads, c.hkv, c.d, c.capacity
	rng := rand.New(rand.NewPCG(3, 4))
	lens := make([]int, batch)
	table := make([][]int, batch)
	pages := 0
	// The whole sequences, [batch, hkv, capacity, d].
	allK, allV := make([]float32, batch*hkv*capacity*d), make([]float32, batch*hkv*capacity*d)
	steps := [][]int{{37, 5}, {1, 1}, {1, 1}, {1, 0}, {1, 1}}
	for si, news := range steps {
		nq := 0
		for _, n := range news {
			nq = max(nq, n)
		}
		p := kernels.Params{B: batch, H: heads, Hkv: hkv, Nq: nq, D: d, Scale: 0.125, Causal: true, QLens: news}
		if c.vary != nil {
			c.vary(&p)
		}
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
					copy(allK[(kvh*capacity+lens[bi]+tk)*d:][:d], k[(kvh*nq+tk)*d:])
					copy(allV[(kvh*capacity+lens[bi]+tk)*d:][:d], v[(kvh*nq+tk)*d:])
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
		conformance.CheckForward(t, ref, prec, q, allK, allV, o, lse)
		copy(lens, newLens)
	}
}

// BenchmarkDecodeSplitCountsGPU times bf16 decode steps (H = 32, D = 128,
// one query row per sequence, as bench's BenchmarkDecodeGPU) at fixed key
// splits around decodeSplits' choice, the measurement behind that choice:
// more splits put more bytes in flight, fewer amortise each unit's
// prologue and the merge over more keys.
func BenchmarkDecodeSplitCountsGPU(b *testing.B) {
	be := newTestBackend(b, WithPrecision(BF16))
	for _, pt := range []struct{ b, hkv, nk int }{{1, 8, 1024}, {1, 8, 16384}, {1, 8, 65536}, {8, 8, 16384}, {64, 8, 1024}} {
		p := kernels.Params{B: pt.b, H: 32, Hkv: pt.hkv, Nq: 1, Nk: pt.nk, D: 128, Scale: 1 / math.Sqrt(128), Causal: true}
		var chosen decodePlan
		if err := be.run(func() (err error) { chosen, err = be.reg.dec.plan(p, storeBF16); return err }); err != nil {
			b.Fatal(err)
		}
		for _, f := range []float64{0.25, 0.5, 0.75, 1, 1.5, 2} {
			splits := max(1, int(math.Round(f*float64(chosen.splits))))
			if splits > decodeMaxSplits {
				continue
			}
			b.Run(fmt.Sprintf("B%d_Hkv%d_L%d/splits%d", pt.b, pt.hkv, pt.nk, splits), func(b *testing.B) {
				setSplits(b, be, splits)
				defer setSplits(b, be, 0)
				var secs float64
				var bytes int64
				var err error
				for b.Loop() {
					if secs, bytes, err = be.DecodeKernelTime(p, 5); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(secs*1e6, "kernel-us")
				b.ReportMetric(float64(bytes)/secs/1e12, "TB/s")
				b.ReportMetric(float64(chosen.splits), "chosen-splits")
			})
		}
	}
}
