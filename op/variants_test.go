package op_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// variantCase is a graph with the options of issue 10: hkv key heads (0
// means H), options with the Params they stand for, per-sequence lengths
// (nil: none), which become Int vectors of the graph, and a bias of shape
// [Bb, Hb, Nq, Nk] when bias (Bb, Hb) is not zero, whose values come with
// the inputs (randomInputs).
type variantCase struct {
	name         string
	c            graphCase
	hkv          int
	opts         []op.Option
	set          func(p *kernels.Params)
	qLens, kLens []int
	bias         [2]int
}

func (v variantCase) params() kernels.Params {
	p := v.c.params()
	p.Hkv = v.hkv
	if v.set != nil {
		v.set(&p)
	}
	p.QLens, p.KLens = v.qLens, v.kLens
	if v.bias != [2]int{} {
		p.Bias = &kernels.Bias{Bb: v.bias[0], Hb: v.bias[1]}
	}
	return p
}

// build builds the case's graph in dtype dt, its lengths as nodes of it.
func (v variantCase) build(t testing.TB, dt tensor.Dtype, in inputs) graph {
	t.Helper()
	g := gorgonia.NewGraph()
	opts := v.opts
	if v.qLens != nil || v.kLens != nil {
		opts = append(slices.Clone(opts), op.WithLengths(intVector(g, "qlens", v.qLens), intVector(g, "klens", v.kLens)))
	}
	return buildGraphIn(t, g, v.c, dt, in, opts...)
}

// intVector is an Int vector node holding xs, or nil when xs is nil.
func intVector(g *gorgonia.ExprGraph, name string, xs []int) *gorgonia.Node {
	if xs == nil {
		return nil
	}
	val := tensor.New(tensor.WithShape(len(xs)), tensor.WithBacking(slices.Clone(xs)))
	return gorgonia.NewVector(g, tensor.Int, gorgonia.WithShape(len(xs)), gorgonia.WithName(name), gorgonia.WithValue(val))
}

var slopes4 = []float64{0.5, 0.25, 0.125, 0.0625}

