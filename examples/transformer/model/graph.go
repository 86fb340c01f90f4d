package model

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/gorgonia-flash/flashattention/op"
)

// Graph is one compiled computation over a fixed batch of B sequences of
// length Config.Seq: logits, mean cross-entropy loss and, when built for
// training, the gradients of every parameter.
type Graph struct {
	m       *Model
	batch   int
	g       *G.ExprGraph
	input   *G.Node // one-hot tokens [B·T, V]
	target  *G.Node // one-hot next tokens [B·T, V]
	logits  *G.Node // [B·T, V]
	loss    *G.Node // scalar
	params  G.Nodes
	grads   G.Nodes
	vm      G.VM
	lossV   G.Value
	logitsV G.Value
}

// NewGraph builds and compiles a graph for batch sequences. With train set
// it also builds the backward pass. flashOpts are passed to op.Attention
// after the causal mask and scale (e.g. op.WithBackend); the naive path
// ignores them.
func (m *Model) NewGraph(batch int, attn Attention, train bool, flashOpts ...op.Option) (*Graph, error) {
	if batch < 1 {
		return nil, fmt.Errorf("%w: batch = %d, must be at least 1", ErrInvalidConfig, batch)
	}
	cfg := m.Config
	dt, err := cfg.dtype()
	if err != nil {
		return nil, err
	}
	g := G.NewGraph()
	b := &builder{g: g, m: m, nodes: map[string]*G.Node{}, attn: attn, flashOpts: flashOpts}
	for _, p := range m.params {
		n := G.NodeFromAny(g, p.t, G.WithName(p.name))
		b.nodes[p.name] = n
		b.params = append(b.params, n)
	}
	rows := batch * cfg.Seq
	gr := &Graph{m: m, batch: batch, g: g, params: b.params}
	gr.input = G.NewMatrix(g, dt, G.WithShape(rows, cfg.Vocab), G.WithName("input"), G.WithValue(tensor.New(tensor.Of(dt), tensor.WithShape(rows, cfg.Vocab))))
	gr.target = G.NewMatrix(g, dt, G.WithShape(rows, cfg.Vocab), G.WithName("target"), G.WithValue(tensor.New(tensor.Of(dt), tensor.WithShape(rows, cfg.Vocab))))
	if gr.logits, err = b.forward(gr.input, batch); err != nil {
		return nil, err
	}
	if gr.loss, err = b.crossEntropy(gr.logits, gr.target); err != nil {
		return nil, err
	}
	G.Read(gr.loss, &gr.lossV)
	G.Read(gr.logits, &gr.logitsV)
	if train {
		if gr.grads, err = G.Grad(gr.loss, gr.params...); err != nil {
			return nil, fmt.Errorf("building the backward pass: %w", err)
		}
		gr.vm = G.NewTapeMachine(g, G.BindDualValues(gr.params...))
	} else {
		gr.vm = G.NewTapeMachine(g)
	}
	return gr, nil
}

// forward maps one-hot tokens [B·T, V] to logits [B·T, V]: T = Seq
// tokens at positions 0…Seq−1, or in a cached graph (b.pos set) T tokens
// at the positions b.pos gives.
func (b *builder) forward(input *G.Node, batch int) (*G.Node, error) {
	cfg := b.m.Config
	T, C := input.Shape()[0]/batch, cfg.Dim
	x, err := G.Mul(input, b.p("wte"))
	if err != nil {
		return nil, err
	}
	if x, err = b.addPositions(x, batch, T, C); err != nil {
		return nil, err
	}
	for l := range cfg.Layers {
		prefix := fmt.Sprintf("h%d", l)
		h, err := b.layerNorm(x, prefix+".ln1")
		if err != nil {
			return nil, err
		}
		if h, err = b.selfAttention(h, batch, l); err != nil {
			return nil, err
		}
		if x, err = G.Add(x, h); err != nil {
			return nil, err
		}
		if h, err = b.layerNorm(x, prefix+".ln2"); err != nil {
			return nil, err
		}
		if h, err = b.mlp(h, prefix); err != nil {
			return nil, err
		}
		if x, err = G.Add(x, h); err != nil {
			return nil, err
		}
	}
	if x, err = b.layerNorm(x, "lnf"); err != nil {
		return nil, err
	}
	return b.linear(x, "head.w", "head.b")
}

