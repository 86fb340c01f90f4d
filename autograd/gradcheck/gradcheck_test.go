package gradcheck

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// gradCheckMachines are the two ways Check can take the analytic gradient.
var gradCheckMachines = []struct {
	name string
	opts []Option
}{
	{"TapeMachine", nil},
	{"LispMachine", []Option{WithLispMachine()}},
}

func randMatrixValue(rng *rand.Rand, shape ...int) *tensor.Dense {
	data := make([]float64, tensor.Shape(shape).TotalSize())
	for i := range data {
		data[i] = 2*rng.Float64() - 1
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
}

func matrixNode(g *G.ExprGraph, name string, v *tensor.Dense) *G.Node {
	return G.NewMatrix(g, tensor.Float64, G.WithShape(v.Shape()...), G.WithName(name), G.WithValue(v))
}

// tanhGraph builds cost = Σ tanh(x·W) for x of 3×4 and W of 4×5.
func tanhGraph(seed uint64) (g *G.ExprGraph, x, W, cost *G.Node) {
	rng := rand.New(rand.NewPCG(seed, 1))
	g = G.NewGraph()
	x = matrixNode(g, "x", randMatrixValue(rng, 3, 4))
	W = matrixNode(g, "W", randMatrixValue(rng, 4, 5))
	cost = G.Must(G.Sum(G.Must(G.Tanh(G.Must(G.Mul(x, W))))))
	return g, x, W, cost
}

// tanhGrad is the gradient of Σ tanh(x·W) by hand: with T = tanh(x·W) and
// D = 1 − T∘T, dx = D·Wᵀ and dW = xᵀ·D.
func tanhGrad(x, W *tensor.Dense) (cost float64, dx, dW [][]float64) {
	m, k, n := x.Shape()[0], x.Shape()[1], W.Shape()[1]
	xd, wd := x.Float64s(), W.Float64s()
	D := make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				s += xd[i*k+p] * wd[p*n+j]
			}
			t := math.Tanh(s)
			cost += t
			D[i*n+j] = 1 - t*t
		}
	}
	dx, dW = make([][]float64, m), make([][]float64, k)
	for i := range m {
		dx[i] = make([]float64, k)
		for p := range k {
			for j := range n {
				dx[i][p] += D[i*n+j] * wd[p*n+j]
			}
		}
	}
	for p := range k {
		dW[p] = make([]float64, n)
		for j := range n {
			for i := range m {
				dW[p][j] += xd[i*k+p] * D[i*n+j]
			}
		}
	}
	return cost, dx, dW
}

