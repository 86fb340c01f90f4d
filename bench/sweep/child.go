package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/gorgonia-flash/flashattention/examples/transformer/model"
	"github.com/gorgonia-flash/flashattention/internal/naivegraph"
	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
)

// measurement is what a child prints, one JSON object on stdout.
type measurement struct {
	// kindStep: one optimiser step (forward, backward, Adam) of the model.
	StepSeconds     float64 `json:",omitempty"`
	TokensPerSecond float64 `json:",omitempty"`
	// kindOp: attention alone on [B, H, N, D], causal.
	FwdSeconds    float64 `json:",omitempty"`
	FwdBwdSeconds float64 `json:",omitempty"`
	FwdGFLOPS     float64 `json:",omitempty"`
	FwdBwdGFLOPS  float64 `json:",omitempty"`
}

// minTimed is how long repeated timed runs of one point go on for: short
// problems are repeated and the fastest run kept, long ones run once.
const minTimed = time.Second

func runChild(o *options, stdout io.Writer) error {
	if err := limitMemory(o.memLimit); err != nil {
		return fmt.Errorf("setting the memory limit: %w", err)
	}
	var m measurement
	var err error
	switch o.childKind {
	case kindStep:
		m, err = measureStep(o)
	case kindOp:
		m, err = measureOp(o)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(m)
}

// timeRuns calls f once to warm up (allocation of the tape's buffers), then
// times it until minTimed has passed, at most 5 times, and returns the
// fastest run.
func timeRuns(f func() error) (float64, error) {
	if err := f(); err != nil {
		return 0, err
	}
	best, total := math.Inf(1), time.Duration(0)
	for i := 0; i < 5 && total < minTimed; i++ {
		start := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		d := time.Since(start)
		total += d
		best = min(best, d.Seconds())
	}
	return best, nil
}

func measureStep(o *options) (measurement, error) {
	n, impl := o.ns[0], o.impls[0]
	cfg := o.shape.config(n, "float32")
	m, err := model.New(cfg, 1)
	if err != nil {
		return measurement{}, err
	}
	gr, err := m.NewGraph(o.shape.Batch, impl, true, o.flashOpts...)
	if err != nil {
		return measurement{}, err
	}
	rng := rand.New(rand.NewPCG(1, 1))
	in, tg := make([][]int, o.shape.Batch), make([][]int, o.shape.Batch)
	for b := range o.shape.Batch {
		in[b], tg[b] = make([]int, n), make([]int, n)
		for i := range n {
			in[b][i], tg[b][i] = rng.IntN(cfg.Vocab), rng.IntN(cfg.Vocab)
		}
	}
	solver := G.NewAdamSolver()
	sec, err := timeRuns(func() error {
		if _, err := gr.Run(in, tg); err != nil {
			return err
		}
		return gr.Step(solver)
	})
	if err != nil {
		return measurement{}, err
	}
	return measurement{StepSeconds: sec, TokensPerSecond: float64(o.shape.Batch*n) / sec}, nil
}

// measureOp times causal attention alone, forward and forward+backward, on
// the shapes one block of the model gives it.
func measureOp(o *options) (measurement, error) {
	n, impl := o.ns[0], o.impls[0]
	p := kernels.Params{B: o.shape.Batch, H: o.shape.Heads, Nq: n, Nk: n, D: o.shape.Dim / o.shape.Heads, Causal: true}
	p.Scale = 1 / math.Sqrt(float64(p.D))
	rng := rand.New(rand.NewPCG(2, 2))
	data := func() *tensor.Dense {
		x := make([]float32, p.QLen())
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return tensor.New(tensor.WithShape(p.B, p.H, n, p.D), tensor.WithBacking(x))
	}
	q, k, v, do := data(), data(), data(), data()
	build := func(train bool) (G.VM, error) {
		g := G.NewGraph()
		node := func(name string, t *tensor.Dense) *G.Node {
			// Named, so that gorgonia does not merge equal-shaped inputs.
			return G.NewTensor(g, tensor.Float32, 4, G.WithShape(t.Shape()...), G.WithName(name), G.WithValue(t))
		}
		qn, kn, vn := node("q", q), node("k", k), node("v", v)
		var out *G.Node
		var err error
		if impl == model.AttentionNaive {
			out, err = naivegraph.Attention(qn, kn, vn, p.Scale, true)
		} else {
			out, err = op.Attention(qn, kn, vn, append([]op.Option{op.WithCausal(true), op.WithScale(p.Scale)}, o.flashOpts...)...)
		}
		if err != nil {
			return nil, err
		}
		if !train {
			return G.NewTapeMachine(g), nil
		}
		// Σ O∘dO has gradient dO with respect to O, a random upstream gradient.
		prod, err := G.HadamardProd(out, node("do", do))
		if err != nil {
			return nil, err
		}
		cost, err := G.Sum(prod)
		if err != nil {
			return nil, err
		}
		if _, err := G.Grad(cost, qn, kn, vn); err != nil {
			return nil, err
		}
		return G.NewTapeMachine(g), nil
	}
	var m measurement
	for _, c := range []struct {
		train bool
		sec   *float64
		flops float64
		rate  *float64
	}{
		{false, &m.FwdSeconds, p.ForwardFLOPs(), &m.FwdGFLOPS},
		{true, &m.FwdBwdSeconds, p.ForwardFLOPs() + p.BackwardFLOPs(), &m.FwdBwdGFLOPS},
	} {
		vm, err := build(c.train)
		if err != nil {
			return measurement{}, err
		}
		sec, err := timeRuns(func() error {
			vm.Reset()
			return vm.RunAll()
		})
		vm.Close()
		if err != nil {
			return measurement{}, err
		}
		*c.sec, *c.rate = sec, c.flops/sec/1e9
	}
	return m, nil
}
