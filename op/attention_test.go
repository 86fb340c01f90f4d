package op_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gorgonia-flash/flashattention/autograd/gradcheck"
	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// graphCase is one attention problem run through a whole Gorgonia graph.
type graphCase struct {
	B, H, Nq, Nk, D int
	causal          bool
}

func (c graphCase) String() string {
	return fmt.Sprintf("B%dH%d_Nq%d_Nk%d_D%d_causal=%v", c.B, c.H, c.Nq, c.Nk, c.D, c.causal)
}

func (c graphCase) params() kernels.Params {
	return kernels.Params{B: c.B, H: c.H, Nq: c.Nq, Nk: c.Nk, D: c.D, Scale: 1 / math.Sqrt(float64(c.D)), Causal: c.causal}
}

// inputs holds q, k, v and the upstream gradient w as float64, so that the
// loss sum(O∘w) has dO = w; with u (B·H·Nq values, for AttentionLSE) the
// loss adds sum(LSE∘u), so that dLSE = u. With bias (of biasShape, [Bb, Hb,
// Nq, Nk]) the graph adds op.WithBias of a node holding it.
type inputs struct {
	q, k, v, w, u []float64
	bias          []float64
	biasShape     []int
}

// randomInputs draws the inputs of p, a bias too when p has one (shape
// alone).
func randomInputs(p kernels.Params, seed uint64) inputs {
	rng := rand.New(rand.NewPCG(seed, 1))
	fill := func(n int) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		return x
	}
	in := inputs{q: fill(p.QLen()), k: fill(p.KLen()), v: fill(p.KLen()), w: fill(p.QLen())}
	if p.Bias != nil {
		in.bias, in.biasShape = fill(p.BiasLen()), []int{p.Bias.Bb, p.Bias.Hb, p.Nq, p.Nk}
	}
	return in
}

// naiveReference returns O, the LSE and the gradients dQ, dK, dV (and dBias
// with a bias) of the loss of in, from the float64 naive kernels; p's bias,
// if any, gives the shape alone.
func naiveReference(t testing.TB, p kernels.Params, in inputs) (o, lse []float64, grads [][]float64) {
	t.Helper()
	var dbias []float64
	if p.Bias != nil {
		dbias = make([]float64, p.BiasLen())
		p.Bias = &kernels.Bias{Bb: p.Bias.Bb, Hb: p.Bias.Hb, Data64: in.bias, Grad64: dbias}
	}
	o, lse = make([]float64, p.QLen()), make([]float64, p.LSELen())
	dq, dk, dv := make([]float64, p.QLen()), make([]float64, p.KLen()), make([]float64, p.KLen())
	if err := kernels.NaiveForward(p, in.q, in.k, in.v, o, lse); err != nil {
		t.Fatal(err)
	}
	if err := kernels.NaiveBackward(p, in.q, in.k, in.v, o, lse, in.w, in.u, dq, dk, dv); err != nil {
		t.Fatal(err)
	}
	grads = [][]float64{dq, dk, dv}
	if dbias != nil {
		grads = append(grads, dbias)
	}
	return o, lse, grads
}

// graph builds cost = sum(Attention(q, k, v) ∘ w) in dtype dt, or with
// in.u sum(O∘w) + sum(LSE∘u) of AttentionLSE; bias is nil without one.
type graph struct {
	g                  *gorgonia.ExprGraph
	q, k, v, o, lse, c *gorgonia.Node
	bias               *gorgonia.Node
}

// wrt are the nodes whose gradients the tests check: q, k, v and the bias
// when there is one.
func (gr graph) wrt() gorgonia.Nodes {
	ns := gorgonia.Nodes{gr.q, gr.k, gr.v}
	if gr.bias != nil {
		ns = append(ns, gr.bias)
	}
	return ns
}

func buildGraph(t testing.TB, c graphCase, dt tensor.Dtype, in inputs, opts ...op.Option) graph {
	t.Helper()
	return buildGraphIn(t, gorgonia.NewGraph(), c, dt, in, opts...)
}