func TestCheckTanhMatMul(t *testing.T) {
	for _, m := range gradCheckMachines {
		t.Run(m.name, func(t *testing.T) {
			_, x, W, cost := tanhGraph(1)
			xv, Wv := x.Value().(*tensor.Dense), W.Value().(*tensor.Dense)
			wantCost, dx, dW := tanhGrad(xv, Wv)

			r, err := Check(cost, G.Nodes{x, W}, m.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Err(); err != nil {
				t.Fatalf("%v\n%v", err, r)
			}
			if r.Machine != m.name {
				t.Errorf("Machine = %q, want %q", r.Machine, m.name)
			}
			if math.Abs(r.Cost-wantCost) > 1e-12 {
				t.Errorf("Cost = %v, want %v", r.Cost, wantCost)
			}
			if len(r.Inputs) != 2 || r.Inputs[0].Name != "x" || r.Inputs[1].Name != "W" {
				t.Fatalf("Inputs = %+v, want x then W", r.Inputs)
			}
			// The worst elements must carry the true derivative at their
			// index, from both sides.
			for k, want := range [][][]float64{dx, dW} {
				in := r.Inputs[k]
				if in.Checked != in.Shape.TotalSize() || in.Failed != 0 {
					t.Errorf("%s: checked %d failed %d, want %d and 0", in.Name, in.Checked, in.Failed, in.Shape.TotalSize())
				}
				i, j := in.Worst.Index[0], in.Worst.Index[1]
				if d := math.Abs(in.Worst.Numeric - want[i][j]); d > 1e-8 {
					t.Errorf("%v: numeric is %g from the true derivative %v", in.Worst, d, want[i][j])
				}
				if d := math.Abs(in.Worst.Analytic - want[i][j]); d > 1e-12 {
					t.Errorf("%v: analytic is %g from the true derivative %v", in.Worst, d, want[i][j])
				}
			}
			if r.Worst.Ratio != math.Max(r.Inputs[0].Worst.Ratio, r.Inputs[1].Worst.Ratio) {
				t.Errorf("overall worst %v is not the worse of the inputs' worst", r.Worst)
			}
		})
	}
}

// TestCheckScalarInput covers a *G.F64 input, elementwise ops, Mean
// (whose SizeOf has no DoDiff, rightly) and a scalar-by-scalar product:
// cost = s·mean(exp(v)∘v) for v of length 5, so ds = mean(exp(v)∘v) and
// dv = s·exp(v)∘(1+v)/5.
func TestCheckScalarInput(t *testing.T) {
	for _, m := range gradCheckMachines {
		t.Run(m.name, func(t *testing.T) {
			g := G.NewGraph()
			vv := []float64{-0.75, 0.5, 1.25, 0.1, -1.5}
			v := G.NewVector(g, tensor.Float64, G.WithShape(5), G.WithName("v"),
				G.WithValue(tensor.New(tensor.WithShape(5), tensor.WithBacking(slices.Clone(vv)))))
			s := G.NewScalar(g, tensor.Float64, G.WithName("s"), G.WithValue(1.5))
			cost := G.Must(G.Mul(s, G.Must(G.Mean(G.Must(G.HadamardProd(G.Must(G.Exp(v)), v))))))

			r, err := Check(cost, G.Nodes{s, v}, m.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Err(); err != nil {
				t.Fatalf("%v\n%v", err, r)
			}
			var ds float64
			for _, x := range vv {
				ds += math.Exp(x) * x / 5
			}
			if ws := r.Inputs[0].Worst; len(ws.Index) != 0 || math.Abs(ws.Analytic-ds) > 1e-12 || math.Abs(ws.Numeric-ds) > 1e-8 {
				t.Errorf("s: got %v, want derivative %v at index []", ws, ds)
			}
			wv := r.Inputs[1].Worst
			want := 1.5 * math.Exp(vv[wv.Index[0]]) * (1 + vv[wv.Index[0]]) / 5
			if math.Abs(wv.Analytic-want) > 1e-12 || math.Abs(wv.Numeric-want) > 1e-8 {
				t.Errorf("v: got %v, want derivative %v", wv, want)
			}
		})
	}
}

// TestCheckRestoresInputs checks that each wrt node is bound to its
// original Value, unmodified, and that the graph is left at the original
// point, both after a passing check and after one that fails midway.
func TestCheckRestoresInputs(t *testing.T) {
	for _, m := range gradCheckMachines {
		t.Run(m.name, func(t *testing.T) {
			_, x, W, cost := tanhGraph(2)
			xv, Wv := x.Value(), W.Value()
			xs, Ws := slices.Clone(xv.(*tensor.Dense).Float64s()), slices.Clone(Wv.(*tensor.Dense).Float64s())

			r, err := Check(cost, G.Nodes{x, W}, m.opts...)
			if err != nil {
				t.Fatal(err)
			}
			checkBound(t, x, xv, xs)
			checkBound(t, W, Wv, Ws)
			if got := cost.Value().Data().(float64); got != r.Cost {
				t.Errorf("cost node holds %v after the check, want the unperturbed %v", got, r.Cost)
			}
		})
		t.Run(m.name+"/error", func(t *testing.T) {
			g := G.NewGraph()
			xs := []float64{0.1, -0.2, 0.3, 0.4, 0.9, -0.5}
			xv := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(slices.Clone(xs)))
			x := matrixNode(g, "x", xv)
			// The op fails once the largest element, x[1 1], is perturbed
			// upwards: the gradient run and four elements succeed.
			op := squareOp{bugAt: -1, limit: 0.9 + 1e-7}
			cost := G.Must(G.Sum(G.Must(G.ApplyOp(squareLispOp{op}, x))))
			if _, err := Check(cost, G.Nodes{x}, m.opts...); err == nil || !strings.Contains(err.Error(), "above limit") {
				t.Fatalf("err = %v, want the op's error", err)
			}
			checkBound(t, x, xv, xs)
		})
	}
}

func checkBound(t *testing.T, n *G.Node, want G.Value, wantData []float64) {
	t.Helper()
	if n.Value() != want {
		t.Errorf("%s is bound to %p, want the original %p", n.Name(), n.Value(), want)
	}
	got := want.(*tensor.Dense).Float64s()
	for i := range wantData {
		if math.Float64bits(got[i]) != math.Float64bits(wantData[i]) {
			t.Errorf("%s[%d] = %v after the check, want %v bit for bit", n.Name(), i, got[i], wantData[i])
		}
	}
}

// TestCheckCatchesWrongGradient uses an op whose backward (SymDiff on the
// TapeMachine, DoDiff on the LispMachine) is wrong at one element.
func TestCheckCatchesWrongGradient(t *testing.T) {
	for _, m := range gradCheckMachines {
		for _, tc := range []struct {
			name   string
			bugAt  int
			factor float64 // the wrong gradient is factor times the right one
		}{
			{"factor 3/2", 7, 1.5},
			{"sign", 0, -1},
			{"rel 1e-3", 11, 1 + 1e-3},
		} {
			t.Run(m.name+"/"+tc.name, func(t *testing.T) {
				_, x, W, cost := squareGraph(4, squareOp{bugAt: tc.bugAt, factor: tc.factor})
				r, err := Check(cost, G.Nodes{W, x}, m.opts...)
				if err != nil {
					t.Fatal(err)
				}
				if r.Passed() || r.Failed != 1 {
					t.Fatalf("Passed %v with %d failures, want exactly one failure:\n%v", r.Passed(), r.Failed, r)
				}
				if !errors.Is(r.Err(), ErrMismatch) {
					t.Errorf("Err() = %v, want ErrMismatch", r.Err())
				}
				wantIndex := []int{tc.bugAt / 4, tc.bugAt % 4}
				if r.Worst.Input != "x" || !slices.Equal(r.Worst.Index, wantIndex) {
					t.Errorf("worst element is %v, want x%v", r.Worst, wantIndex)
				}
				if ratio := r.Worst.Analytic / r.Worst.Numeric; math.Abs(ratio-tc.factor) > 1e-6 {
					t.Errorf("analytic/numeric = %v, want %v", ratio, tc.factor)
				}
				if in := r.Inputs[0]; in.Name != "W" || in.Failed != 0 {
					t.Errorf("W reported %d failures; its gradient is right", in.Failed)
				}
				if in := r.Inputs[1]; in.Failed != 1 || in.Worst.Ratio != r.Worst.Ratio {
					t.Errorf("x: %d failures, worst %v; want 1 and the overall worst", in.Failed, in.Worst)
				}
				msg := r.Err().Error()
				want := fmt.Sprintf("x%v", wantIndex)
				if !strings.Contains(msg, want) || !strings.Contains(r.String(), "FAIL") || !strings.Contains(r.String(), want) {
					t.Errorf("Err() and String() should name %s and FAIL:\n%v\n%v", want, msg, r)
				}
			})
		}
		t.Run(m.name+"/correct op", func(t *testing.T) {
			// The same harness with a right gradient passes, so the failures
			// above come from the bug alone.
			_, x, W, cost := squareGraph(4, squareOp{bugAt: -1})
			r, err := Check(cost, G.Nodes{W, x}, m.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Err(); err != nil {
				t.Fatalf("%v\n%v", err, r)
			}
			if !strings.Contains(r.String(), " ok: 0 of 32 elements") {
				t.Errorf("String() has no ok verdict:\n%v", r)
			}
		})
	}
}

// squareGraph builds cost = Σ tanh(square(x)·W) for x of 3×4 and W of 4×5.
func squareGraph(seed uint64, op squareOp) (g *G.ExprGraph, x, W, cost *G.Node) {
	rng := rand.New(rand.NewPCG(seed, 1))
	g = G.NewGraph()
	x = matrixNode(g, "x", randMatrixValue(rng, 3, 4))
	W = matrixNode(g, "W", randMatrixValue(rng, 4, 5))
	sq := G.Must(G.ApplyOp(squareLispOp{op}, x))
	cost = G.Must(G.Sum(G.Must(G.Tanh(G.Must(G.Mul(sq, W))))))
	return g, x, W, cost
}

// TestCheckOptions checks that the tolerance and the step reach the
// comparison: a gradient 1e-3 too large in relative terms passes or fails
// with rtol on either side of 1e-3, and a coarse step fails a right gradient.
func TestCheckOptions(t *testing.T) {
	for _, m := range gradCheckMachines {
		t.Run(m.name, func(t *testing.T) {
			_, x, _, cost := squareGraph(10, squareOp{bugAt: 5, factor: 1 + 1e-3})
			for _, tc := range []struct {
				rtol  float64
				ratio float64 // about 1e-3/rtol
			}{{1.5e-3, 2.0 / 3}, {0.7e-3, 1 / 0.7}} {
				r, err := Check(cost, G.Nodes{x}, append(slices.Clone(m.opts), WithTolerance(0, tc.rtol))...)
				if err != nil {
					t.Fatal(err)
				}
				if r.Atol != 0 || r.Rtol != tc.rtol {
					t.Errorf("report has atol %v rtol %v, want 0 and %v", r.Atol, r.Rtol, tc.rtol)
				}
				if !slices.Equal(r.Worst.Index, []int{1, 1}) || math.Abs(r.Worst.Ratio-tc.ratio) > 1e-3 {
					t.Errorf("rtol %v: worst %v with ratio %v, want x[1 1] with ratio %.4f", tc.rtol, r.Worst, r.Worst.Ratio, tc.ratio)
				}
				if wantPass := tc.ratio <= 1; r.Passed() != wantPass || (r.Err() == nil) != wantPass {
					t.Errorf("rtol %v: Passed() = %v, Err() = %v; want pass %v", tc.rtol, r.Passed(), r.Err(), wantPass)
				}
			}

			_, x, W, cost := tanhGraph(11)
			r, err := Check(cost, G.Nodes{x, W}, append(slices.Clone(m.opts), WithStep(0.3))...)
			if err != nil {
				t.Fatal(err)
			}
			if r.Step != 0.3 || r.Passed() {
				t.Errorf("step %v passed %v; want step 0.3 to fail on its truncation error:\n%v", r.Step, r.Passed(), r)
			}
		})
	}
}

func TestCheckRepeatable(t *testing.T) {
	// Running twice on one graph must give the same report: the TapeMachine
	// path reuses the gradient nodes of the first run (a second Grad fails on
	// squareDiffOp, which is not differentiable), and the LispMachine would
	// add the second gradient to the first if Check did not clear it.
	for _, m := range gradCheckMachines {
		t.Run(m.name, func(t *testing.T) {
			g, x, W, cost := squareGraph(5, squareOp{bugAt: -1})
			r1, err := Check(cost, G.Nodes{x, W}, m.opts...)
			if err != nil {
				t.Fatal(err)
			}
			nodes := len(g.AllNodes())
			r2, err := Check(cost, G.Nodes{x, W}, m.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if len(g.AllNodes()) != nodes {
				t.Errorf("second run grew the graph from %d to %d nodes", nodes, len(g.AllNodes()))
			}
			if err := r2.Err(); err != nil {
				t.Fatalf("second run: %v", err)
			}
			if r1.String() != r2.String() {
				t.Errorf("reports differ:\n%v\n%v", r1, r2)
			}
		})
	}
	t.Run("Tape, Lisp, Tape", func(t *testing.T) {
		_, x, W, cost := tanhGraph(6)
		for _, m := range append(slices.Clone(gradCheckMachines), gradCheckMachines[0]) {
			r, err := Check(cost, G.Nodes{x, W}, m.opts...)
			if err != nil {
				t.Fatalf("%s: %v", m.name, err)
			}
			if err := r.Err(); err != nil {
				t.Fatalf("%s: %v", m.name, err)
			}
		}
	})
}

func TestCheckMaxElements(t *testing.T) {
	_, x, W, cost := squareGraph(7, squareOp{bugAt: -1})
	r1, err := Check(cost, G.Nodes{x, W}, WithMaxElements(5, 42))
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range r1.Inputs {
		if in.Checked != 5 {
			t.Errorf("%s: checked %d elements, want 5", in.Name, in.Checked)
		}
	}
	r2, err := Check(cost, G.Nodes{x, W}, WithMaxElements(5, 42))
	if err != nil {
		t.Fatal(err)
	}
	if r1.String() != r2.String() {
		t.Errorf("same seed, different reports:\n%v\n%v", r1, r2)
	}

	// The sample differs between inputs of the same size and between seeds.
	a, b := sampleIndices(20, 5, 42, 0), sampleIndices(20, 5, 42, 1)
	c := sampleIndices(20, 5, 43, 0)
	if slices.Equal(a, b) || slices.Equal(a, c) {
		t.Errorf("samples %v %v %v should differ", a, b, c)
	}
	for _, s := range [][]int{a, b, c} {
		if len(s) != 5 || !slices.IsSorted(s) || len(slices.Compact(slices.Clone(s))) != 5 || s[0] < 0 || s[4] >= 20 {
			t.Errorf("sample %v: want 5 distinct sorted indices in [0, 20)", s)
		}
	}
	if got := sampleIndices(4, 5, 42, 0); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Errorf("max above size: got %v, want every index", got)
	}
	if got := sampleIndices(3, 0, 42, 0); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("max 0: got %v, want every index", got)
	}
}

func TestCompareElement(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		a, n, atol, rtol float64
		abs, rel, ratio  float64
	}{
		{a: 1, n: 1, atol: 1e-6, rtol: 1e-5},
		{a: 0, n: 0, atol: 0, rtol: 0},
		{a: 1.5, n: 1, atol: 0.25, rtol: 0.25, abs: 0.5, rel: 0.5, ratio: 1},
		{a: 3, n: 2, atol: 0.5, rtol: 0.25, abs: 1, rel: 0.5, ratio: 1},
		{a: 2, n: -2, atol: 1, rtol: 0, abs: 4, rel: 2, ratio: 4},
		{a: 1e-7, n: 0, atol: 1e-6, rtol: 1e-5, abs: 1e-7, rel: inf, ratio: 0.1},
		{a: 1, n: 0.5, atol: 0, rtol: 0, abs: 0.5, rel: 1, ratio: inf},
		{a: math.NaN(), n: 1, atol: 1, rtol: 1, abs: math.NaN(), rel: math.NaN(), ratio: inf},
		{a: 1, n: inf, atol: 1, rtol: 1, abs: inf, rel: math.NaN(), ratio: inf},
	} {
		e := compareElement(tc.a, tc.n, tc.atol, tc.rtol)
		same := func(got, want float64) bool {
			return got == want || (math.IsNaN(got) && math.IsNaN(want)) || math.Abs(got-want) <= 1e-15*math.Abs(want)
		}
		if !same(e.AbsErr, tc.abs) || !same(e.RelErr, tc.rel) || !same(e.Ratio, tc.ratio) {
			t.Errorf("compareElement(%v, %v, %v, %v) = abs %v rel %v ratio %v, want %v %v %v",
				tc.a, tc.n, tc.atol, tc.rtol, e.AbsErr, e.RelErr, e.Ratio, tc.abs, tc.rel, tc.ratio)
		}
	}
}

