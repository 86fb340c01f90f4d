package conformance

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// kvCacheCases are decode problems, as a key/value cache makes them: Nq of
// 1 to 4 new rows attending to up to a few thousand cached keys, with
// grouped heads, the cache lengths as KLens (0 and 1 among them) and the
// new rows' QLens, windows, softcap and ALiBi, and NaN and ±Inf planted
// in the cache. Their keys are long enough for a backend to split them
// (kernels.SplitKV), which is what these cases are for.
//
// Short mode (and the race detector) keeps Nq = 1 and 3 and about half the
// keys, still enough for several splits.
func kvCacheCases(short bool) []variantCase {
	long, nqs := 3000, []int{1, 2, 3, 4}
	if short {
		long, nqs = 1100, []int{1, 3}
	}
	var cs []variantCase
	for _, nq := range nqs {
		for _, c := range []variantCase{
			{p: kernels.Params{B: 1, H: 8, Hkv: 2, Nk: long, D: 64, Causal: true}, qGain: 1},
			{p: kernels.Params{B: 3, H: 4, Hkv: 1, Nk: 700, D: 40, Causal: true,
				KLens: []int{700, 0, 1}, QLens: []int{nq, 1, nq}}, qGain: 1},
			{p: kernels.Params{B: 2, H: 4, Hkv: 2, Nk: long / 2, D: 32, Causal: true,
				Window: kernels.Window{On: true, Left: 300, Right: -1}, KLens: []int{long / 2, long * 2 / 5}}, qGain: 1},
			{p: kernels.Params{B: 1, H: 4, Nk: long * 2 / 3, D: 64, Causal: true, Softcap: 5, ALiBi: alibiSlopes(4)}, qGain: 3},
			{p: kernels.Params{B: 2, H: 2, Nk: 900, D: 24}, qGain: 1},
		} {
			c.p.Nq = nq
			c.p.Scale = 1 / math.Sqrt(float64(c.p.D))
			cs = append(cs, c)
		}
	}
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, causal := range []bool{false, true} {
		p := kernels.Params{B: 1, H: 4, Hkv: 2, Nq: 2, Nk: 1300, D: 32, Scale: 0.2, Causal: causal, KLens: []int{1290}}
		cs = append(cs, variantCase{p: p, qGain: 1, plant: func(pr problem) {
			d, nk := pr.p.D, pr.p.Nk
			pr.k[(0*nk+700)*d+3] = nan   // key head 0, key 700
			pr.v[(1*nk+1200)*d+5] = inf  // key head 1, key 1200
			pr.v[(1*nk+1289)*d+1] = -inf // key head 1, its last key: row 0 does not see it when causal
			pr.q[(2*pr.p.Nq+1)*d] = nan  // query head 2, row 1
		}})
	}
	return cs
}

// testKVCache runs the decode problems of kvCacheCases through the whole
// check (forward and backward, every precision), then each again with its
// keys and values in pages (the Paged variant): pages of 16 keys and of 7,
// handed out in shuffled order from a pool whose unused rows hold NaN, so
// that a backend reading a key outside its sequence, or the wrong page,
// fails (short mode: pages of 7 alone). A paged problem is checked
// forward only, as only forwards take pages. A backend that does not claim Paged must refuse it with an error,
// never compute something else.
func testKVCache(t *testing.T, b kernels.Backend, prec kernels.Precision, o options) {
	short := testing.Short() || raceDetector
	pageSizes := []int{16, 7}
	if short {
		pageSizes = []int{7}
	}
	for i, c := range kvCacheCases(short) {
		pr := randomProblem(c.p, uint64(5000+i))
		for j := range pr.q {
			pr.q[j] *= c.qGain
		}
		if c.plant != nil {
			c.plant(pr)
			pr.leak = o.maskedNaN
		}
		name := fmt.Sprintf("kv%d_%s", i, shapeName(c.p))
		t.Run(name, func(t *testing.T) {
			o.skipUnsupported(t, b, c.p)
			t.Parallel()
			checkProblem(t, b, prec, pr)
		})
		for _, size := range pageSizes {
			t.Run(fmt.Sprintf("%s_paged%d", name, size), func(t *testing.T) {
				pp, k, v := paged(pr, size, uint64(6000+i))
				if !o.variants[Paged] {
					r := newResult[float32](pp)
					if err := b.Forward32(pp, pr.q, k, v, r.o, r.lse); err == nil {
						t.Fatalf("%s does not claim the Paged variant but computed a paged forward without an error", b.Name())
					} else {
						t.Skipf("%s refuses pages: %v", b.Name(), err)
					}
				}
				o.skipUnsupported(t, b, pp)
				t.Parallel()
				checkPagedForward(t, b, prec, pr, pp, k, v)
			})
		}
	}
}

