package conformance

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// alibiSlopes are the usual geometric slopes 2^(−8(h+1)/H).
func alibiSlopes(h int) []float64 {
	s := make([]float64, h)
	for i := range s {
		s[i] = math.Exp2(-8 * float64(i+1) / float64(h))
	}
	return s
}

// variantCase is one problem of the variant sweep; qGain multiplies the
// random queries, to make scores large where the softcap must bite, and
// plant, when set, puts NaN or ±Inf into the inputs.
type variantCase struct {
	p     kernels.Params
	qGain float32
	plant func(pr problem)
	// lseGrad gives the backward a random gradient with respect to the
	// LSE (the LSEGradient variant).
	lseGrad bool
}

// variantParams lists the variant sweep: odd sizes with Nq = Nk and Nq ≠ Nk
// both ways, causal on and off, and in each variant the settings that
// exercise its edges: GQA ratios 1, 2, 8 and all heads on one key head;
// windows of width 0, one-sided, unbounded on either side, and bounds that
// cut the kernels' tiles (64 rows, 128 keys) off their edges; softcaps well
// below the scores; ALiBi, alone and with everything else; a bias full and
// broadcast over the batch, the heads and both, alone, with grouped heads
// and with everything else.
func variantParams(short bool) []variantCase {
	sizes := [][2]int{{113, 113}, {255, 77}, {40, 300}}
	if !short {
		sizes = append(sizes, [2]int{1023, 1023}, [2]int{1, 517})
	}
	var cs []variantCase
	add := func(p kernels.Params, gain float32) {
		for _, n := range sizes {
			for _, causal := range []bool{false, true} {
				p := p
				p.Nq, p.Nk, p.Causal = n[0], n[1], causal
				p.Scale = 1 / math.Sqrt(float64(p.D))
				if n[0] > 255 || n[1] > 517 {
					p.B = 1
				}
				p.Bias = fitBias(p)
				cs = append(cs, variantCase{p: p, qGain: gain})
			}
		}
	}
	for _, h := range [][2]int{{8, 8}, {8, 4}, {16, 2}, {8, 1}} {
		add(kernels.Params{B: 2, H: h[0], Hkv: h[1], D: 40}, 1)
	}
	for _, w := range [][2]int{{0, 0}, {5, -1}, {-1, 7}, {63, 64}, {130, 1}, {200, 129}} {
		add(kernels.Params{B: 2, H: 2, D: 24, Window: kernels.Window{On: true, Left: w[0], Right: w[1]}}, 1)
	}
	for _, c := range []float64{2, 30} {
		add(kernels.Params{B: 2, H: 2, D: 64, Softcap: c}, 6)
	}
	add(kernels.Params{B: 2, H: 4, D: 40, ALiBi: alibiSlopes(4)}, 1)
	add(kernels.Params{B: 2, H: 4, Hkv: 2, D: 40, Window: kernels.Window{On: true, Left: 70, Right: 9},
		Softcap: 5, ALiBi: alibiSlopes(4)}, 3)
	// Lengths of 0, 1, N and in between, on queries, keys or both, alone
	// and with the other variants, which align on them.
	withLengths := func(from int, which int) {
		for i := from; i < len(cs); i++ {
			p := &cs[i].p
			p.B = 4
			p.Bias = fitBias(*p)
			q, k := []int{p.Nq, 0, 1, p.Nq * 2 / 3}, []int{1, p.Nk, 0, p.Nk / 3}
			switch (i + which) % 3 {
			case 0:
				p.QLens = q
			case 1:
				p.KLens = k
			default:
				p.QLens, p.KLens = q, k
			}
		}
	}
	n := len(cs)
	add(kernels.Params{H: 2, D: 24}, 1)
	add(kernels.Params{H: 4, Hkv: 2, D: 40, Window: kernels.Window{On: true, Left: 70, Right: 9},
		Softcap: 5, ALiBi: alibiSlopes(4)}, 3)
	withLengths(n, 0)
	// Dropout at rates that keep most, half and few entries, alone and
	// with everything else.
	for _, rate := range []float64{0.1, 0.5, 0.9} {
		add(kernels.Params{B: 2, H: 2, D: 32, Dropout: kernels.Dropout{P: rate, Seed: 0x5eed_d50, Offset: 3}}, 1)
	}
	n = len(cs)
	add(kernels.Params{H: 4, Hkv: 2, D: 40, Window: kernels.Window{On: true, Left: 70, Right: 9},
		Softcap: 5, ALiBi: alibiSlopes(4), Dropout: kernels.Dropout{P: 0.2, Seed: 1 << 40}}, 3)
	withLengths(n, 2)
	// A gradient reaching the LSE, alone and with every other variant.
	n = len(cs)
	add(kernels.Params{B: 2, H: 2, D: 32}, 1)
	add(kernels.Params{H: 4, Hkv: 2, D: 40, Window: kernels.Window{On: true, Left: 70, Right: 9},
		Softcap: 5, ALiBi: alibiSlopes(4), Dropout: kernels.Dropout{P: 0.3, Seed: 5}}, 3)
	withLengths(n+2*len(sizes), 1)
	for i := n; i < len(cs); i++ {
		cs[i].lseGrad = true
	}
	// A bias full, broadcast over the batch, over the heads, and over
	// both; with grouped heads, where a key head's query heads read
	// different slices or one; with everything else, with lengths, and
	// with dropout and a gradient reaching the LSE too. (Last, so that
	// the cases before keep their seeds.)
	for _, bh := range [][2]int{{2, 4}, {1, 4}, {2, 1}, {1, 1}} {
		add(kernels.Params{B: 2, H: 4, D: 32, Bias: &kernels.Bias{Bb: bh[0], Hb: bh[1]}}, 1)
	}
	for _, bh := range [][2]int{{1, 4}, {2, 1}} {
		add(kernels.Params{B: 2, H: 4, Hkv: 2, D: 24, Bias: &kernels.Bias{Bb: bh[0], Hb: bh[1]}}, 1)
	}
	add(kernels.Params{B: 2, H: 4, Hkv: 2, D: 40, Window: kernels.Window{On: true, Left: 70, Right: 9},
		Softcap: 5, ALiBi: alibiSlopes(4), Bias: &kernels.Bias{Bb: 1, Hb: 1}}, 3)
	n = len(cs)
	add(kernels.Params{H: 2, D: 24, Bias: &kernels.Bias{Bb: 2, Hb: 2}}, 1)
	add(kernels.Params{H: 4, Hkv: 2, D: 40, Window: kernels.Window{On: true, Left: 70, Right: 9},
		Softcap: 5, ALiBi: alibiSlopes(4), Dropout: kernels.Dropout{P: 0.2, Seed: 1 << 40}, Bias: &kernels.Bias{Bb: 4, Hb: 1}}, 3)
	withLengths(n, 0)
	n = len(cs)
	add(kernels.Params{H: 4, Hkv: 2, D: 40, Window: kernels.Window{On: true, Left: 70, Right: 9},
		Softcap: 5, ALiBi: alibiSlopes(4), Dropout: kernels.Dropout{P: 0.3, Seed: 5}, Bias: &kernels.Bias{Bb: 1, Hb: 4}}, 3)
	withLengths(n, 1)
	for i := n; i < len(cs); i++ {
		cs[i].lseGrad = true
	}
	return append(cs, nonFiniteVariants()...)
}