// buildGraphIn is buildGraph in g, for options whose nodes live in g.
func buildGraphIn(t testing.TB, g *gorgonia.ExprGraph, c graphCase, dt tensor.Dtype, in inputs, opts ...op.Option) graph {
	t.Helper()
	node := func(name string, n int, data []float64) *gorgonia.Node {
		// k and v may have fewer heads than q (grouped-query attention):
		// the data's length says how many.
		return valueNode(g, dt, name, []int{c.B, len(data) / (c.B * n * c.D), n, c.D}, data)
	}
	q, k, v := node("q", c.Nq, in.q), node("k", c.Nk, in.k), node("v", c.Nk, in.v)
	w := node("w", c.Nq, in.w)
	opts = append([]op.Option{op.WithCausal(c.causal)}, opts...)
	var bias *gorgonia.Node
	if in.bias != nil {
		bias = valueNode(g, dt, "bias", in.biasShape, in.bias)
		opts = append(opts, op.WithBias(bias))
	}
	var o, lse *gorgonia.Node
	var err error
	if in.u == nil {
		o, err = op.Attention(q, k, v, opts...)
	} else {
		o, lse, err = op.AttentionLSE(q, k, v, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	cost := gorgonia.Must(gorgonia.Sum(gorgonia.Must(gorgonia.HadamardProd(o, w))))
	if lse != nil {
		u := valueNode(g, dt, "u", []int{c.B, c.H, c.Nq}, in.u)
		cost = gorgonia.Must(gorgonia.Add(cost, gorgonia.Must(gorgonia.Sum(gorgonia.Must(gorgonia.HadamardProd(lse, u))))))
	}
	return graph{g, q, k, v, o, lse, cost, bias}
}

// valueNode is a tensor node of g named name, of dtype dt and the given
// shape, holding data (converted to float32 for Float32).
func valueNode(g *gorgonia.ExprGraph, dt tensor.Dtype, name string, shape []int, data []float64) *gorgonia.Node {
	var backing any = slices.Clone(data)
	if dt == tensor.Float32 {
		f := make([]float32, len(data))
		for i, x := range data {
			f[i] = float32(x)
		}
		backing = f
	}
	val := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(backing))
	return gorgonia.NewTensor(g, dt, len(shape), gorgonia.WithShape(shape...), gorgonia.WithName(name), gorgonia.WithValue(val))
}

// checkGradients compares the gradients of q, k, v and the bias with
// finite differences (gradcheck), on a TapeMachine or the LispMachine.
func (gr graph) checkGradients(t *testing.T, lisp bool) {
	t.Helper()
	var check []gradcheck.Option
	if lisp {
		check = append(check, gradcheck.WithLispMachine())
	}
	report, err := gradcheck.Check(gr.c, gr.wrt(), check...)
	if err != nil {
		t.Fatal(err)
	}
	if err := report.Err(); err != nil {
		t.Fatalf("%v\n%v", err, report)
	}
}

// run executes the graph on a TapeMachine (after gorgonia.Grad) or a
// LispMachine and returns O, dQ, dK, dV, and dBias with a bias, as float64.
func (gr graph) run(t testing.TB, lisp bool) [][]float64 {
	t.Helper()
	var m gorgonia.VM
	if lisp {
		m = gorgonia.NewLispMachine(gr.g)
	} else {
		if _, err := gorgonia.Grad(gr.c, gr.wrt()...); err != nil {
			t.Fatal(err)
		}
		m = gorgonia.NewTapeMachine(gr.g)
	}
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	out := [][]float64{asFloat64s(t, gr.o.Value())}
	for _, n := range gr.wrt() {
		gv, err := n.Grad()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, asFloat64s(t, gv))
	}
	return out
}

func asFloat64s(t testing.TB, v gorgonia.Value) []float64 {
	t.Helper()
	switch d := v.Data().(type) {
	case []float64:
		return slices.Clone(d)
	case []float32:
		out := make([]float64, len(d))
		for i, x := range d {
			out[i] = float64(x)
		}
		return out
	}
	t.Fatalf("value of %T", v.Data())
	return nil
}

