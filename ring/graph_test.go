package ring

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// graphRun is one rank's graph: cost = sum(Attention(q, k, v) ∘ w).
type graphRun struct {
	g          *gorgonia.ExprGraph
	q, k, v, o *gorgonia.Node
	cost       *gorgonia.Node
}

// buildCost builds cost = sum(attn(q, k, v) ∘ w) in a new graph over the
// given [B, H, N, D] values (k, v with their own head count).
func buildCost(t testing.TB, dt tensor.Dtype, shapes [2][]int, q, k, v, w []float64,
	attn func(q, k, v *gorgonia.Node) (*gorgonia.Node, error)) graphRun {
	t.Helper()
	g := gorgonia.NewGraph()
	node := func(name string, shape []int, data []float64) *gorgonia.Node {
		var backing any = append([]float64(nil), data...)
		if dt == tensor.Float32 {
			f := make([]float32, len(data))
			for i, x := range data {
				f[i] = float32(x)
			}
			backing = f
		}
		val := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(backing))
		return gorgonia.NewTensor(g, dt, 4, gorgonia.WithShape(shape...), gorgonia.WithName(name), gorgonia.WithValue(val))
	}
	gr := graphRun{g: g, q: node("q", shapes[0], q), k: node("k", shapes[1], k), v: node("v", shapes[1], v)}
	wn := node("w", shapes[0], w)
	var err error
	if gr.o, err = attn(gr.q, gr.k, gr.v); err != nil {
		t.Fatal(err)
	}
	gr.cost = gorgonia.Must(gorgonia.Sum(gorgonia.Must(gorgonia.HadamardProd(gr.o, wn))))
	return gr
}

// run executes the graph, after gorgonia.Grad on a TapeMachine (twice,
// as a training loop does, the second run giving the results) or once on
// the LispMachine (which Gorgonia v0.9.18 cannot run twice), and returns
// o, dq, dk and dv as float64.
func (gr graphRun) run(lisp bool) ([][]float64, error) {
	var m gorgonia.VM
	runs := 2
	if lisp {
		m, runs = gorgonia.NewLispMachine(gr.g), 1
	} else {
		if _, err := gorgonia.Grad(gr.cost, gr.q, gr.k, gr.v); err != nil {
			return nil, err
		}
		m = gorgonia.NewTapeMachine(gr.g)
	}
	defer m.Close()
	for i := range runs {
		if i > 0 {
			m.Reset()
		}
		if err := m.RunAll(); err != nil {
			return nil, err
		}
	}
	out := [][]float64{float64s(gr.o.Value())}
	for _, n := range []*gorgonia.Node{gr.q, gr.k, gr.v} {
		g, err := n.Grad()
		if err != nil {
			return nil, err
		}
		out = append(out, float64s(g))
	}
	return out, nil
}

func float64s(v gorgonia.Value) []float64 {
	switch d := v.Data().(type) {
	case []float32:
		out := make([]float64, len(d))
		for i, x := range d {
			out[i] = float64(x)
		}
		return out
	case []float64:
		return append([]float64(nil), d...)
	}
	return nil
}

// graphCase is a ring in Gorgonia graphs: the layout, heads, mask, dtype,
// machine and softcap of one comparison with op.Attention.
type graphCase struct {
	l       Layout
	h, hkv  int
	causal  bool
	dt      tensor.Dtype
	lisp    bool
	softcap float64
}

func (c graphCase) String() string {
	return fmt.Sprintf("R=%d/N=%d/causal=%v/%v/lisp=%v/softcap=%v", c.l.Ranks(), c.l.N(), c.causal, c.dt, c.lisp, c.softcap)
}

// TestGraphMatchesOpAttention runs each rank's graph on its own goroutine
// and compares the gathered output and gradients with op.Attention on the
// whole sequence.
func TestGraphMatchesOpAttention(t *testing.T) {
	zz := func(n, r int) Layout { l, _ := ZigZag(n, r); return l }
	ct := func(n, r int) Layout { l, _ := Contiguous(n, r); return l }
	for _, c := range []graphCase{
		{zz(15, 3), 4, 2, true, tensor.Float64, false, 0},
		{ct(12, 4), 2, 2, false, tensor.Float64, false, 0},
		{zz(8, 1), 2, 1, true, tensor.Float64, false, 0},
		{zz(14, 2), 2, 2, true, tensor.Float32, false, 0},
		{zz(10, 2), 4, 2, true, tensor.Float64, true, 0},
		{ct(9, 3), 2, 2, false, tensor.Float64, true, 2},
	} {
		t.Run(c.String(), func(t *testing.T) {
			ts, err := LocalRing(c.l.Ranks())
			if err != nil {
				t.Fatal(err)
			}
			checkGraphRing(t, c, ts, nil)
		})
	}
}