// paged returns pr's problem with its keys and values moved into pages of
// size keys: each sequence takes the pages its real keys need from a
// pool, in an order shuffled by seed, with two spare pages; every pool
// element no real key occupies is NaN.
func paged(pr problem, size int, seed uint64) (kernels.Params, []float32, []float32) {
	p := pr.p
	rng := rand.New(rand.NewPCG(seed, 0xa6e))
	need := make([]int, p.B)
	count := 2
	for b := range p.B {
		need[b] = (p.Mask(b).Lk + size - 1) / size
		count += need[b]
	}
	order := rng.Perm(count)
	pp := p
	pp.Pages = &kernels.Pages{Size: size, Count: count, Table: make([][]int, p.B)}
	for b := range p.B {
		pp.Pages.Table[b], order = order[:need[b]], order[need[b]:]
	}
	k, v := make([]float32, pp.KLen()), make([]float32, pp.KLen())
	for i := range k {
		k[i], v[i] = float32(math.NaN()), float32(math.NaN())
	}
	for kvh := range p.B * p.KVHeads() {
		for j := range p.Mask(kvh / p.KVHeads()).Lk {
			copy(k[pp.KeyRow(kvh, j):][:p.D], pr.k[p.KeyRow(kvh, j):][:p.D])
			copy(v[pp.KeyRow(kvh, j):][:p.D], pr.v[p.KeyRow(kvh, j):][:p.D])
		}
	}
	return pp, k, v
}

// checkPagedForward checks b's paged forward (pp, k, v: pr in pages) in
// both element types against the float64 reference of the dense problem
// pr, with the tolerances of the forward's outputs, O and LSE.
func checkPagedForward(t *testing.T, b kernels.Backend, prec kernels.Precision, pr problem, pp kernels.Params, k, v []float32) {
	t.Helper()
	p := pr.p
	q64, k64, v64, do64 := widen(pr.q), widen(pr.k), widen(pr.v), widen(pr.do)
	want, err := reference(p, q64, k64, v64, do64, nil)
	if err != nil {
		t.Fatal(err)
	}
	got64 := newResult[float64](pp)
	if err := b.Forward64(pp, q64, widen(k), widen(v), got64.o, got64.lse); err != nil {
		t.Fatalf("%s paged forward (float64): %v", b.Name(), err)
	}
	got32 := newResult[float32](pp)
	if err := b.Forward32(pp, pr.q, k, v, got32.o, got32.lse); err != nil {
		t.Fatalf("%s paged forward (float32): %v", b.Name(), err)
	}
	c64 := checks(p, false, result[float64]{o: got64.o, lse: got64.lse}, want, q64, k64, v64, do64)
	for _, c := range c64[:2] { // O and LSE
		if e, at := maxAbsErr(c.got, c.want, pr.leak); !(e <= float64Tolerance*max(maxAbs(c.want), c.floor)) {
			t.Errorf("float64 paged %s: error %.3g (got %v, want %v)", describe(c.name, p, at), e, c.got[at], c.want[at])
		}
	}
	checkForward32(t, p, prec, "paged ", pr.q, pr.k, pr.v, got32.o, got32.lse, want, pr.leak)
}

// CheckForward checks o and lse, a float32 forward of problem p (dense
// float32 inputs q, k, v) computed in precision prec, against the float64
// reference with the suite's bounds: twice the error of the naive baseline
// in prec plus two rounding units of each output's floor. It serves paths
// that are not a kernels.Backend, such as the steps of a key/value cache
// (kernels.CacheStore).
func CheckForward(t *testing.T, p kernels.Params, prec kernels.Precision, q, k, v, o, lse []float32) {
	t.Helper()
	want, err := reference(p, widen(q), widen(k), widen(v), make([]float64, len(q)), nil)
	if err != nil {
		t.Fatal(err)
	}
	checkForward32(t, p, prec, "", q, k, v, o, lse, want, false)
}

// checkForward32 requires o and lse within the bounds of CheckForward of
// want, the float64 reference; label starts its messages.
func checkForward32(t *testing.T, p kernels.Params, prec kernels.Precision, label string, q, k, v, o, lse []float32, want result[float64], leak bool) {
	t.Helper()
	do := make([]float32, len(q)) // the baseline's backward is not checked
	q64, k64, v64, do64 := widen(q), widen(k), widen(v), widen(do)
	baseChecks := checks(p, prec != kernels.FP32, naive32(p, prec, q, k, v, do, nil), want, q64, k64, v64, do64)
	got := checks(p, prec != kernels.FP32, result[float32]{o: o, lse: lse}, want, q64, k64, v64, do64)
	for i, c := range got[:2] { // O and LSE
		naiveErr := finiteErr(baseChecks[i].got, c.want)
		bound := 2*naiveErr + roundingAllowance(prec, c)
		if e, at := maxAbsErr(c.got, c.want, leak); !(e <= bound) {
			t.Errorf("%v %s%s: error %.3g > bound %.3g (naive %.3g; got %v, want %v)",
				prec, label, describe(c.name, p, at), e, bound, naiveErr, c.got[at], c.want[at])
		}
	}
}