var graphCases = []graphCase{
	{1, 2, 9, 9, 8, false},
	{2, 2, 33, 70, 16, false},
	{1, 3, 70, 33, 24, true}, // first 37 rows see no key
	{2, 1, 40, 150, 32, true},
	{1, 1, 1, 200, 64, true}, // decoding: one query over a cache
}

// TestGraphMatchesReference runs the op inside real graphs, both machines
// and both dtypes, against the float64 naive reference.
func TestGraphMatchesReference(t *testing.T) {
	for i, c := range graphCases {
		p := c.params()
		in := randomInputs(p, uint64(i))
		ref := p
		o, lse := make([]float64, p.QLen()), make([]float64, p.LSELen())
		dq, dk, dv := make([]float64, p.QLen()), make([]float64, p.KLen()), make([]float64, p.KLen())
		if err := kernels.NaiveForward(ref, in.q, in.k, in.v, o, lse); err != nil {
			t.Fatal(err)
		}
		if err := kernels.NaiveBackward(ref, in.q, in.k, in.v, o, lse, in.w, nil, dq, dk, dv); err != nil {
			t.Fatal(err)
		}
		want := [4][]float64{o, dq, dk, dv}
		for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
			// Loose enough for float32 rounding of O(1) values summed over
			// at most a few hundred terms; float64 is held to 1e-10.
			tol := 1e-10
			if dt == tensor.Float32 {
				tol = 1e-4
			}
			for _, lisp := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/%v/lisp=%v", c, dt, lisp), func(t *testing.T) {
					got := buildGraph(t, c, dt, in).run(t, lisp)
					for j, name := range []string{"O", "dQ", "dK", "dV"} {
						scale := max(1, slices.Max(absAll(want[j])))
						for e := range want[j] {
							if d := math.Abs(got[j][e] - want[j][e]); !(d <= tol*scale) {
								t.Fatalf("%s[%d] = %v, want %v (diff %.3g)", name, e, got[j][e], want[j][e], d)
							}
						}
					}
				})
			}
		}
	}
}

func absAll(x []float64) []float64 {
	y := make([]float64, len(x))
	for i, xi := range x {
		y[i] = math.Abs(xi)
	}
	return y
}

// TestFiniteDifferences checks the op's gradients against central finite
// differences through the whole graph, on both machines.
func TestFiniteDifferences(t *testing.T) {
	checkFiniteDifferences(t)
}

// checkFiniteDifferences runs the finite-difference check on small float64
// graphs, on both machines, with the op built with opts.
func checkFiniteDifferences(t *testing.T, opts ...op.Option) {
	cases := []graphCase{
		{1, 2, 5, 7, 4, false},
		{1, 2, 7, 5, 4, false},
		{2, 1, 6, 9, 3, true},
		{1, 2, 9, 4, 5, true}, // rows 0–4 see no key
	}
	for i, c := range cases {
		for _, lisp := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/lisp=%v", c, lisp), func(t *testing.T) {
				buildGraph(t, c, tensor.Float64, randomInputs(c.params(), uint64(100+i)), opts...).checkGradients(t, lisp)
			})
		}
	}
}

// TestDeterministic requires bit-identical outputs and gradients from two
// separate graphs on the same inputs.
func TestDeterministic(t *testing.T) {
	c := graphCase{1, 4, 300, 500, 32, true}
	in := randomInputs(c.params(), 5)
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		first := buildGraph(t, c, dt, in).run(t, false)
		second := buildGraph(t, c, dt, in).run(t, false)
		for j := range first {
			if !slices.Equal(first[j], second[j]) {
				t.Errorf("%v: output %d differs between runs", dt, j)
			}
		}
	}
}

// TestRepeatedRuns checks that a second RunAll of the same machine gives the
// same values, once gradients are reset between runs as gorgonia requires.
func TestRepeatedRuns(t *testing.T) {
	c := graphCase{1, 2, 20, 30, 8, true}
	gr := buildGraph(t, c, tensor.Float64, randomInputs(c.params(), 9))
	if _, err := gorgonia.Grad(gr.c, gr.q, gr.k, gr.v); err != nil {
		t.Fatal(err)
	}
	m := gorgonia.NewTapeMachine(gr.g)
	defer m.Close()
	var runs [2][]float64
	for i := range runs {
		if err := m.RunAll(); err != nil {
			t.Fatal(err)
		}
		g, err := gr.k.Grad()
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = asFloat64s(t, g)
		m.Reset()
	}
	if !slices.Equal(runs[0], runs[1]) {
		t.Fatal("dK differs between two runs of one machine")
	}
}

