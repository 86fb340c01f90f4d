package op_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// swapHeads permutes x, of shape [a, b, c, d], to [a, c, b, d]: BHND to BNHD
// and back.
func swapHeads(x []float64, a, b, c, d int) []float64 {
	out := make([]float64, len(x))
	for i := range a {
		for j := range b {
			for k := range c {
				copy(out[((i*c+k)*b+j)*d:][:d], x[((i*b+j)*c+k)*d:][:d])
			}
		}
	}
	return out
}

// TestLayoutBNHD runs graphs in the BNHD layout, on both machines and in
// both dtypes, and requires the output and the gradients of the same graph
// in BHND, permuted, bit for bit: the layout changes where the numbers
// are, not what is computed.
func TestLayoutBNHD(t *testing.T) {
	cases := []variantCase{
		{name: "causal", c: graphCase{2, 3, 17, 23, 8, true}},
		{name: "GQA+window+lengths", c: graphCase{2, 4, 20, 30, 8, true}, hkv: 2, qLens: []int{20, 7}, kLens: []int{11, 30},
			opts: []op.Option{op.WithWindow(6, -1)},
			set:  func(p *kernels.Params) { p.Window = kernels.Window{On: true, Left: 6, Right: -1} }},
		{name: "bias over batch+GQA+lengths", c: graphCase{2, 4, 20, 30, 8, true}, hkv: 2, qLens: []int{20, 7}, kLens: []int{11, 30},
			bias: [2]int{1, 4}},
	}
	for i, vc := range cases {
		p := vc.params()
		in := randomInputs(p, uint64(900+i))
		hkv := p.KVHeads()
		for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
			for _, lisp := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%v/lisp=%v", vc.name, dt, lisp), func(t *testing.T) {
					want := vc.build(t, dt, in).run(t, lisp)
					// The bias is [Bb, Hb, Nq, Nk] in either layout.
					bnhd := inputs{q: swapHeads(in.q, p.B, p.H, p.Nq, p.D), k: swapHeads(in.k, p.B, hkv, p.Nk, p.D),
						v: swapHeads(in.v, p.B, hkv, p.Nk, p.D), w: swapHeads(in.w, p.B, p.H, p.Nq, p.D),
						bias: in.bias, biasShape: in.biasShape}
					gr := buildBNHD(t, vc, dt, bnhd)
					if s := gr.o.Shape(); !s.Eq(tensor.Shape{p.B, p.Nq, p.H, p.D}) {
						t.Fatalf("output shape %v, want [B, Nq, H, D] = [%d %d %d %d]", s, p.B, p.Nq, p.H, p.D)
					}
					got := gr.run(t, lisp)
					heads := []int{p.H, p.H, hkv, hkv}
					rows := []int{p.Nq, p.Nq, p.Nk, p.Nk}
					if len(got) != len(want) {
						t.Fatalf("%d results in BNHD, %d in BHND", len(got), len(want))
					}
					for j, name := range []string{"O", "dQ", "dK", "dV", "dBias"}[:len(want)] {
						back := got[j]
						if j < 4 {
							back = swapHeads(got[j], p.B, rows[j], heads[j], p.D)
						}
						for e := range want[j] {
							if math.Float64bits(back[e]) != math.Float64bits(want[j][e]) {
								t.Fatalf("%s[%d] = %v in BNHD, %v in BHND", name, e, back[e], want[j][e])
							}
						}
					}
				})
			}
		}
	}
}

// buildBNHD is buildGraphIn for inputs in the BNHD layout.
func buildBNHD(t *testing.T, vc variantCase, dt tensor.Dtype, in inputs) graph {
	t.Helper()
	g := gorgonia.NewGraph()
	c := vc.c
	node := func(name string, n int, data []float64) *gorgonia.Node {
		return valueNode(g, dt, name, []int{c.B, n, len(data) / (c.B * n * c.D), c.D}, data)
	}
	q, k, v := node("q", c.Nq, in.q), node("k", c.Nk, in.k), node("v", c.Nk, in.v)
	opts := append([]op.Option{op.WithCausal(c.causal), op.WithLayout(op.BNHD)}, vc.opts...)
	if vc.qLens != nil || vc.kLens != nil {
		opts = append(opts, op.WithLengths(intVector(g, "qlens", vc.qLens), intVector(g, "klens", vc.kLens)))
	}
	var bias *gorgonia.Node
	if in.bias != nil {
		bias = valueNode(g, dt, "bias", in.biasShape, in.bias)
		opts = append(opts, op.WithBias(bias))
	}
	o, err := op.Attention(q, k, v, opts...)
	if err != nil {
		t.Fatal(err)
	}
	cost := gorgonia.Must(gorgonia.Sum(gorgonia.Must(gorgonia.HadamardProd(o, node("w", c.Nq, in.w)))))
	return graph{g: g, q: q, k: k, v: v, o: o, c: cost, bias: bias}
}