func variantCases() []variantCase {
	return []variantCase{
		{name: "MQA", c: graphCase{2, 4, 17, 23, 8, true}, hkv: 1},
		{name: "GQA", c: graphCase{1, 4, 30, 19, 16, false}, hkv: 2},
		{name: "window", c: graphCase{1, 2, 40, 70, 8, false},
			opts: []op.Option{op.WithWindow(5, 9)},
			set:  func(p *kernels.Params) { p.Window = kernels.Window{On: true, Left: 5, Right: 9} }},
		{name: "window+causal", c: graphCase{2, 2, 70, 40, 8, true},
			opts: []op.Option{op.WithWindow(12, -1)},
			set:  func(p *kernels.Params) { p.Window = kernels.Window{On: true, Left: 12, Right: -1} }},
		{name: "softcap", c: graphCase{1, 2, 25, 31, 16, true},
			opts: []op.Option{op.WithSoftcap(0.7)},
			set:  func(p *kernels.Params) { p.Softcap = 0.7 }},
		{name: "ALiBi", c: graphCase{1, 4, 26, 33, 8, false},
			opts: []op.Option{op.WithALiBi(slopes4)},
			set:  func(p *kernels.Params) { p.ALiBi = slopes4 }},
		{name: "all", c: graphCase{2, 4, 21, 27, 8, true}, hkv: 2,
			opts: []op.Option{op.WithWindow(6, 2), op.WithSoftcap(1.5), op.WithALiBi(slopes4)},
			set: func(p *kernels.Params) {
				p.Window, p.Softcap, p.ALiBi = kernels.Window{On: true, Left: 6, Right: 2}, 1.5, slopes4
			}},
		{name: "dropout", c: graphCase{2, 2, 17, 30, 8, false},
			opts: []op.Option{op.WithDropout(0.25, 7)},
			set:  func(p *kernels.Params) { p.Dropout = kernels.Dropout{P: 0.25, Seed: 7} }},
		{name: "dropout+GQA+causal+lengths", c: graphCase{2, 4, 20, 20, 8, true}, hkv: 1, qLens: []int{20, 9}, kLens: []int{13, 20},
			opts: []op.Option{op.WithDropout(0.6, 1<<50)},
			set:  func(p *kernels.Params) { p.Dropout = kernels.Dropout{P: 0.6, Seed: 1 << 50} }},
		{name: "lengths", c: graphCase{4, 2, 19, 23, 8, false}, qLens: []int{19, 0, 1, 11}, kLens: []int{23, 5, 0, 1}},
		{name: "query lengths+causal", c: graphCase{3, 2, 20, 20, 8, true}, qLens: []int{20, 1, 13}},
		{name: "key lengths+GQA+window", c: graphCase{3, 4, 9, 30, 8, true}, hkv: 2, kLens: []int{30, 17, 2},
			opts: []op.Option{op.WithWindow(4, -1)},
			set:  func(p *kernels.Params) { p.Window = kernels.Window{On: true, Left: 4, Right: -1} }},
		{name: "all+lengths", c: graphCase{2, 4, 21, 27, 8, true}, hkv: 2, qLens: []int{7, 21}, kLens: []int{27, 9},
			opts: []op.Option{op.WithWindow(6, 2), op.WithSoftcap(1.5), op.WithALiBi(slopes4)},
			set: func(p *kernels.Params) {
				p.Window, p.Softcap, p.ALiBi = kernels.Window{On: true, Left: 6, Right: 2}, 1.5, slopes4
			}},
		{name: "bias", c: graphCase{2, 3, 17, 23, 8, false}, bias: [2]int{2, 3}},
		{name: "bias over batch+causal", c: graphCase{2, 3, 23, 17, 8, true}, bias: [2]int{1, 3}},
		{name: "bias over heads+MQA", c: graphCase{2, 4, 17, 23, 8, false}, hkv: 1, bias: [2]int{2, 1}},
		{name: "bias shared+GQA+causal", c: graphCase{3, 4, 19, 19, 8, true}, hkv: 2, bias: [2]int{1, 1}},
		{name: "bias+dropout", c: graphCase{2, 2, 17, 30, 8, false}, bias: [2]int{1, 2},
			opts: []op.Option{op.WithDropout(0.25, 7)},
			set:  func(p *kernels.Params) { p.Dropout = kernels.Dropout{P: 0.25, Seed: 7} }},
		{name: "bias+all+lengths", c: graphCase{2, 4, 21, 27, 8, true}, hkv: 2, qLens: []int{7, 21}, kLens: []int{27, 9}, bias: [2]int{1, 4},
			opts: []op.Option{op.WithWindow(6, 2), op.WithSoftcap(1.5), op.WithALiBi(slopes4)},
			set: func(p *kernels.Params) {
				p.Window, p.Softcap, p.ALiBi = kernels.Window{On: true, Left: 6, Right: 2}, 1.5, slopes4
			}},
	}
}

// pickVariant returns the variant case of that name.
func pickVariant(t testing.TB, name string) variantCase {
	t.Helper()
	for _, vc := range variantCases() {
		if vc.name == name {
			return vc
		}
	}
	t.Fatalf("no variant case %q", name)
	return variantCase{}
}

