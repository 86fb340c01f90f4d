package op_test

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestBiasFiniteDifferences checks the gradients of q, k, v and the bias
// against finite differences in small float64 graphs, on both machines:
// a bias per batch entry and head, broadcast over the batch, over the
// heads and over both, alone and with grouped heads, a window, softcap,
// ALiBi and lengths (padding rows and keys: dBias 0 there).
func TestBiasFiniteDifferences(t *testing.T) {
	all := []op.Option{op.WithWindow(4, 1), op.WithSoftcap(1.5), op.WithALiBi(slopes4)}
	setAll := func(p *kernels.Params) {
		p.Window, p.Softcap, p.ALiBi = kernels.Window{On: true, Left: 4, Right: 1}, 1.5, slopes4
	}
	for i, vc := range []variantCase{
		{name: "full", c: graphCase{2, 2, 5, 7, 4, false}, bias: [2]int{2, 2}},
		{name: "over batch", c: graphCase{2, 2, 6, 5, 4, true}, bias: [2]int{1, 2}},
		{name: "over heads", c: graphCase{2, 2, 5, 7, 3, false}, bias: [2]int{2, 1}},
		{name: "shared+all+lengths", c: graphCase{2, 4, 7, 9, 4, true}, hkv: 2, bias: [2]int{1, 1},
			qLens: []int{5, 7}, kLens: []int{9, 3}, opts: all, set: setAll},
		{name: "over batch+all+lengths", c: graphCase{2, 4, 7, 9, 4, true}, hkv: 2, bias: [2]int{1, 4},
			qLens: []int{7, 4}, kLens: []int{6, 9}, opts: all, set: setAll},
	} {
		for _, lisp := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/lisp=%v", vc.name, lisp), func(t *testing.T) {
				vc.build(t, tensor.Float64, randomInputs(vc.params(), uint64(1100+i))).checkGradients(t, lisp)
			})
		}
	}
}

// TestBiasDeterministic requires bit-identical outputs and gradients, dBias
// included, from separate graphs on the same inputs, with a bias broadcast
// so that its gradient sums over every head of every batch entry, on a
// problem large enough for every parallel path of the CPU backward.
func TestBiasDeterministic(t *testing.T) {
	for _, vc := range []variantCase{
		{c: graphCase{2, 4, 200, 300, 16, true}, bias: [2]int{1, 1}},
		{c: graphCase{3, 4, 150, 260, 16, false}, hkv: 2, bias: [2]int{1, 4}},
	} {
		in := randomInputs(vc.params(), 5)
		for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			first := vc.build(t, dt, in).run(t, false)
			second := vc.build(t, dt, in).run(t, false)
			for j := range first {
				if !slices.Equal(first[j], second[j]) {
					t.Errorf("bias %v, %v: output %d differs between runs", vc.bias, dt, j)
				}
			}
		}
	}
}

// TestBiasBadInput requires an error wrapping ErrInvalidInput, while the
// graph is built, for each bias that cannot be one: nil, of another rank,
// of a shape that does not broadcast to the scores (in either layout), of
// another dtype than q, or of another graph.
func TestBiasBadInput(t *testing.T) {
	g := gorgonia.NewGraph()
	tn := func(g *gorgonia.ExprGraph, dt tensor.Dtype, shape ...int) *gorgonia.Node {
		return gorgonia.NewTensor(g, dt, len(shape), gorgonia.WithShape(shape...))
	}
	f64 := tensor.Float64
	q, k := tn(g, f64, 2, 3, 5, 8), tn(g, f64, 2, 3, 7, 8)   // B 2, H 3, Nq 5, Nk 7
	qn, kn := tn(g, f64, 2, 5, 3, 8), tn(g, f64, 2, 7, 3, 8) // the same in BNHD
	for _, c := range []struct {
		name   string
		q, k   *gorgonia.Node
		bias   *gorgonia.Node
		layout op.Layout
	}{
		{"nil", q, k, nil, op.BHND},
		{"rank 3", q, k, tn(g, f64, 3, 5, 7), op.BHND},
		{"rank 5", q, k, tn(g, f64, 1, 2, 3, 5, 7), op.BHND},
		{"Bb 3 of B 2", q, k, tn(g, f64, 3, 3, 5, 7), op.BHND},
		{"Hb 2 of H 3", q, k, tn(g, f64, 2, 2, 5, 7), op.BHND},
		{"Nq 4", q, k, tn(g, f64, 1, 1, 4, 7), op.BHND},
		{"Nk 8", q, k, tn(g, f64, 1, 1, 5, 8), op.BHND},
		{"transposed", q, k, tn(g, f64, 1, 1, 7, 5), op.BHND},
		{"float32 of float64 q", q, k, tn(g, tensor.Float32, 1, 3, 5, 7), op.BHND},
		{"other graph", q, k, tn(gorgonia.NewGraph(), f64, 1, 3, 5, 7), op.BHND},
		{"BNHD bias as [B, Nq, H, Nk]", qn, kn, tn(g, f64, 2, 5, 3, 7), op.BNHD},
	} {
		out, err := op.Attention(c.q, c.k, c.k, op.WithBias(c.bias), op.WithLayout(c.layout))
		if out != nil || !errors.Is(err, op.ErrInvalidInput) {
			t.Errorf("%s: got %v, %v; want an error wrapping op.ErrInvalidInput", c.name, out, err)
		}
		if _, _, err := op.AttentionLSE(c.q, c.k, c.k, op.WithBias(c.bias), op.WithLayout(c.layout)); !errors.Is(err, op.ErrInvalidInput) {
			t.Errorf("%s: AttentionLSE gave %v; want an error wrapping op.ErrInvalidInput", c.name, err)
		}
	}
	for _, s := range [][]int{{2, 3, 5, 7}, {1, 3, 5, 7}, {2, 1, 5, 7}, {1, 1, 5, 7}} {
		if _, err := op.Attention(q, k, k, op.WithBias(tn(g, f64, s...))); err != nil {
			t.Errorf("bias %v: %v", s, err)
		}
		if _, err := op.Attention(qn, kn, kn, op.WithBias(tn(g, f64, s...)), op.WithLayout(op.BNHD)); err != nil {
			t.Errorf("bias %v in BNHD: %v", s, err)
		}
	}
}

