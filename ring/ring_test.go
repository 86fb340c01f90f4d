package ring

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/kernels/conformance"
)

// ringCase is one ring problem: the global problem and how it is cut.
type ringCase struct {
	name   string
	p      Problem
	layout Layout
}

// ringCases covers R ∈ {1, 2, 3, 4, 8}, odd and unequal lengths per rank,
// both splits, causal and not, GQA.
func ringCases(t testing.TB) []ringCase {
	mustLayout := func(l Layout, err error) Layout {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	var cases []ringCase
	for _, ranks := range []int{1, 2, 3, 4, 8} {
		n := 5 * ranks // 5 positions per rank: odd
		for _, causal := range []bool{false, true} {
			for _, gqa := range []bool{false, true} {
				p := Problem{B: 2, H: 2, D: 4, Scale: 0.7, Causal: causal}
				if gqa {
					p.H, p.Hkv = 4, 2
				}
				zz := mustLayout(ZigZag(n, ranks))
				ct := mustLayout(Contiguous(n, ranks))
				name := fmt.Sprintf("R=%d/causal=%v/gqa=%v", ranks, causal, gqa)
				cases = append(cases, ringCase{name + "/zigzag", p, zz}, ringCase{name + "/contiguous", p, ct})
			}
		}
	}
	// Unequal shares: zig-zag of a length 2R does not divide, and chunks
	// of one's own, out of order and of different counts per rank.
	p := Problem{B: 1, H: 3, D: 5, Scale: 0.4, Causal: true}
	cases = append(cases, ringCase{"R=3/uneven zigzag", p, mustLayout(ZigZag(17, 3))})
	cases = append(cases, ringCase{"R=3/own chunks", p, mustLayout(FromChunks(16, [][]Chunk{
		{{9, 4}, {0, 2}}, {{2, 1}}, {{13, 3}, {3, 5}, {8, 1}},
	}))})
	p.Causal = false
	cases = append(cases, ringCase{"R=3/own chunks/full", p, mustLayout(FromChunks(16, [][]Chunk{
		{{9, 4}, {0, 2}}, {{2, 1}}, {{13, 3}, {3, 5}, {8, 1}},
	}))})
	return cases
}

// global is a problem's tensors on the whole sequence, flat.
type global[T kernels.Float] struct {
	q, k, v, do       []T
	o, lse            []T
	dq, dk, dv        []T
	params            kernels.Params
	bh, bhkv, n, dDim int
}

// randomGlobal fills q, k, v and do with normal numbers.
func randomGlobal[T kernels.Float](c ringCase, seed uint64) *global[T] {
	rng := rand.New(rand.NewPCG(seed, 7))
	p, n := c.p, c.layout.N()
	g := &global[T]{bh: p.B * p.H, bhkv: p.B * p.kvHeads(), n: n, dDim: p.D}
	g.params = p.block(n, n, p.Causal)
	fill := func(m int) []T {
		x := make([]T, m)
		for i := range x {
			x[i] = T(rng.NormFloat64())
		}
		return x
	}
	g.q, g.k, g.v, g.do = fill(g.bh*n*p.D), fill(g.bhkv*n*p.D), fill(g.bhkv*n*p.D), fill(g.bh*n*p.D)
	return g
}

// reference computes o, lse and the gradients on the whole sequence with
// the kernels' naive float64 computation.
func (g *global[T]) reference(t testing.TB) (o, lse, dq, dk, dv []T) {
	t.Helper()
	p := g.params
	o, lse = make([]T, p.QLen()), make([]T, p.LSELen())
	if err := kernels.NaiveForward(p, g.q, g.k, g.v, o, lse); err != nil {
		t.Fatal(err)
	}
	dq, dk, dv = make([]T, p.QLen()), make([]T, p.KLen()), make([]T, p.KLen())
	if err := kernels.NaiveBackward(p, g.q, g.k, g.v, o, lse, g.do, nil, dq, dk, dv); err != nil {
		t.Fatal(err)
	}
	return o, lse, dq, dk, dv
}

// runRing runs Forward then Backward on every rank of a LocalRing, one
// goroutine each, and gathers the results into g. It returns each rank's
// first error.
func runRing[T kernels.Float](c ringCase, g *global[T], backends func(rank int) kernels.Backend) []error {
	ts, err := LocalRing(c.layout.Ranks())
	if err != nil {
		return []error{err}
	}
	return runRingOn(ts, c, g, backends)
}

// runRingOn is runRing on the transports ts, one per rank.
func runRingOn[T kernels.Float](ts []Transport, c ringCase, g *global[T], backends func(rank int) kernels.Backend) []error {
	ranks := c.layout.Ranks()
	g.o, g.lse = make([]T, g.bh*g.n*g.dDim), make([]T, g.bh*g.n)
	g.dq, g.dk, g.dv = make([]T, len(g.q)), make([]T, len(g.k)), make([]T, len(g.v))
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	var mu sync.Mutex // the gathers write disjoint rows, but of shared slices
	for r := range ranks {
		wg.Go(func() {
			rg := Ring{Transport: ts[r], Layout: c.layout, Backend: backends(r), Timeout: 10e9}
			q, k, v := localRows(c.layout, r, g.q, g.bh, g.dDim), localRows(c.layout, r, g.k, g.bhkv, g.dDim), localRows(c.layout, r, g.v, g.bhkv, g.dDim)
			do := localRows(c.layout, r, g.do, g.bh, g.dDim)
			o, lse, err := Forward(context.Background(), rg, c.p, q, k, v)
			if err != nil {
				errs[r] = err
				return
			}
			dq, dk, dv, err := Backward(context.Background(), rg, c.p, q, k, v, o, lse, do)
			if err != nil {
				errs[r] = err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			globalRows(c.layout, r, o, g.o, g.bh, g.dDim)
			globalRows(c.layout, r, lse, g.lse, g.bh, 1)
			globalRows(c.layout, r, dq, g.dq, g.bh, g.dDim)
			globalRows(c.layout, r, dk, g.dk, g.bhkv, g.dDim)
			globalRows(c.layout, r, dv, g.dv, g.bhkv, g.dDim)
		})
	}
	wg.Wait()
	return errs
}

// checkRan fails the test with the first rank's error, if any.
func checkRan(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// checkReference requires the gathered o, lse and gradients of g within
// tol (relErr) of naive attention on the whole sequence.
func (g *global[T]) checkReference(t *testing.T, tol float64) {
	t.Helper()
	o, lse, dq, dk, dv := g.reference(t)
	for _, x := range []struct {
		name      string
		got, want []T
	}{{"o", g.o, o}, {"lse", g.lse, lse}, {"dq", g.dq, dq}, {"dk", g.dk, dk}, {"dv", g.dv, dv}} {
		if e := relErr(x.got, x.want); e > tol {
			t.Errorf("%s: relative error %.3g > %.0g", x.name, e, tol)
		}
	}
}

// cpu is the CPU backend for every rank.
func cpu(int) kernels.Backend { return cpukernels.Backend{} }

// relErr is max|got − want| / max|want|, or +Inf when a NaN appears.
func relErr[T kernels.Float](got, want []T) float64 {
	var diff, scale float64
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) || math.IsNaN(w) {
			return math.Inf(1)
		}
		diff, scale = max(diff, math.Abs(g-w)), max(scale, math.Abs(w))
	}
	if scale == 0 {
		return diff
	}
	return diff / scale
}

// TestRingMatchesSingleDevice checks the ring's output, LSE and gradients
// against naive attention on the whole sequence, in float64 to 1e-10
// relative and in float32 to 1e-5 and to the conformance suite's bound.
func TestRingMatchesSingleDevice(t *testing.T) {
	for i, c := range ringCases(t) {
		t.Run(c.name+"/float64", func(t *testing.T) { checkRing[float64](t, c, uint64(i), 1e-10) })
		t.Run(c.name+"/float32", func(t *testing.T) { checkRing[float32](t, c, uint64(i), 1e-5) })
	}
}

func checkRing[T kernels.Float](t *testing.T, c ringCase, seed uint64, tol float64) {
	g := randomGlobal[T](c, seed)
	checkRan(t, runRing(c, g, cpu))
	g.checkReference(t, tol)
	if g32, ok := any(g).(*global[float32]); ok {
		// And the conformance suite's bound: twice naive float32's error.
		conformance.CheckPass(t, g32.params, kernels.FP32, g32.q, g32.k, g32.v, g32.do, g32.o, g32.lse, g32.dq, g32.dk, g32.dv)
	}
}

// TestMeet checks the chunk pairs of the causal mask on global positions.
func TestMeet(t *testing.T) {
	a, b := Chunk{0, 3}, Chunk{3, 2}
	for _, x := range []struct {
		causal bool
		q, k   Chunk
		want   pair
	}{
		{false, a, b, full}, {false, b, a, full},
		{true, a, a, diagonal}, {true, b, a, full}, {true, a, b, skip},
	} {
		if got := meet(x.causal, x.q, x.k); got != x.want {
			t.Errorf("meet(%v, %v, %v) = %v, want %v", x.causal, x.q, x.k, got, x.want)
		}
	}
}

// TestMerge checks the merge against the softmax over the union of two
// key sets, and its rules for parts of no weight (LSE −Inf) and +Inf.
func TestMerge(t *testing.T) {
	inf := math.Inf(1)
	// Two blocks of one row, D = 1: scores {0, ln 3} and {ln 2}, values
	// {1, 2} and {4}: the softmax over all three keys has weights 1/6,
	// 3/6, 2/6 and the output (1 + 6 + 8)/6 = 2.5, LSE ln 6.
	acc, accLSE := []float64{0}, []float64{math.Inf(-1)}
	merge(acc, accLSE, []float64{(1 + 3*2) / 4.0}, []float64{math.Log(4)}, 1)
	merge(acc, accLSE, []float64{4}, []float64{math.Log(2)}, 1)
	if math.Abs(acc[0]-2.5) > 1e-15 || math.Abs(accLSE[0]-math.Log(6)) > 1e-15 {
		t.Errorf("merged (%v, %v), want (2.5, ln 6)", acc[0], accLSE[0])
	}
	// A block whose scores are all −Inf (O NaN, LSE −Inf) has no weight.
	merge(acc, accLSE, []float64{math.NaN()}, []float64{math.Inf(-1)}, 1)
	if math.Abs(acc[0]-2.5) > 1e-15 || math.Abs(accLSE[0]-math.Log(6)) > 1e-15 {
		t.Errorf("after a −Inf block (%v, %v), want (2.5, ln 6)", acc[0], accLSE[0])
	}
	// A +Inf score makes the row NaN with LSE +Inf, as in the naive sum.
	merge(acc, accLSE, []float64{math.NaN()}, []float64{inf}, 1)
	if !math.IsNaN(acc[0]) || accLSE[0] != inf {
		t.Errorf("after a +Inf block (%v, %v), want (NaN, +Inf)", acc[0], accLSE[0])
	}
}