func TestCheckErrors(t *testing.T) {
	valid := func() (x, W, cost *G.Node) {
		_, x, W, cost = tanhGraph(8)
		return x, W, cost
	}
	for _, tc := range []struct {
		name  string
		setup func() (*G.Node, G.Nodes, []Option)
		want  string
	}{
		{"nil cost", func() (*G.Node, G.Nodes, []Option) {
			x, _, _ := valid()
			return nil, G.Nodes{x}, nil
		}, "cost is nil"},
		{"non-scalar cost", func() (*G.Node, G.Nodes, []Option) {
			x, W, _ := valid()
			return G.Must(G.Tanh(G.Must(G.Mul(x, W)))), G.Nodes{x}, nil
		}, "not a scalar type"},
		{"float32 cost", func() (*G.Node, G.Nodes, []Option) {
			g := G.NewGraph()
			x := G.NewVector(g, tensor.Float32, G.WithShape(3), G.WithName("x"), G.WithInit(G.Ones()))
			return G.Must(G.Sum(x)), G.Nodes{x}, nil
		}, "only float64"},
		{"float32 input", func() (*G.Node, G.Nodes, []Option) {
			x, W, cost := valid()
			y := G.NewScalar(x.Graph(), tensor.Float32, G.WithName("y"), G.WithValue(float32(1)))
			return cost, G.Nodes{W, y}, nil
		}, "only float64"},
		{"no wrt", func() (*G.Node, G.Nodes, []Option) {
			_, _, cost := valid()
			return cost, nil, nil
		}, "no wrt"},
		{"nil wrt", func() (*G.Node, G.Nodes, []Option) {
			x, _, cost := valid()
			return cost, G.Nodes{x, nil}, nil
		}, "wrt[1] is nil"},
		{"other graph", func() (*G.Node, G.Nodes, []Option) {
			_, _, cost := valid()
			other, _, _ := valid()
			return cost, G.Nodes{other}, nil
		}, "not in cost's graph"},
		{"not an input", func() (*G.Node, G.Nodes, []Option) {
			x, W, cost := valid()
			return cost, G.Nodes{G.Must(G.Mul(x, W))}, nil
		}, "not an input"},
		{"constant", func() (*G.Node, G.Nodes, []Option) {
			x, _, cost := valid()
			c := x.Graph().Constant(G.NewF64(2))
			return G.Must(G.Mul(c, cost)), G.Nodes{x, c}, nil
		}, "wrt[1] \"2\" is not an input"},
		{"duplicate", func() (*G.Node, G.Nodes, []Option) {
			x, W, cost := valid()
			return cost, G.Nodes{x, W, x}, nil
		}, "wrt[2] \"x\" appears twice"},
		{"unused input", func() (*G.Node, G.Nodes, []Option) {
			x, _, cost := valid()
			z := G.NewScalar(x.Graph(), tensor.Float64, G.WithName("z"), G.WithValue(1.0))
			return cost, G.Nodes{x, z}, nil
		}, "does not depend on wrt[1] \"z\""},
		{"unbound input", func() (*G.Node, G.Nodes, []Option) {
			g := G.NewGraph()
			x := G.NewVector(g, tensor.Float64, G.WithShape(3), G.WithName("x"))
			return G.Must(G.Sum(x)), G.Nodes{x}, nil
		}, "\"x\" has no value bound"},
		{"zero step", func() (*G.Node, G.Nodes, []Option) {
			x, _, cost := valid()
			return cost, G.Nodes{x}, []Option{WithStep(0)}
		}, "step 0"},
		{"NaN step", func() (*G.Node, G.Nodes, []Option) {
			x, _, cost := valid()
			return cost, G.Nodes{x}, []Option{WithStep(math.NaN())}
		}, "step NaN"},
		{"negative atol", func() (*G.Node, G.Nodes, []Option) {
			x, _, cost := valid()
			return cost, G.Nodes{x}, []Option{WithTolerance(-1, 0)}
		}, "tolerances"},
		{"infinite rtol", func() (*G.Node, G.Nodes, []Option) {
			x, _, cost := valid()
			return cost, G.Nodes{x}, []Option{WithTolerance(0, math.Inf(1))}
		}, "tolerances"},
		{"LispMachine, op without DoDiff", func() (*G.Node, G.Nodes, []Option) {
			g := G.NewGraph()
			x := matrixNode(g, "x", randMatrixValue(rand.New(rand.NewPCG(9, 1)), 2, 2))
			// squareOp itself has SymDiff only.
			cost := G.Must(G.Sum(G.Must(G.ApplyOp(squareOp{bugAt: -1}, x))))
			return cost, G.Nodes{x}, []Option{WithLispMachine()}
		}, "has no DoDiff"},
		{"op writes to its input", func() (*G.Node, G.Nodes, []Option) {
			g := G.NewGraph()
			x := matrixNode(g, "x", randMatrixValue(rand.New(rand.NewPCG(9, 1)), 2, 2))
			cost := G.Must(G.Sum(G.Must(G.ApplyOp(squareLispOp{squareOp{bugAt: -1, mutate: true}}, x))))
			return cost, G.Nodes{x}, nil
		}, "wrote to the value of input \"x\" (element [0 0]) while computing the gradient"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cost, wrt, opts := tc.setup()
			r, err := Check(cost, wrt, opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
			if r != nil {
				t.Errorf("report %v with an error", r)
			}
		})
	}
}