// TestVariantGraphsMatchReference runs each option in real graphs, on both
// machines and in both dtypes, against the float64 naive reference.
func TestVariantGraphsMatchReference(t *testing.T) {
	for i, vc := range variantCases() {
		p := vc.params()
		in := randomInputs(p, uint64(300+i))
		o, _, grads := naiveReference(t, p, in)
		want := append([][]float64{o}, grads...)
		for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
			tol := 1e-10
			if dt == tensor.Float32 {
				tol = 1e-4 // as in TestGraphMatchesReference
			}
			for _, lisp := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%v/lisp=%v", vc.name, dt, lisp), func(t *testing.T) {
					got := vc.build(t, dt, in).run(t, lisp)
					if len(got) != len(want) {
						t.Fatalf("%d results, want %d", len(got), len(want))
					}
					for j, name := range []string{"O", "dQ", "dK", "dV", "dBias"}[:len(want)] {
						if len(got[j]) != len(want[j]) {
							t.Fatalf("%s has %d elements, want %d", name, len(got[j]), len(want[j]))
						}
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

// TestVariantFiniteDifferences checks the gradients of a small float64 graph
// with all four variants at once against finite differences, on both
// machines. The softcap is small enough to bend the scores.
func TestVariantFiniteDifferences(t *testing.T) {
	vc := pickVariant(t, "all+lengths")
	vc.c = graphCase{2, 4, 7, 9, 4, true}
	vc.qLens, vc.kLens = []int{5, 7}, []int{9, 3}
	for _, lisp := range []bool{false, true} {
		t.Run(fmt.Sprintf("lisp=%v", lisp), func(t *testing.T) {
			vc.build(t, tensor.Float64, randomInputs(vc.params(), 77)).checkGradients(t, lisp)
		})
	}
}

// TestVariantBadInput requires an error wrapping ErrInvalidInput, while the
// graph is built, for each invalid variant setting.
func TestVariantBadInput(t *testing.T) {
	g := gorgonia.NewGraph()
	t4 := func(shape ...int) *gorgonia.Node {
		return gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(shape...))
	}
	q, k := t4(1, 4, 5, 8), t4(1, 4, 7, 8)
	k3 := t4(1, 3, 7, 8)
	for name, c := range map[string]struct {
		k    *gorgonia.Node
		opts []op.Option
	}{
		"Hkv 3 of 4":       {k3, nil},
		"left < -1":        {k, []op.Option{op.WithWindow(-2, 0)}},
		"right < -1":       {k, []op.Option{op.WithWindow(3, -7)}},
		"negative softcap": {k, []op.Option{op.WithSoftcap(-1)}},
		"NaN softcap":      {k, []op.Option{op.WithSoftcap(math.NaN())}},
		"Inf softcap":      {k, []op.Option{op.WithSoftcap(math.Inf(1))}},
		"3 slopes of 4":    {k, []op.Option{op.WithALiBi([]float64{1, 2, 3})}},
		"no slopes":        {k, []op.Option{op.WithALiBi([]float64{})}},
		"NaN slope":        {k, []op.Option{op.WithALiBi([]float64{1, 2, math.NaN(), 4})}},
		"Inf slope":        {k, []op.Option{op.WithALiBi([]float64{1, math.Inf(1), 3, 4})}},
	} {
		out, err := op.Attention(q, c.k, c.k, c.opts...)
		if out != nil || !errors.Is(err, op.ErrInvalidInput) {
			t.Errorf("%s: got %v, %v; want an error wrapping op.ErrInvalidInput", name, out, err)
		}
	}
}

// TestHashDistinguishesVariants guards against gorgonia merging attention
// nodes that differ only in a variant option.
func TestHashDistinguishesVariants(t *testing.T) {
	g := gorgonia.NewGraph()
	q := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 4, 6, 8), gorgonia.WithName("q"))
	nodes := map[string]*gorgonia.Node{
		"plain":        gorgonia.Must(op.Attention(q, q, q)),
		"window":       gorgonia.Must(op.Attention(q, q, q, op.WithWindow(2, 1))),
		"other window": gorgonia.Must(op.Attention(q, q, q, op.WithWindow(1, 2))),
		"diagonal":     gorgonia.Must(op.Attention(q, q, q, op.WithWindow(0, 0))),
		"unbounded":    gorgonia.Must(op.Attention(q, q, q, op.WithWindow(-1, -1))),
		"softcap":      gorgonia.Must(op.Attention(q, q, q, op.WithSoftcap(5))),
		"other cap":    gorgonia.Must(op.Attention(q, q, q, op.WithSoftcap(6))),
		"ALiBi":        gorgonia.Must(op.Attention(q, q, q, op.WithALiBi(slopes4))),
		"other ALiBi":  gorgonia.Must(op.Attention(q, q, q, op.WithALiBi([]float64{0.5, 0.25, 0.125, 0.03125}))),
		"query lengths": gorgonia.Must(op.Attention(q, q, q,
			op.WithLengths(gorgonia.NewVector(g, tensor.Int, gorgonia.WithShape(1), gorgonia.WithName("a")), nil))),
		"dropout":    gorgonia.Must(op.Attention(q, q, q, op.WithDropout(0.1, 1))),
		"other rate": gorgonia.Must(op.Attention(q, q, q, op.WithDropout(0.2, 1))),
		"other seed": gorgonia.Must(op.Attention(q, q, q, op.WithDropout(0.1, 2))),
		"key lengths": gorgonia.Must(op.Attention(q, q, q,
			op.WithLengths(nil, gorgonia.NewVector(g, tensor.Int, gorgonia.WithShape(1), gorgonia.WithName("b"))))),
		"bias": gorgonia.Must(op.Attention(q, q, q,
			op.WithBias(gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 4, 6, 6), gorgonia.WithName("c"))))),
		"shared bias": gorgonia.Must(op.Attention(q, q, q,
			op.WithBias(gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 1, 6, 6), gorgonia.WithName("d"))))),
		"other bias": gorgonia.Must(op.Attention(q, q, q,
			op.WithBias(gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 1, 6, 6), gorgonia.WithName("e"))))),
	}
	seen := map[uint32]string{}
	for name, n := range nodes {
		if other, dup := seen[n.Hashcode()]; dup {
			t.Errorf("%s and %s have the same hash", name, other)
		}
		seen[n.Hashcode()] = name
	}
	if same := gorgonia.Must(op.Attention(q, q, q, op.WithSoftcap(5))); same != nodes["softcap"] {
		t.Error("two identical softcapped attention nodes were not merged")
	}
}

