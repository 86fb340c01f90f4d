package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestSplitKV(t *testing.T) {
	for _, c := range []struct {
		name  string
		p     Params
		cores int
		want  int
	}{
		{"one core", Params{B: 1, H: 32, Hkv: 8, Nk: 65536}, 1, 1},
		{"heads fill the cores", Params{B: 1, H: 32, Hkv: 8, Nk: 65536}, 8, 1},
		{"batch fills the cores", Params{B: 64, H: 32, Hkv: 8, Nk: 4096}, 132, 1},
		{"B=1 Hkv=8 on 64 cores", Params{B: 1, H: 32, Hkv: 8, Nk: 65536}, 64, 8},
		{"B=1 Hkv=8 on 132 SMs", Params{B: 1, H: 32, Hkv: 8, Nk: 131072}, 132, 17},
		{"MQA on 132 SMs is capped", Params{B: 1, H: 32, Hkv: 1, Nk: 131072}, 132, MaxSplits},
		{"short keys split less", Params{B: 1, H: 32, Hkv: 8, Nk: 1024}, 64, 4},
		{"too few keys to split", Params{B: 1, H: 8, Hkv: 8, Nk: 300}, 64, 1},
		{"lengths, not Nk, count", Params{B: 2, H: 8, Hkv: 2, Nk: 1 << 20, KLens: []int{1000, 2000}}, 64, 7},
		{"empty sequences", Params{B: 2, H: 8, Hkv: 2, Nk: 100, KLens: []int{0, 0}}, 64, 1},
	} {
		if got := SplitKV(c.p, c.cores); got != c.want {
			t.Errorf("%s: SplitKV = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestSplitRange(t *testing.T) {
	for _, c := range [][3]int{{0, 100, 7}, {5, 6, 4}, {10, 10, 3}, {0, 64, 64}, {3, 1000, 64}} {
		lo, hi, n := c[0], c[1], c[2]
		next := lo
		for s := range n {
			from, to := SplitRange(lo, hi, s, n)
			if from != next || to < from {
				t.Fatalf("[%d, %d) in %d: split %d is [%d, %d), want it to start at %d", lo, hi, n, s, from, to, next)
			}
			next = to
		}
		if next != hi {
			t.Fatalf("[%d, %d) in %d: the splits end at %d", lo, hi, n, next)
		}
	}
}

// TestMergePartialsMatchesUnsplit splits every row's keys into 1…64
// ranges, computes each range's partial output and log-sum-exp in float64
// from the definitions, merges them, and requires the naive unsplit
// forward's result. The window and the causal mask leave most splits of
// most rows without a visible key, and rows 0 and 1 none at all.
func TestMergePartialsMatchesUnsplit(t *testing.T) {
	p := Params{B: 2, H: 4, Hkv: 2, Nq: 5, Nk: 150, D: 16, Scale: 0.3, Causal: true,
		Window: Window{On: true, Left: 40, Right: -1}, Softcap: 4, ALiBi: []float64{0.5, 0.25, 0.125, 0.0625},
		QLens: []int{5, 3}, KLens: []int{150, 1}}
	rng := rand.New(rand.NewPCG(1, 2))
	fill := func(n int) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		return x
	}
	q, k, v := fill(p.QLen()), fill(p.KLen()), fill(p.KLen())
	wantO, wantLSE := make([]float64, p.QLen()), make([]float64, p.LSELen())
	if err := NaiveForward(p, q, k, v, wantO, wantLSE); err != nil {
		t.Fatal(err)
	}
	out := make([]float64, p.D)
	for n := 1; n <= MaxSplits; n++ {
		lse, o, seen := make([]float64, n), make([]float64, n*p.D), make([]bool, n)
		for bh := range p.B * p.H {
			mask := p.Mask(bh / p.H)
			for i := range p.Nq {
				lo, hi := mask.KeyRange(i)
				for s := range n {
					from, to := SplitRange(0, p.Nk, s, n)
					lse[s], seen[s] = partial(p, bh, i, max(lo, from), min(hi, to), q, k, v, o[s*p.D:(s+1)*p.D])
				}
				gotLSE := MergePartials(lse, o, seen, out)
				row := (bh*p.Nq + i) * p.D
				if want := wantLSE[bh*p.Nq+i]; !close(gotLSE, want) {
					t.Fatalf("%d splits, head %d row %d: LSE %v, want %v", n, bh, i, gotLSE, want)
				}
				for d, x := range out {
					if !close(x, wantO[row+d]) {
						t.Fatalf("%d splits, head %d row %d: O[%d] = %v, want %v", n, bh, i, d, x, wantO[row+d])
					}
				}
			}
		}
	}
}

// partial computes row i of head bh over keys [from, to) (none when
// from ≥ to), writing its normalised output to o, and returns its
// log-sum-exp and whether it saw a key. An empty split's o and lse are
// set to garbage the merge must ignore.
func partial(p Params, bh, i, from, to int, q, k, v, o []float64) (float64, bool) {
	if from >= to {
		for d := range o {
			o[d] = math.NaN()
		}
		return math.Inf(1), false
	}
	qi := q[(bh*p.Nq+i)*p.D:][:p.D]
	s := make([]float64, to-from)
	m := math.Inf(-1)
	for j := from; j < to; j++ {
		at := p.KeyRow(p.KVHead(bh), j)
		s[j-from], _ = ModifyScore(p, bh, i, j, p.Scale*dot(qi, k[at:at+p.D]))
		m = max(m, s[j-from])
	}
	clear(o)
	var l float64
	for j := from; j < to; j++ {
		e := math.Exp(s[j-from] - m)
		l += e
		at := p.KeyRow(p.KVHead(bh), j)
		for d := range o {
			o[d] += e * v[at+d]
		}
	}
	for d := range o {
		o[d] /= l
	}
	return m + math.Log(l), true
}

func close(a, b float64) bool {
	return math.Abs(a-b) <= 1e-12*max(1, math.Abs(b)) || (math.IsInf(a, 1) && math.IsInf(b, 1))
}

// TestMergePartialsNonFinite checks the IEEE cases: a NaN partial, a +Inf
// one, every seen split −Inf, and a −Inf split beside a finite one.
func TestMergePartialsNonFinite(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	out := make([]float64, 2)
	for _, c := range []struct {
		name     string
		lse      []float64
		o        []float64
		seen     []bool
		wantLSE  float64
		wantONaN bool
		wantO    []float64
	}{
		{"NaN", []float64{1, nan}, []float64{1, 1, nan, nan}, []bool{true, true}, nan, true, nil},
		{"+Inf", []float64{1, inf}, []float64{1, 1, nan, nan}, []bool{true, true}, inf, true, nil},
		{"all −Inf", []float64{-inf, -inf}, []float64{nan, nan, nan, nan}, []bool{true, true}, -inf, true, nil},
		{"−Inf beside finite", []float64{-inf, 0}, []float64{nan, nan, 2, 3}, []bool{true, true}, 0, false, []float64{2, 3}},
		{"unseen NaN", []float64{nan, 0}, []float64{nan, nan, 2, 3}, []bool{false, true}, 0, false, []float64{2, 3}},
		{"nothing seen", []float64{0, 0}, []float64{1, 1, 1, 1}, []bool{false, false}, inf, false, []float64{0, 0}},
	} {
		got := MergePartials(c.lse, c.o, c.seen, out)
		if !(got == c.wantLSE || (math.IsNaN(got) && math.IsNaN(c.wantLSE))) {
			t.Errorf("%s: LSE %v, want %v", c.name, got, c.wantLSE)
		}
		for d, x := range out {
			if c.wantONaN != math.IsNaN(x) || (!c.wantONaN && x != c.wantO[d]) {
				t.Errorf("%s: O %v, want %v (NaN: %v)", c.name, out, c.wantO, c.wantONaN)
				break
			}
		}
	}
}

// TestNaiveReadsPages requires the naive forward of keys scattered over a
// page pool to equal the dense one bit for bit: KeyRow is the one map
// between them.
func TestNaiveReadsPages(t *testing.T) {
	p := Params{B: 2, H: 4, Hkv: 2, Nq: 3, Nk: 23, D: 8, Scale: 0.4, Causal: true, KLens: []int{23, 9}}
	rng := rand.New(rand.NewPCG(3, 4))
	q, k, v := make([]float64, p.QLen()), make([]float64, p.KLen()), make([]float64, p.KLen())
	for _, x := range [][]float64{q, k, v} {
		for i := range x {
			x[i] = rng.NormFloat64()
		}
	}
	// Pages of 5 keys, handed out in reverse so that no sequence's pages
	// are in order, with a spare page nobody reads.
	pp := p
	pp.Pages = &Pages{Size: 5, Count: 9, Table: [][]int{{8, 6, 4, 2, 0}, {7, 5}}}
	pk, pv := make([]float64, pp.KLen()), make([]float64, pp.KLen())
	for kvh := range p.B * p.KVHeads() {
		for j := range p.Mask(kvh / p.KVHeads()).Lk {
			copy(pk[pp.KeyRow(kvh, j):][:p.D], k[p.KeyRow(kvh, j):][:p.D])
			copy(pv[pp.KeyRow(kvh, j):][:p.D], v[p.KeyRow(kvh, j):][:p.D])
		}
	}
	o, lse, po, plse := make([]float64, p.QLen()), make([]float64, p.LSELen()), make([]float64, p.QLen()), make([]float64, p.LSELen())
	if err := NaiveForward(p, q, k, v, o, lse); err != nil {
		t.Fatal(err)
	}
	if err := NaiveForward(pp, q, pk, pv, po, plse); err != nil {
		t.Fatal(err)
	}
	for i := range o {
		if o[i] != po[i] {
			t.Fatalf("O[%d]: paged %v, dense %v", i, po[i], o[i])
		}
	}
	for i := range lse {
		if lse[i] != plse[i] {
			t.Fatalf("LSE[%d]: paged %v, dense %v", i, plse[i], lse[i])
		}
	}
	bad := pp
	bad.Pages = &Pages{Size: 5, Count: 9, Table: [][]int{{8, 6, 4, 2, 0}, {7}}}
	if err := NaiveForward(bad, q, pk, pv, po, plse); err == nil {
		t.Error("a block table short of the sequence's keys: no error")
	}
	bad.Pages = &Pages{Size: 5, Count: 9, Table: [][]int{{8, 6, 4, 2, 9}, {7, 5}}}
	if err := NaiveForward(bad, q, pk, pv, po, plse); err == nil {
		t.Error("a page outside the pool: no error")
	}
	if err := NaiveBackward(pp, q, pk, pv, po, plse, o, nil, o, pk, pv); err == nil {
		t.Error("a paged backward: no error")
	}
}