// TestBiasValueChecked runs graphs whose bias node holds a value of
// another shape with as many elements (gorgonia.WithValue does not compare
// shapes): an error wrapping ErrInvalidInput, never a reinterpretation, on
// both machines.
func TestBiasValueChecked(t *testing.T) {
	for _, bound := range []tensor.Shape{{1, 1, 7, 5}, {1, 5, 1, 7}} {
		for _, lisp := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/lisp=%v", bound, lisp), func(t *testing.T) {
				g := gorgonia.NewGraph()
				q := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 2, 5, 8), gorgonia.WithName("q"),
					gorgonia.WithInit(gorgonia.GlorotN(1)))
				k := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 2, 7, 8), gorgonia.WithName("k"),
					gorgonia.WithInit(gorgonia.GlorotN(1)))
				val := tensor.New(tensor.WithShape(bound...), tensor.WithBacking(make([]float64, bound.TotalSize())))
				bias := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 1, 5, 7), gorgonia.WithName("bias"), gorgonia.WithValue(val))
				if _, err := op.Attention(q, k, k, op.WithBias(bias)); err != nil {
					t.Fatal(err)
				}
				var m gorgonia.VM = gorgonia.NewTapeMachine(g)
				if lisp {
					m = gorgonia.NewLispMachine(g, gorgonia.ExecuteFwdOnly())
				}
				defer m.Close()
				if err := m.RunAll(); !errors.Is(op.Cause(err), op.ErrInvalidInput) {
					t.Fatalf("RunAll: %v, want an error wrapping ErrInvalidInput", err)
				}
			})
		}
	}
}

// TestBiasAllocatesOneScoreMatrix measures what a TapeMachine allocates
// for forward+backward with a bias [1, 1, N, N] beyond the same graph
// without it: dBias, the one Nq×Nk tensor the op allocates, and O(N)
// besides, in both layouts (the BNHD backward moves dQ, dK and dV, not
// dBias). The bias and the other inputs are bound before measuring.
func TestBiasAllocatesOneScoreMatrix(t *testing.T) {
	// Large enough that the few megabytes a step's allocations vary by
	// (what the kernels' buffer pool kept from the step before) stay well
	// inside the quarter of an Nq×Nk tensor allowed.
	const n = 2048
	c := graphCase{1, 2, n, n, 32, true}
	p := c.params()
	p.Bias = &kernels.Bias{Bb: 1, Hb: 1}
	in := randomInputs(p, 3)
	scores := uint64(4 * n * n) // bytes of one float32 Nq×Nk tensor
	for _, layout := range []op.Layout{op.BHND, op.BNHD} {
		t.Run(layout.String(), func(t *testing.T) {
			plain := in
			plain.bias, plain.biasShape = nil, nil
			without, with := stepBytes(t, c, layout, plain), stepBytes(t, c, layout, in)
			extra := int64(with) - int64(without)
			t.Logf("allocated %d bytes without a bias, %d with: %d more, for a %d-byte dBias", without, with, extra, scores)
			if extra > int64(scores+scores/4) {
				t.Errorf("a bias cost %d more bytes, more than one Nq×Nk tensor (%d) and a quarter", extra, scores)
			}
		})
	}
}