func TestBadInput(t *testing.T) {
	g := gorgonia.NewGraph()
	other := gorgonia.NewGraph()
	t4 := func(g *gorgonia.ExprGraph, dt tensor.Dtype, shape ...int) *gorgonia.Node {
		return gorgonia.NewTensor(g, dt, len(shape), gorgonia.WithShape(shape...))
	}
	f64 := tensor.Float64
	q, k, v := t4(g, f64, 2, 3, 5, 8), t4(g, f64, 2, 3, 7, 8), t4(g, f64, 2, 3, 7, 8)
	cases := []struct {
		name    string
		q, k, v *gorgonia.Node
		opts    []op.Option
	}{
		{"nil q", nil, k, v, nil},
		{"nil k", q, nil, v, nil},
		{"nil v", q, k, nil, nil},
		{"rank 3", t4(g, f64, 3, 5, 8), k, v, nil},
		{"rank 5", q, t4(g, f64, 1, 2, 3, 7, 8), v, nil},
		{"B differs", q, t4(g, f64, 1, 3, 7, 8), t4(g, f64, 1, 3, 7, 8), nil},
		{"Hkv not dividing H", q, t4(g, f64, 2, 2, 7, 8), t4(g, f64, 2, 2, 7, 8), nil},
		{"D differs", q, t4(g, f64, 2, 3, 7, 4), t4(g, f64, 2, 3, 7, 4), nil},
		{"k and v differ", q, k, t4(g, f64, 2, 3, 6, 8), nil},
		{"mixed dtypes", q, t4(g, tensor.Float32, 2, 3, 7, 8), v, nil},
		{"int dtype", t4(g, tensor.Int, 2, 3, 5, 8), t4(g, tensor.Int, 2, 3, 7, 8), t4(g, tensor.Int, 2, 3, 7, 8), nil},
		{"D = 0", t4(g, f64, 2, 3, 5, 0), t4(g, f64, 2, 3, 7, 0), t4(g, f64, 2, 3, 7, 0), nil},
		{"Nk = 0", q, t4(g, f64, 2, 3, 0, 8), t4(g, f64, 2, 3, 0, 8), nil},
		{"other graph", q, t4(other, f64, 2, 3, 7, 8), v, nil},
		{"NaN scale", q, k, v, []op.Option{op.WithScale(math.NaN())}},
		{"Inf scale", q, k, v, []op.Option{op.WithScale(math.Inf(-1))}},
		{"nil backend", q, k, v, []op.Option{op.WithBackend(nil)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := op.Attention(c.q, c.k, c.v, c.opts...)
			if err == nil || out != nil {
				t.Fatalf("got node %v and error %v, want an error", out, err)
			}
			if !errors.Is(err, op.ErrInvalidInput) {
				t.Fatalf("error %q does not wrap op.ErrInvalidInput", err)
			}
			t.Log(err)
		})
	}
}

// TestHashDistinguishesConfig guards against gorgonia merging two attention
// nodes that differ only in their options.
func TestHashDistinguishesConfig(t *testing.T) {
	g := gorgonia.NewGraph()
	q := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 1, 4, 8), gorgonia.WithName("q"))
	a := gorgonia.Must(op.Attention(q, q, q))
	variants := []*gorgonia.Node{
		gorgonia.Must(op.Attention(q, q, q, op.WithCausal(true))),
		gorgonia.Must(op.Attention(q, q, q, op.WithScale(0.5))),
	}
	for i, b := range variants {
		if a == b || a.Hashcode() == b.Hashcode() {
			t.Errorf("variant %d was merged with the default node", i)
		}
	}
	if same := gorgonia.Must(op.Attention(q, q, q)); same != a {
		t.Error("two identical attention nodes were not merged")
	}
}