// fitBias returns p's bias shape fitted to p's batch size, which the sweep
// changes: a Bb that was the batch size stays the batch size (full), 1
// stays 1 (broadcast). The sweep's cases hold the shape alone (problem).
func fitBias(p kernels.Params) *kernels.Bias {
	if p.Bias == nil || p.Bias.Bb == 1 {
		return p.Bias
	}
	return &kernels.Bias{Bb: p.B, Hb: p.Bias.Hb}
}

// nonFiniteVariants plant NaN and ±Inf where a window (and GQA) cut the
// tiles: a NaN key and an infinite value that only some rows of a tile
// see, and a NaN query row whose NaN must reach only the keys in its
// window. The pattern of NaN and ±Inf must be the reference's exactly, as
// in the plain non-finite cases, but for MaskedNaNMayPropagate: a tiled
// kernel's products meet a planted value through the zero probabilities
// of the rows whose window or lengths mask it, as under the causal mask.
func nonFiniteVariants() []variantCase {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	var cs []variantCase
	for _, causal := range []bool{false, true} {
		p := kernels.Params{B: 1, H: 4, Hkv: 2, Nq: 300, Nk: 260, D: 32, Scale: 0.2, Causal: causal,
			Window: kernels.Window{On: true, Left: 40, Right: 70}}
		cs = append(cs, variantCase{p: p, qGain: 1, plant: func(pr problem) {
			d := pr.p.D
			pr.k[(0*pr.p.Nk+150)*d+3] = nan // key head 0, key 150
			pr.v[(1*pr.p.Nk+20)*d+5] = inf  // key head 1, key 20
			pr.q[(2*pr.p.Nq+200)*d+1] = nan // query head 2, row 200
			pr.do[(3*pr.p.Nq+10)*d] = -inf  // query head 3, row 10: no key when causal
		}})
	}
	// The same with a bias, whose gradient the tiles that take the
	// visible pairs one by one must still give.
	for _, c := range cs[len(cs)-2:] {
		c.p.Bias = &kernels.Bias{Bb: 1, Hb: 4}
		cs = append(cs, c)
	}
	return append(cs, nonFiniteBias()...)
}

