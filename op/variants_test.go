package op_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gorgonia-flash/flashattention/autograd/gradcheck"
	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// variantCase is a graph with the options of issue 10: hkv key heads (0
// means H), and options with the Params they stand for.
type variantCase struct {
	name string
	c    graphCase
	hkv  int
	opts []op.Option
	set  func(p *kernels.Params)
}

func (v variantCase) params() kernels.Params {
	p := v.c.params()
	p.Hkv = v.hkv
	if v.set != nil {
		v.set(&p)
	}
	return p
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
	}
}

// TestVariantGraphsMatchReference runs each option in real graphs, on both
// machines and in both dtypes, against the float64 naive reference.
func TestVariantGraphsMatchReference(t *testing.T) {
	for i, vc := range variantCases() {
		p := vc.params()
		in := randomInputs(p, uint64(300+i))
		o, lse := make([]float64, p.QLen()), make([]float64, p.LSELen())
		dq, dk, dv := make([]float64, p.QLen()), make([]float64, p.KLen()), make([]float64, p.KLen())
		if err := kernels.NaiveForward(p, in.q, in.k, in.v, o, lse); err != nil {
			t.Fatal(err)
		}
		if err := kernels.NaiveBackward(p, in.q, in.k, in.v, o, lse, in.w, dq, dk, dv); err != nil {
			t.Fatal(err)
		}
		want := [4][]float64{o, dq, dk, dv}
		for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
			tol := 1e-10
			if dt == tensor.Float32 {
				tol = 1e-4 // as in TestGraphMatchesReference
			}
			for _, lisp := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%v/lisp=%v", vc.name, dt, lisp), func(t *testing.T) {
					got := buildGraph(t, vc.c, dt, in, vc.opts...).run(t, lisp)
					for j, name := range []string{"O", "dQ", "dK", "dV"} {
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
	vc := variantCases()[len(variantCases())-1]
	vc.c = graphCase{1, 4, 7, 9, 4, true}
	for _, lisp := range []bool{false, true} {
		t.Run(fmt.Sprintf("lisp=%v", lisp), func(t *testing.T) {
			gr := buildGraph(t, vc.c, tensor.Float64, randomInputs(vc.params(), 77), vc.opts...)
			var check []gradcheck.Option
			if lisp {
				check = append(check, gradcheck.WithLispMachine())
			}
			report, err := gradcheck.Check(gr.c, gorgonia.Nodes{gr.q, gr.k, gr.v}, check...)
			if err != nil {
				t.Fatal(err)
			}
			if err := report.Err(); err != nil {
				t.Fatalf("%v\n%v", err, report)
			}
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
