package op_test

import (
	"errors"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestScaleRepresentable refuses, while the graph is built, a scale that
// the tensors' dtype turns into infinity or into 0: float32 attention with
// WithScale(1e39) used to run and return NaN or 0.
func TestScaleRepresentable(t *testing.T) {
	for _, c := range []struct {
		dt    tensor.Dtype
		scale float64
		ok    bool
	}{
		{tensor.Float32, 1e39, false},
		{tensor.Float32, -1e39, false},
		{tensor.Float32, 1e-50, false},
		{tensor.Float32, math.MaxFloat32, true},
		{tensor.Float32, 0, true},     // uniform attention, documented
		{tensor.Float32, 1e-40, true}, // a float32 subnormal
		{tensor.Float64, 1e39, true},
		{tensor.Float64, 1e-300, true},
	} {
		g := gorgonia.NewGraph()
		q := gorgonia.NewTensor(g, c.dt, 4, gorgonia.WithShape(1, 1, 4, 8), gorgonia.WithName("q"))
		_, err := op.Attention(q, q, q, op.WithScale(c.scale))
		if c.ok && err != nil {
			t.Errorf("%v scale %v: %v", c.dt, c.scale, err)
		}
		if !c.ok && !errors.Is(err, op.ErrInvalidInput) {
			t.Errorf("%v scale %v: error %v, want one wrapping ErrInvalidInput", c.dt, c.scale, err)
		}
	}
}

// TestValueShapeChecked gives the inputs of a built node values of another
// shape with the same number of elements, which used to be reinterpreted
// silently: bound at construction (gorgonia.WithValue does not compare
// shapes) or reshaped in place after the node was built. Running the graph
// must fail with an error wrapping ErrInvalidInput, on both machines.
func TestValueShapeChecked(t *testing.T) {
	shape := tensor.Shape{2, 1, 4, 8}
	for _, c := range []struct {
		name    string
		input   int // 0 q, 1 k, 2 v, −1 all three
		reshape tensor.Shape
		inPlace bool // reshape the bound value after building, else bind it reshaped
	}{
		{"q bound as (2,1,2,16)", 0, tensor.Shape{2, 1, 2, 16}, false},
		{"all bound as (2,1,2,16)", -1, tensor.Shape{2, 1, 2, 16}, false},
		{"v reshaped to (2,1,8,4)", 2, tensor.Shape{2, 1, 8, 4}, true},
		{"all reshaped to (1,2,4,8)", -1, tensor.Shape{1, 2, 4, 8}, true},
	} {
		for _, lisp := range []bool{false, true} {
			name := c.name + "/tape"
			if lisp {
				name = c.name + "/lisp"
			}
			t.Run(name, func(t *testing.T) {
				g := gorgonia.NewGraph()
				var in [3]*gorgonia.Node
				var vals [3]*tensor.Dense
				for i, n := range []string{"q", "k", "v"} {
					vals[i] = tensor.New(tensor.WithShape(shape...), tensor.WithBacking(make([]float64, shape.TotalSize())))
					if (c.input == i || c.input == -1) && !c.inPlace {
						if err := vals[i].Reshape(c.reshape...); err != nil {
							t.Fatal(err)
						}
					}
					in[i] = gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(shape...), gorgonia.WithName(n),
						gorgonia.WithValue(vals[i]))
				}
				if _, err := op.Attention(in[0], in[1], in[2]); err != nil {
					t.Fatal(err)
				}
				for i := range in {
					if (c.input == i || c.input == -1) && c.inPlace {
						if err := vals[i].Reshape(c.reshape...); err != nil {
							t.Fatal(err)
						}
					}
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

	// The op is an exported Gorgonia op: Do itself refuses a value of
	// another dtype than the one it was built for.
	g := gorgonia.NewGraph()
	q := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(shape...), gorgonia.WithName("q"))
	o, err := op.Attention(q, q, q)
	if err != nil {
		t.Fatal(err)
	}
	f64 := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(make([]float64, shape.TotalSize())))
	f32 := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(make([]float32, shape.TotalSize())))
	if _, err := o.Op().Do(f64, f32, f64); !errors.Is(err, op.ErrInvalidInput) {
		t.Errorf("Do with a float32 k: %v, want an error wrapping ErrInvalidInput", err)
	}
}

// TestConstantInputs uses gorgonia.NewConstant for k and v (and then for q):
// Gorgonia's own ops accept constants, and so must attention, forward and
// backward on both machines, with gradients for the variable inputs only.
func TestConstantInputs(t *testing.T) {
	c := graphCase{B: 1, H: 2, Nq: 5, Nk: 7, D: 8, causal: true}
	p := c.params()
	in := randomInputs(p, 42)
	want := reference(t, p, in)
	value := func(n int, data []float64) *tensor.Dense {
		return tensor.New(tensor.WithShape(c.B, c.H, n, c.D), tensor.WithBacking(data))
	}
	for _, lisp := range []bool{false, true} {
		g := gorgonia.NewGraph()
		q := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(c.B, c.H, c.Nq, c.D), gorgonia.WithName("q"),
			gorgonia.WithValue(value(c.Nq, in.q)))
		k, v := gorgonia.NewConstant(value(c.Nk, in.k)), gorgonia.NewConstant(value(c.Nk, in.v))
		w := gorgonia.NewConstant(value(c.Nq, in.w))
		o, err := op.Attention(q, k, v, op.WithCausal(c.causal))
		if err != nil {
			t.Fatal(err)
		}
		cost := gorgonia.Must(gorgonia.Sum(gorgonia.Must(gorgonia.HadamardProd(o, w))))
		var m gorgonia.VM
		if lisp {
			m = gorgonia.NewLispMachine(g)
		} else {
			if _, err := gorgonia.Grad(cost, q); err != nil {
				t.Fatal(err)
			}
			m = gorgonia.NewTapeMachine(g)
		}
		if err := m.RunAll(); err != nil {
			t.Fatalf("lisp=%v: %v", lisp, err)
		}
		m.Close()
		dq, err := q.Grad()
		if err != nil {
			t.Fatal(err)
		}
		for i, pair := range [][2][]float64{{o.Value().Data().([]float64), want[0]}, {dq.Data().([]float64), want[1]}} {
			if e := maxRelErr(pair[0], pair[1]); !(e <= 1e-10) {
				t.Errorf("lisp=%v: output %d differs from the reference by %g", lisp, i, e)
			}
		}
	}

	// All three constant: no graph to put the node in.
	k := gorgonia.NewConstant(value(c.Nk, in.k))
	if _, err := op.Attention(k, k, k); !errors.Is(err, op.ErrInvalidInput) {
		t.Errorf("three constants: %v, want an error wrapping ErrInvalidInput", err)
	}
}

// reference returns O and dQ of the float64 naive computation for the loss
// sum(O∘w).
func reference(t *testing.T, p kernels.Params, in inputs) [2][]float64 {
	t.Helper()
	o, lse := make([]float64, p.QLen()), make([]float64, p.LSELen())
	if err := kernels.NaiveForward(p, in.q, in.k, in.v, o, lse); err != nil {
		t.Fatal(err)
	}
	dq, dk, dv := make([]float64, p.QLen()), make([]float64, p.KLen()), make([]float64, p.KLen())
	if err := kernels.NaiveBackward(p, in.q, in.k, in.v, o, lse, in.w, nil, dq, dk, dv); err != nil {
		t.Fatal(err)
	}
	return [2][]float64{o, dq}
}

// maxRelErr is the largest |a−b| relative to max|b|.
func maxRelErr(a, b []float64) float64 {
	var e, m float64
	for i := range a {
		e = max(e, math.Abs(a[i]-b[i]))
		m = max(m, math.Abs(b[i]))
	}
	return e / max(m, 1e-300)
}

// TestOutOfMemoryIsAnError runs attention under a Go memory limit too low
// for its result: the run must fail with an error wrapping ErrOutOfMemory
// (checked before allocating), and the process go on.
func TestOutOfMemoryIsAnError(t *testing.T) {
	const n, d = 8192, 64 // q is 4 MiB of float64
	g := gorgonia.NewGraph()
	val := tensor.New(tensor.WithShape(1, 1, n, d), tensor.WithBacking(make([]float64, n*d)))
	q := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 1, n, d), gorgonia.WithName("q"), gorgonia.WithValue(val))
	if _, err := op.Attention(q, q, q); err != nil {
		t.Fatal(err)
	}
	m := gorgonia.NewTapeMachine(g)
	defer m.Close()

	// A limit 1 MiB above what the runtime holds now leaves no room for a
	// 4 MiB output.
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	held := int64(s[0].Value.Uint64()) - int64(s[1].Value.Uint64())
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(held + 1<<20))
	err := m.RunAll()
	if !errors.Is(op.Cause(err), op.ErrOutOfMemory) {
		t.Fatalf("RunAll under a tight memory limit: %v, want an error wrapping ErrOutOfMemory", err)
	}
}