// nonFiniteBias plant −Inf, +Inf and NaN in a bias: keys that −Inf
// removes from a row (whose results stay finite), a row whose every key
// is −Inf (O NaN, LSE −Inf, and NaN gradients, as the naive computation
// gives), a +Inf entry (O NaN, LSE +Inf), a NaN entry a row sees, and
// under the causal mask a NaN entry of a masked pair, which must change
// nothing. Broadcast over everything, only what keeps the results finite
// is planted: every head reads it.
func nonFiniteBias() []variantCase {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	var cs []variantCase
	for _, full := range []bool{false, true} {
		for _, causal := range []bool{false, true} {
			p := kernels.Params{B: 2, H: 3, Nq: 150, Nk: 200, D: 32, Scale: 0.2, Causal: causal,
				Bias: &kernels.Bias{Bb: 1, Hb: 1}}
			if full {
				p.Bias = &kernels.Bias{Bb: 2, Hb: 3}
			}
			cs = append(cs, variantCase{p: p, qGain: 1, plant: func(pr problem) {
				nk := pr.p.Nk
				at := func(slice, i, j int) *float32 { return &pr.bias[(slice*pr.p.Nq+i)*nk+j] }
				for j := 3; j < nk; j += 7 {
					*at(0, 10, j) = -inf // row 10 (a = 60 when causal) loses every 7th key
				}
				if pr.p.Causal {
					*at(0, 90, 199) = nan // key 199 is masked for row 90 (a = 140)
				}
				if !full {
					return
				}
				for j := range nk {
					*at(0, 40, j) = -inf
				}
				*at(0, 120, 5) = inf
				*at(4, 60, 33) = nan // batch entry 1, head 1; a = 110
			}})
		}
	}
	return cs
}

// testVariants runs the variant sweep against the float64 reference, with
// the usual tolerances, skipping the variants b does not claim.
func testVariants(t *testing.T, b kernels.Backend, prec kernels.Precision, o options) {
	for i, c := range variantParams(testing.Short() || raceDetector) {
		name := shapeName(c.p)
		if c.lseGrad {
			name += "_dlse"
		}
		t.Run(name, func(t *testing.T) {
			o.skipUnsupported(t, b, c.p)
			if c.lseGrad && !o.variants[LSEGradient] {
				t.Skipf("%s does not claim the %v variant (conformance.WithVariants)", b.Name(), LSEGradient)
			}
			t.Parallel()
			pr := randomProblem(c.p, uint64(2000+i))
			if c.lseGrad {
				pr.dlse = normals(rand.New(rand.NewPCG(uint64(3000+i), 0x15e)), c.p.LSELen())
			}
			for j := range pr.q {
				pr.q[j] *= c.qGain
			}
			if c.plant != nil {
				c.plant(pr)
				pr.leak = o.maskedNaN
			}
			checkProblem(t, b, prec, pr)
			if c.p.QLens != nil || c.p.KLens != nil || c.p.Bias != nil {
				// Padding is exact: zeros, not values within tolerance;
				// so is dBias where no head that reads it sees the pair.
				r := runPass(t, b, pr.params(), pr.q, pr.k, pr.v, pr.do, nil)
				checkEmptyRows(t, c.p, r, true)
				checkPaddingKeys(t, c.p, r)
				checkUnseenBias(t, c.p, r)
			}
		})
	}
}

// checkUnseenBias requires dBias = 0 exactly at every pair (i, j) of a
// slice that no query head reading the slice sees: masked by every one,
// or padding in every one. Nothing to check without a bias.
func checkUnseenBias[T kernels.Float](t *testing.T, p kernels.Params, r result[T]) {
	t.Helper()
	if p.Bias == nil {
		return
	}
	seen := make([]bool, p.BiasLen())
	for bh := range p.B * p.H {
		mask, off := p.Mask(bh/p.H), p.BiasOffset(bh)
		for i := range p.Nq {
			lo, hi := mask.KeyRange(i)
			for j := lo; j < hi; j++ {
				seen[off+i*p.Nk+j] = true
			}
		}
	}
	for e, s := range seen {
		if !s && r.dbias[e] != 0 {
			t.Fatalf("%T: %s is a pair no head sees: %v, want 0", r.dbias[0], describe("dBias", p, e), r.dbias[e])
		}
	}
}

// checkPaddingKeys requires dK = dV = 0 exactly for every padding key
// (j ≥ KLens[b]).
func checkPaddingKeys[T kernels.Float](t *testing.T, p kernels.Params, r result[T]) {
	t.Helper()
	for kvh := range p.B * p.KVHeads() {
		mask := p.Mask(kvh / p.KVHeads())
		for j := mask.Lk; j < p.Nk; j++ {
			at := (kvh*p.Nk + j) * p.D
			for d := range p.D {
				if r.dk[at+d] != 0 || r.dv[at+d] != 0 {
					t.Fatalf("%T: key head %d key %d is padding: dK %v, dV %v, want 0", r.dk[0], kvh, j, r.dk[at+d], r.dv[at+d])
				}
			}
		}
	}
}