// addPositions adds the position embeddings to the token embeddings x
// [B·T, C]: row t of wpe to token t of every sequence, or in a cached
// graph the rows that the one-hot positions b.pos [B·T, Seq] pick. A
// product with one-hot rows picks the rows exactly, so both give the same
// numbers for the same positions.
func (b *builder) addPositions(x *G.Node, batch, T, C int) (*G.Node, error) {
	if b.pos != nil {
		pe, err := G.Mul(b.pos, b.p("wpe"))
		if err != nil {
			return nil, err
		}
		return G.Add(x, pe)
	}
	x, err := G.Reshape(x, tensor.Shape{batch, T, C})
	if err != nil {
		return nil, err
	}
	if x, err = G.BroadcastAdd(x, b.p("wpe"), nil, []byte{0}); err != nil {
		return nil, err
	}
	return G.Reshape(x, tensor.Shape{batch * T, C})
}

// crossEntropy is −mean_r Σ_v target[r,v]·log softmax(logits)[r,v].
func (b *builder) crossEntropy(logits, target *G.Node) (*G.Node, error) {
	logp, err := G.LogSoftMax(logits, 1)
	if err != nil {
		return nil, err
	}
	picked, err := G.HadamardProd(logp, target)
	if err != nil {
		return nil, err
	}
	total, err := G.Sum(picked)
	if err != nil {
		return nil, err
	}
	return G.HadamardProd(total, b.scalar(-1/float64(logits.Shape()[0])))
}

// Batch returns the number of sequences the graph takes per run.
func (gr *Graph) Batch() int { return gr.batch }

// Run evaluates the graph on inputs and targets, B sequences of Config.Seq
// token ids each (targets may be nil for sampling), and returns the loss.
// A training graph leaves fresh gradients behind, replacing earlier ones.
func (gr *Graph) Run(inputs, targets [][]int) (float64, error) {
	if err := gr.setOneHot(gr.input, inputs); err != nil {
		return 0, fmt.Errorf("inputs: %w", err)
	}
	if err := gr.setOneHot(gr.target, targets); err != nil {
		return 0, fmt.Errorf("targets: %w", err)
	}
	gr.vm.Reset()
	if err := gr.zeroGrads(); err != nil {
		return 0, err
	}
	if err := gr.vm.RunAll(); err != nil {
		return 0, err
	}
	return toFloat64(gr.lossV.Data())[0], nil
}

// zeroGrads clears the parameter gradients. The TapeMachine adds each run's
// gradients into the parameters' bound dual values, and vm.Reset does not
// clear them; Gorgonia's solvers do after a step, but Run must not rely on
// a step having happened, nor on which solver made it.
func (gr *Graph) zeroGrads() error {
	if gr.grads == nil {
		return nil
	}
	for _, p := range gr.params {
		gv, err := p.Grad()
		if err != nil {
			return fmt.Errorf("gradient of %s: %w", p.Name(), err)
		}
		switch t := gv.(type) {
		case nil: // before the first run
		case tensor.Tensor:
			t.Zero()
		default:
			return fmt.Errorf("gradient of %s is a %T, not a tensor", p.Name(), gv)
		}
	}
	return nil
}