// TestLengthsAtRunTime runs one graph with lengths that change between runs,
// in each integer dtype, and requires an error wrapping ErrInvalidInput for
// a length out of range or a lengths node without a value.
func TestLengthsAtRunTime(t *testing.T) {
	c := graphCase{2, 2, 6, 5, 4, true}
	for _, dt := range []tensor.Dtype{tensor.Int, tensor.Int32, tensor.Int64} {
		t.Run(dt.String(), func(t *testing.T) {
			g := gorgonia.NewGraph()
			qLens := gorgonia.NewVector(g, dt, gorgonia.WithShape(2), gorgonia.WithName("qlens"))
			kLens := gorgonia.NewVector(g, dt, gorgonia.WithShape(2), gorgonia.WithName("klens"))
			p := c.params()
			in := randomInputs(p, 5)
			gr := buildGraphIn(t, g, c, tensor.Float64, in, op.WithLengths(qLens, kLens))
			if _, err := gorgonia.Grad(gr.c, gr.q, gr.k, gr.v); err != nil {
				t.Fatal(err)
			}
			m := gorgonia.NewTapeMachine(g)
			defer m.Close()
			if err := m.RunAll(); err == nil {
				t.Fatal("ran with lengths nodes that hold no value")
			}
			set := func(n *gorgonia.Node, xs ...int) {
				v := tensor.New(tensor.Of(dt), tensor.WithShape(len(xs)))
				for i, x := range xs {
					if err := v.SetAt(convertInt(dt, x), i); err != nil {
						t.Fatal(err)
					}
				}
				if err := gorgonia.Let(n, v); err != nil {
					t.Fatal(err)
				}
			}
			for _, lens := range [][2][]int{{{6, 3}, {5, 1}}, {{0, 6}, {2, 5}}} {
				set(qLens, lens[0]...)
				set(kLens, lens[1]...)
				m.Reset()
				if err := m.RunAll(); err != nil {
					t.Fatal(err)
				}
				p.QLens, p.KLens = lens[0], lens[1]
				o, lse := make([]float64, p.QLen()), make([]float64, p.LSELen())
				if err := kernels.NaiveForward(p, in.q, in.k, in.v, o, lse); err != nil {
					t.Fatal(err)
				}
				got := asFloat64s(t, gr.o.Value())
				for e := range o {
					if math.Abs(got[e]-o[e]) > 1e-12 {
						t.Fatalf("lengths %v: O[%d] = %v, want %v", lens, e, got[e], o[e])
					}
				}
			}
			set(kLens, 5, 6) // Nk = 5
			m.Reset()
			if err := op.Cause(m.RunAll()); !errors.Is(err, op.ErrInvalidInput) {
				t.Errorf("key length 6 of Nk = 5: got %v, want an error wrapping op.ErrInvalidInput", err)
			}
		})
	}
}

func convertInt(dt tensor.Dtype, x int) any {
	switch dt {
	case tensor.Int32:
		return int32(x)
	case tensor.Int64:
		return int64(x)
	}
	return x
}