// TestLayoutBNHDFiniteDifferences checks BNHD gradients against finite
// differences, on both machines, without and with a bias (dBias included).
func TestLayoutBNHDFiniteDifferences(t *testing.T) {
	for _, vc := range []variantCase{{c: graphCase{2, 2, 5, 7, 4, true}}, {c: graphCase{2, 2, 5, 7, 4, true}, bias: [2]int{2, 1}}} {
		p := vc.params()
		for _, lisp := range []bool{false, true} {
			t.Run(fmt.Sprintf("bias=%v/lisp=%v", vc.bias, lisp), func(t *testing.T) {
				buildBNHD(t, vc, tensor.Float64, randomInputs(p, 5)).checkGradients(t, lisp)
			})
		}
	}
}

// TestLayoutBadInput refuses a layout that does not exist, and shapes that
// do not agree in the BNHD order.
func TestLayoutBadInput(t *testing.T) {
	g := gorgonia.NewGraph()
	q := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 5, 4, 8))
	k := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 7, 3, 8)) // 3 key heads of 4
	for name, c := range map[string]struct {
		k      *gorgonia.Node
		layout op.Layout
	}{"Layout(7)": {q, op.Layout(7)}, "3 key heads of 4 in BNHD": {k, op.BNHD}} {
		if out, err := op.Attention(q, c.k, c.k, op.WithLayout(c.layout)); out != nil || !errors.Is(err, op.ErrInvalidInput) {
			t.Errorf("%s: got %v, %v; want an error wrapping op.ErrInvalidInput", name, out, err)
		}
	}
}

// TestLayoutBNHDWithLSE: AttentionLSE's output follows the layout, its LSE
// stays [B, H, Nq], with the values of the BHND graph.
func TestLayoutBNHDWithLSE(t *testing.T) {
	g := gorgonia.NewGraph()
	p := kernels.Params{B: 2, H: 3, Nq: 5, Nk: 6, D: 4, Scale: 0.5}
	in := randomInputs(p, 8)
	q := valueNode(g, tensor.Float64, "q", []int{p.B, p.Nq, p.H, p.D}, swapHeads(in.q, p.B, p.H, p.Nq, p.D))
	k := valueNode(g, tensor.Float64, "k", []int{p.B, p.Nk, p.H, p.D}, swapHeads(in.k, p.B, p.H, p.Nk, p.D))
	v := valueNode(g, tensor.Float64, "v", []int{p.B, p.Nk, p.H, p.D}, swapHeads(in.v, p.B, p.H, p.Nk, p.D))
	o, lse, err := op.AttentionLSE(q, k, v, op.WithLayout(op.BNHD), op.WithScale(p.Scale))
	if err != nil {
		t.Fatal(err)
	}
	m := gorgonia.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	if !o.Shape().Eq(tensor.Shape{p.B, p.Nq, p.H, p.D}) || !lse.Shape().Eq(tensor.Shape{p.B, p.H, p.Nq}) {
		t.Fatalf("shapes O %v, LSE %v; want [2 5 3 4] and [2 3 5]", o.Shape(), lse.Shape())
	}
	wantO, wantLSE := make([]float64, p.QLen()), make([]float64, p.LSELen())
	if err := kernels.NaiveForward(p, in.q, in.k, in.v, wantO, wantLSE); err != nil {
		t.Fatal(err)
	}
	gotO := swapHeads(asFloat64s(t, o.Value()), p.B, p.Nq, p.H, p.D)
	for i, got := range [][]float64{gotO, asFloat64s(t, lse.Value())} {
		for e, want := range [][]float64{wantO, wantLSE}[i] {
			if math.Abs(got[e]-want) > 1e-12 {
				t.Fatalf("output %d [%d] = %v, want %v", i, e, got[e], want)
			}
		}
	}
}