// setOneHot writes one-hot rows for seqs into n's value. A nil seqs leaves
// all rows zero.
func (gr *Graph) setOneHot(n *G.Node, seqs [][]int) error {
	cfg := gr.m.Config
	if seqs != nil && len(seqs) != gr.batch {
		return fmt.Errorf("got %d sequences, the graph takes %d", len(seqs), gr.batch)
	}
	t := n.Value().(*tensor.Dense)
	t.Zero()
	for s, seq := range seqs {
		if len(seq) != cfg.Seq {
			return fmt.Errorf("sequence %d has %d tokens, want %d", s, len(seq), cfg.Seq)
		}
		for i, tok := range seq {
			if tok < 0 || tok >= cfg.Vocab {
				return fmt.Errorf("token %d at sequence %d position %d is outside the vocabulary [0, %d)", tok, s, i, cfg.Vocab)
			}
			row := (s*cfg.Seq + i) * cfg.Vocab
			switch d := t.Data().(type) {
			case []float32:
				d[row+tok] = 1
			case []float64:
				d[row+tok] = 1
			}
		}
	}
	return nil
}

// Logits returns a float64 copy of the last run's logits, [B·T, V] row-major.
func (gr *Graph) Logits() []float64 { return toFloat64(gr.logitsV.Data()) }

// Gradients returns float64 copies of the last run's parameter gradients, in
// Model.ParamNames order. It fails on a graph not built for training.
func (gr *Graph) Gradients() ([][]float64, error) {
	if gr.grads == nil {
		return nil, fmt.Errorf("the graph was not built for training")
	}
	out := make([][]float64, len(gr.params))
	for i, p := range gr.params {
		gv, err := p.Grad()
		if err != nil {
			return nil, fmt.Errorf("gradient of %s: %w", p.Name(), err)
		}
		out[i] = toFloat64(gv.Data())
	}
	return out, nil
}

// Step applies solver to the gradients of the last Run.
func (gr *Graph) Step(solver G.Solver) error {
	if gr.grads == nil {
		return fmt.Errorf("the graph was not built for training")
	}
	return solver.Step(G.NodesToValueGrads(gr.params))
}

func toFloat64(data any) []float64 {
	switch d := data.(type) {
	case []float32:
		out := make([]float64, len(d))
		for i, v := range d {
			out[i] = float64(v)
		}
		return out
	case []float64:
		return append([]float64(nil), d...)
	case float32:
		return []float64{float64(d)}
	case float64:
		return []float64{d}
	}
	panic(fmt.Sprintf("model: unexpected value data %T", data))
}

// ClipGradNorm rescales the gradients of the last Run so that their global
// L2 norm (over all parameters together) is at most maxNorm, and returns the
// norm before clipping. maxNorm ≤ 0 only measures. Scaling all gradients by
// one factor keeps the step's direction, unlike clamping each element.
func (gr *Graph) ClipGradNorm(maxNorm float64) (float64, error) {
	if gr.grads == nil {
		return 0, fmt.Errorf("the graph was not built for training")
	}
	ts := make([]tensor.Tensor, len(gr.params))
	sq := 0.0
	for i, p := range gr.params {
		gv, err := p.Grad()
		if err != nil {
			return 0, fmt.Errorf("gradient of %s: %w", p.Name(), err)
		}
		t, ok := gv.(tensor.Tensor)
		if !ok {
			return 0, fmt.Errorf("gradient of %s is a %T, not a tensor", p.Name(), gv)
		}
		ts[i] = t
		switch d := t.Data().(type) {
		case []float32:
			for _, x := range d {
				sq += float64(x) * float64(x)
			}
		case []float64:
			for _, x := range d {
				sq += x * x
			}
		}
	}
	norm := math.Sqrt(sq)
	if maxNorm <= 0 || norm <= maxNorm {
		return norm, nil
	}
	f := maxNorm / norm
	for _, t := range ts {
		switch d := t.Data().(type) {
		case []float32:
			for i := range d {
				d[i] *= float32(f)
			}
		case []float64:
			for i := range d {
				d[i] *= f
			}
		}
	}
	return norm, nil
}