// stepBytes builds the float32 graph of c (Nq = Nk) in layout on in (BNHD
// data is in's, reinterpreted: only the bytes matter here), takes its
// gradients and returns the bytes a TapeMachine allocates to run it once.
func stepBytes(t *testing.T, c graphCase, layout op.Layout, in inputs) uint64 {
	t.Helper()
	g := gorgonia.NewGraph()
	shape := []int{c.B, c.H, c.Nq, c.D}
	if layout == op.BNHD {
		shape = []int{c.B, c.Nq, c.H, c.D}
	}
	node := func(name string, data []float64) *gorgonia.Node {
		return valueNode(g, tensor.Float32, name, shape, data)
	}
	q, k, v := node("q", in.q), node("k", in.k), node("v", in.v)
	opts := []op.Option{op.WithCausal(c.causal), op.WithLayout(layout)}
	wrt := gorgonia.Nodes{q, k, v}
	if in.bias != nil {
		bias := valueNode(g, tensor.Float32, "bias", in.biasShape, in.bias)
		opts = append(opts, op.WithBias(bias))
		wrt = append(wrt, bias)
	}
	o, err := op.Attention(q, k, v, opts...)
	if err != nil {
		t.Fatal(err)
	}
	cost := gorgonia.Must(gorgonia.Sum(gorgonia.Must(gorgonia.HadamardProd(o, node("w", in.w)))))
	if _, err := gorgonia.Grad(cost, wrt...); err != nil {
		t.Fatal(err)
	}
	m := gorgonia.NewTapeMachine(g)
	defer m.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestBiasMasksWin gives masked pairs a bias of +1e30 and NaN, and some
// visible keys a bias of −Inf: the masked keys stay masked, the −Inf keys
// drop out, and the results are the reference's, finite; a row whose
// every visible key has a −Inf bias is NaN, as naive attention gives.
func TestBiasMasksWin(t *testing.T) {
	vc := variantCase{c: graphCase{1, 2, 9, 12, 4, true}, bias: [2]int{1, 2}, qLens: []int{8}}
	p := vc.params()
	in := randomInputs(p, 13)
	at := func(h, i, j int) *float64 { return &in.bias[(h*p.Nq+i)*p.Nk+j] }
	for i := range p.Nq {
		for j := range p.Nk {
			if lo, hi := p.Mask(0).KeyRange(i); j < lo || j >= hi {
				*at(0, i, j), *at(1, i, j) = 1e30, math.NaN()
			}
		}
	}
	*at(0, 5, 2), *at(1, 7, 0) = math.Inf(-1), math.Inf(-1)
	_, _, want := naiveReference(t, p, in)
	for _, lisp := range []bool{false, true} {
		got := vc.build(t, tensor.Float64, in).run(t, lisp)
		for j, name := range []string{"dQ", "dK", "dV", "dBias"} {
			for e, w := range want[j] {
				g := got[j+1][e]
				if math.IsNaN(g) || math.IsInf(g, 0) || math.Abs(g-w) > 1e-10*max(1, math.Abs(w)) {
					t.Fatalf("lisp=%v: %s[%d] = %v, want %v", lisp, name, e, g, w)
				}
			}
		}
	}
	for j := range p.Nk {
		*at(1, 4, j) = math.Inf(-1) // row 4 of head 1 sees keys 0 … 7
	}
	o := vc.build(t, tensor.Float64, in).run(t, false)[0]
	for d := range p.D {
		if x := o[(p.Nq+4)*p.D+d]; !math.IsNaN(x) {
			t.Fatalf("head 1 row 4, every visible key −Inf: O = %v, want NaN", x)
		}
	}
}

// TestBiasConstant passes the bias as a gorgonia.NewConstant, as a fixed
// mask or position bias would be: the forward and dQ are the reference's
// on both machines, and the constant takes no gradient.
func TestBiasConstant(t *testing.T) {
	vc := variantCase{c: graphCase{2, 2, 5, 7, 8, true}, bias: [2]int{1, 2}}
	p := vc.params()
	in := randomInputs(p, 17)
	o, _, grads := naiveReference(t, p, in)
	for _, lisp := range []bool{false, true} {
		g := gorgonia.NewGraph()
		c := vc.c
		q := valueNode(g, tensor.Float64, "q", []int{c.B, c.H, c.Nq, c.D}, in.q)
		k := valueNode(g, tensor.Float64, "k", []int{c.B, c.H, c.Nk, c.D}, in.k)
		v := valueNode(g, tensor.Float64, "v", []int{c.B, c.H, c.Nk, c.D}, in.v)
		bias := gorgonia.NewConstant(tensor.New(tensor.WithShape(in.biasShape...), tensor.WithBacking(slices.Clone(in.bias))))
		out, err := op.Attention(q, k, v, op.WithCausal(c.causal), op.WithBias(bias))
		if err != nil {
			t.Fatal(err)
		}
		w := valueNode(g, tensor.Float64, "w", []int{c.B, c.H, c.Nq, c.D}, in.w)
		cost := gorgonia.Must(gorgonia.Sum(gorgonia.Must(gorgonia.HadamardProd(out, w))))
		gr := graph{g: g, q: q, k: k, v: v, o: out, c: cost}
		got := gr.run(t, lisp)
		for j, want := range [][]float64{o, grads[0], grads[1], grads[2]} {
			if e := maxRelErr(got[j], want); !(e <= 1e-10) {
				t.Errorf("lisp=%v: output %d differs from the reference by %g", lisp, j, e)
			}
		}
	}
}