// checkGraphRing builds each rank's graph over transports ts (rank r
// computing on backend(r), or op's default when backend is nil), runs the
// ranks' machines at once, one goroutine each, and compares the gathered
// output and gradients with op.Attention on the whole sequence on the CPU:
// within 1e-10 relative in float64, 1e-5 in float32.
func checkGraphRing(t *testing.T, c graphCase, ts []Transport, backend func(r int) kernels.Backend) {
	t.Helper()
	const b, d = 1, 4
	rc := ringCase{p: Problem{B: b, H: c.h, Hkv: c.hkv, D: d}, layout: c.l}
	g := randomGlobal[float64](rc, 11)
	w := randomGlobal[float64](rc, 12).q
	n := c.l.N()
	opts := []op.Option{op.WithCausal(c.causal), op.WithSoftcap(c.softcap)}
	full := buildCost(t, c.dt, [2][]int{{b, c.h, n, d}, {b, c.hkv, n, d}}, g.q, g.k, g.v, w,
		func(q, k, v *gorgonia.Node) (*gorgonia.Node, error) { return op.Attention(q, k, v, opts...) })
	want, err := full.run(false)
	if err != nil {
		t.Fatal(err)
	}
	got := make([][]float64, 4)
	for i, heads := range []int{c.h, c.h, c.hkv, c.hkv} {
		got[i] = make([]float64, b*heads*n*d)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for r := range c.l.Ranks() {
		nr := c.l.Len(r)
		local := func(x []float64, heads int) []float64 { return localRows(c.l, r, x, b*heads, d) }
		rg := Ring{Transport: ts[r], Layout: c.l, Timeout: 10 * time.Second}
		if backend != nil {
			rg.Backend = backend(r)
		}
		gr := buildCost(t, c.dt, [2][]int{{b, c.h, nr, d}, {b, c.hkv, nr, d}},
			local(g.q, c.h), local(g.k, c.hkv), local(g.v, c.hkv), local(w, c.h),
			func(q, k, v *gorgonia.Node) (*gorgonia.Node, error) { return Attention(q, k, v, rg, opts...) })
		wg.Go(func() {
			res, err := gr.run(c.lisp)
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for i, heads := range []int{c.h, c.h, c.hkv, c.hkv} {
				globalRows(c.l, r, res[i], got[i], b*heads, d)
			}
		})
	}
	wg.Wait()
	tol := 1e-10
	if c.dt == tensor.Float32 {
		tol = 1e-5
	}
	for i, name := range []string{"o", "dq", "dk", "dv"} {
		if e := relErr(got[i], want[i]); e > tol {
			t.Errorf("%s: relative error %.3g > %.0g", name, e, tol)
		}
	}
}

// TestGraphFailures checks that a rank whose node cannot be built, or
// whose backend fails in the backward, fails the other ranks' runs at
// once.
func TestGraphFailures(t *testing.T) {
	l, err := ZigZag(8, 2)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float64, 2*4*2)
	shapes := [2][]int{{1, 2, 4, 2}, {1, 2, 4, 2}}
	t.Run("build", func(t *testing.T) {
		ts, _ := LocalRing(2)
		gr := buildCost(t, tensor.Float64, shapes, x, x, x, x, func(q, k, v *gorgonia.Node) (*gorgonia.Node, error) {
			return Attention(q, k, v, Ring{Transport: ts[0], Layout: l, Timeout: 10 * time.Second}, op.WithCausal(true))
		})
		g1 := gorgonia.NewGraph()
		q1 := gorgonia.NewTensor(g1, tensor.Float64, 4, gorgonia.WithShape(1, 2, 4, 2), gorgonia.WithName("q"))
		for _, o := range []op.Option{op.WithWindow(1, 1), op.WithKVCache(nil), op.WithLayout(op.BNHD)} {
			if _, err := Attention(q1, q1, q1, Ring{Transport: ts[1], Layout: l}, o); !errors.Is(err, op.ErrInvalidInput) {
				t.Fatalf("an unsupported option: %v, want ErrInvalidInput", err)
			}
		}
		begin := time.Now()
		if _, err := gr.run(false); !errors.Is(op.Cause(err), ErrAborted) {
			t.Errorf("the other rank: %v, want ErrAborted", err)
		}
		if d := time.Since(begin); d > 5*time.Second {
			t.Errorf("took %v", d)
		}
	})
	t.Run("run", func(t *testing.T) {
		ts, _ := LocalRing(2)
		grs := make([]graphRun, 2)
		for r := range 2 {
			rg := Ring{Transport: ts[r], Layout: l, Timeout: 10 * time.Second}
			if r == 1 {
				rg.Backend = failing{backward: true}
			}
			grs[r] = buildCost(t, tensor.Float64, shapes, x, x, x, x, func(q, k, v *gorgonia.Node) (*gorgonia.Node, error) {
				return Attention(q, k, v, rg, op.WithCausal(true))
			})
		}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range 2 {
			wg.Go(func() { _, errs[r] = grs[r].run(false) })
		}
		wg.Wait()
		if !errors.Is(op.Cause(errs[1]), errDevice) || !errors.Is(op.Cause(errs[0]), ErrAborted) {
			t.Errorf("got %v and %v, want ErrAborted and the backend's error", errs[0], errs[1])
		}
	})
}