// TestLengthsBadInput requires an error wrapping ErrInvalidInput, while the
// graph is built, for lengths of a wrong dtype, shape or graph.
func TestLengthsBadInput(t *testing.T) {
	g := gorgonia.NewGraph()
	q := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(3, 2, 5, 8))
	other := gorgonia.NewGraph()
	for name, lens := range map[string]*gorgonia.Node{
		"float lengths":  gorgonia.NewVector(g, tensor.Float64, gorgonia.WithShape(3)),
		"Int8 lengths":   gorgonia.NewVector(g, tensor.Int8, gorgonia.WithShape(3)),
		"2 of B = 3":     gorgonia.NewVector(g, tensor.Int, gorgonia.WithShape(2)),
		"a matrix":       gorgonia.NewMatrix(g, tensor.Int, gorgonia.WithShape(3, 1)),
		"in other graph": gorgonia.NewVector(other, tensor.Int, gorgonia.WithShape(3)),
	} {
		for _, opt := range []op.Option{op.WithLengths(lens, nil), op.WithLengths(nil, lens)} {
			out, err := op.Attention(q, q, q, opt)
			if out != nil || !errors.Is(err, op.ErrInvalidInput) {
				t.Errorf("%s: got %v, %v; want an error wrapping op.ErrInvalidInput", name, out, err)
			}
		}
	}
}

// TestDropoutFreshMaskPerRun runs one dropout graph three times on a
// TapeMachine: run r must equal the reference with dropout offset r,
// forward and gradients, so that each step draws a fresh mask, its
// backward the same one, and a rebuilt graph the same sequence. (Gorgonia
// v0.9.18's LispMachine cannot run a graph twice; its single run is
// checked against offset 0 by TestVariantGraphsMatchReference.)
func TestDropoutFreshMaskPerRun(t *testing.T) {
	vc := variantCase{c: graphCase{1, 2, 9, 12, 4, true}, opts: []op.Option{op.WithDropout(0.4, 123)}}
	p := vc.params()
	in := randomInputs(p, 9)
	for _, rebuild := range []bool{false, true} {
		t.Run(fmt.Sprintf("rebuilt=%v", rebuild), func(t *testing.T) {
			gr := vc.build(t, tensor.Float64, in)
			if _, err := gorgonia.Grad(gr.c, gr.q, gr.k, gr.v); err != nil {
				t.Fatal(err)
			}
			m := gorgonia.NewTapeMachine(gr.g)
			defer m.Close()
			var first []float64
			for run := range uint64(3) {
				m.Reset()
				if err := m.RunAll(); err != nil {
					t.Fatal(err)
				}
				p.Dropout = kernels.Dropout{P: 0.4, Seed: 123, Offset: run}
				o, lse := make([]float64, p.QLen()), make([]float64, p.LSELen())
				dq, dk, dv := make([]float64, p.QLen()), make([]float64, p.KLen()), make([]float64, p.KLen())
				if err := kernels.NaiveForward(p, in.q, in.k, in.v, o, lse); err != nil {
					t.Fatal(err)
				}
				if err := kernels.NaiveBackward(p, in.q, in.k, in.v, o, lse, in.w, nil, dq, dk, dv); err != nil {
					t.Fatal(err)
				}
				got := [][]float64{asFloat64s(t, gr.o.Value())}
				for _, n := range []*gorgonia.Node{gr.q, gr.k, gr.v} {
					g, err := n.Grad()
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, asFloat64s(t, g))
				}
				for j, want := range [][]float64{o, dq, dk, dv} {
					for e := range want {
						if d := math.Abs(got[j][e] - want[e]); d > 1e-12 {
							t.Fatalf("run %d: output %d [%d] = %v, want %v (offset %d)", run, j, e, got[j][e], want[e], run)
						}
					}
				}
				if run == 0 {
					first = got[0]
				} else if slices.Equal(first, got[0]) {
					t.Fatalf("run %d drew run 0's mask", run)
				}
			}
		})
	}
}

// TestDropoutBadInput requires an error wrapping ErrInvalidInput for a
// dropout probability outside [0, 1).
func TestDropoutBadInput(t *testing.T) {
	g := gorgonia.NewGraph()
	q := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 2, 5, 8))
	for _, p := range []float64{-0.1, 1, 1.5, math.NaN(), math.Inf(1)} {
		out, err := op.Attention(q, q, q, op.WithDropout(p, 1))
		if out != nil || !errors.Is(err, op.ErrInvalidInput) {
			t.Errorf("p = %v: got %v, %v; want an error wrapping op.ErrInvalidInput", p, out, err)
		}
	}
}