// squareOp computes x∘x for a float64 *tensor.Dense. Its gradient is
// deliberately wrong at flat index bugAt (none if negative), where it is
// factor times the right value. It implements SymDiff but not DoDiff; see
// squareLispOp.
type squareOp struct {
	bugAt  int
	factor float64
	mutate bool    // Do adds 1 to its input's first element
	limit  float64 // if not 0, Do fails on an input element above limit
}

var (
	_ G.SDOp = squareOp{}
	_ G.ADOp = squareLispOp{}
)

func (op squareOp) Arity() int { return 1 }
func (op squareOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}
func (op squareOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return in[0].(tensor.Shape).Clone(), nil
}
func (op squareOp) ReturnsPtr() bool     { return false }
func (op squareOp) CallsExtern() bool    { return false }
func (op squareOp) OverwritesInput() int { return -1 }
func (op squareOp) String() string {
	return fmt.Sprintf("square{bug %d×%g, mutate %t, limit %g}", op.bugAt, op.factor, op.mutate, op.limit)
}
func (op squareOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op squareOp) Hashcode() uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}

func (op squareOp) Do(in ...G.Value) (G.Value, error) {
	x := in[0].(*tensor.Dense)
	xd := x.Float64s()
	out := make([]float64, len(xd))
	for i, v := range xd {
		if op.limit != 0 && v > op.limit {
			return nil, fmt.Errorf("square: %v above limit %v", v, op.limit)
		}
		out[i] = v * v
	}
	if op.mutate {
		xd[0]++
	}
	return tensor.New(tensor.WithShape(x.Shape().Clone()...), tensor.WithBacking(out)), nil
}

func (op squareOp) DiffWRT(int) []bool { return []bool{true} }

func (op squareOp) SymDiff(in G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	dx, err := G.ApplyOp(squareDiffOp{op}, in[0], grad)
	return G.Nodes{dx}, err
}

// squareLispOp is squareOp with DoDiff, for the LispMachine.
type squareLispOp struct{ squareOp }

func (op squareLispOp) DoDiff(_ G.ExecutionContext, in G.Nodes, out *G.Node) error {
	xGrad, err := in[0].Grad()
	if err != nil {
		return err
	}
	outGrad, err := out.Grad()
	if err != nil {
		return err
	}
	dx, err := squareDiffOp{op.squareOp}.Do(in[0].Value(), outGrad)
	if err != nil {
		return err
	}
	acc := xGrad.(*tensor.Dense).Float64s()
	for i, v := range dx.(*tensor.Dense).Float64s() {
		acc[i] += v
	}
	return nil
}

// squareDiffOp computes dx = 2·x∘grad, wrong at op.bugAt.
type squareDiffOp struct{ op squareOp }

func (d squareDiffOp) Arity() int { return 2 }
func (d squareDiffOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a, a)
}
func (d squareDiffOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return in[0].(tensor.Shape).Clone(), nil
}
func (d squareDiffOp) ReturnsPtr() bool      { return false }
func (d squareDiffOp) CallsExtern() bool     { return false }
func (d squareDiffOp) OverwritesInput() int  { return -1 }
func (d squareDiffOp) String() string        { return "d" + d.op.String() }
func (d squareDiffOp) WriteHash(h hash.Hash) { fmt.Fprint(h, d.String()) }
func (d squareDiffOp) Hashcode() uint32 {
	h := fnv.New32a()
	d.WriteHash(h)
	return h.Sum32()
}

func (d squareDiffOp) Do(in ...G.Value) (G.Value, error) {
	x, grad := in[0].(*tensor.Dense), in[1].(*tensor.Dense)
	xd, gd := x.Float64s(), grad.Float64s()
	out := make([]float64, len(xd))
	for i := range out {
		out[i] = 2 * xd[i] * gd[i]
		if i == d.op.bugAt {
			out[i] *= d.op.factor
		}
	}
	return tensor.New(tensor.WithShape(x.Shape().Clone()...), tensor.WithBacking(out)), nil
}
