package model

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/gorgonia-flash/flashattention/op"
)

// A Generator extends a prompt by n tokens drawn from
// softmax(logits/temperature): Sampler re-runs the whole context for each
// token, CachedSampler feeds each token once through key/value caches.
// With the same model, prompt and rng both draw the same tokens.
type Generator interface {
	Sample(prompt []int, n int, temperature float64, rng *rand.Rand) ([]int, error)
}

// nextSegment returns where the context of the next prediction starts,
// with n tokens so far and the current segment starting at seg. The
// position embeddings are learned for Seq absolute positions, so a context
// cannot slide one token at a time through a cache (every cached key
// would change its position); instead generation runs in segments of at
// most Seq tokens, and when one is full the next starts from its last
// Seq/2 tokens (at least one), which are fed again. Every sampler follows
// this rule, so that all of them draw the same text.
func nextSegment(n, seg, seq int) int {
	if n-seg <= seq {
		return seg
	}
	return n - max(1, seq/2)
}

// CachedSampler generates through one op.KVCache per layer, on the CPU or
// the GPU: a segment's tokens are fed once (the prompt in one prefill run, then one
// token per run), each run attending to the keys and values cached so
// far, rather than the whole context again for every token. Close frees
// its caches.
type CachedSampler struct {
	m             *Model
	caches        []*op.KVCache
	prefill, step *cachedGraph
}

// cachedGraph is the model's forward on t new tokens of one sequence at
// given positions, through the sampler's caches.
type cachedGraph struct {
	m                *Model
	input, pos, lens *G.Node // one-hot tokens [t, V] and positions [t, Seq]; lens: a prefill's [1] length
	logits           *G.Node
	logitsV          G.Value
	vm               G.VM
	inputV, posV     *tensor.Dense
	lensV            *tensor.Dense // nil in the step graph
}

// NewCachedSampler makes the caches (Seq tokens each) on dev and compiles
// the two graphs: the prefill of up to Seq tokens and the one-token step.
// flashOpts go to op.Attention; they must put it on dev too (DeviceOptions
// does), where the caches are.
func (m *Model) NewCachedSampler(dev op.Device, flashOpts ...op.Option) (s *CachedSampler, err error) {
	cfg := m.Config
	dt, err := cfg.dtype()
	if err != nil {
		return nil, err
	}
	s = &CachedSampler{m: m}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
			s = nil
		}
	}()
	for range cfg.Layers {
		c, err := op.NewKVCache(1, cfg.Heads, cfg.HeadDim(), cfg.Seq, dt, op.CacheDevice(dev))
		if err != nil {
			return nil, err
		}
		s.caches = append(s.caches, c)
	}
	if s.prefill, err = m.newCachedGraph(cfg.Seq, true, s.caches, flashOpts); err != nil {
		return nil, fmt.Errorf("building the prefill graph: %w", err)
	}
	if s.step, err = m.newCachedGraph(1, false, s.caches, flashOpts); err != nil {
		return nil, fmt.Errorf("building the step graph: %w", err)
	}
	return s, nil
}

func (m *Model) newCachedGraph(t int, lengths bool, caches []*op.KVCache, flashOpts []op.Option) (*cachedGraph, error) {
	cfg := m.Config
	dt, _ := cfg.dtype()
	g := G.NewGraph()
	b := &builder{g: g, m: m, nodes: map[string]*G.Node{}, attn: AttentionFlash, flashOpts: flashOpts, caches: caches}
	for _, p := range m.params {
		b.nodes[p.name] = G.NodeFromAny(g, p.t, G.WithName(p.name))
	}
	cg := &cachedGraph{m: m,
		inputV: tensor.New(tensor.Of(dt), tensor.WithShape(t, cfg.Vocab)),
		posV:   tensor.New(tensor.Of(dt), tensor.WithShape(t, cfg.Seq))}
	cg.input = G.NewMatrix(g, dt, G.WithShape(t, cfg.Vocab), G.WithName("input"), G.WithValue(cg.inputV))
	cg.pos = G.NewMatrix(g, dt, G.WithShape(t, cfg.Seq), G.WithName("positions"), G.WithValue(cg.posV))
	b.pos = cg.pos
	if lengths {
		cg.lensV = tensor.New(tensor.WithShape(1), tensor.WithBacking([]int{0}))
		cg.lens = G.NewVector(g, tensor.Int, G.WithShape(1), G.WithName("lengths"), G.WithValue(cg.lensV))
		b.lens = cg.lens
	}
	var err error
	if cg.logits, err = b.forward(cg.input, 1); err != nil {
		return nil, err
	}
	G.Read(cg.logits, &cg.logitsV)
	cg.vm = G.NewTapeMachine(g)
	return cg, nil
}

// run feeds tokens at positions from0, from0+1, … and returns the logits
// of the last one.
func (cg *cachedGraph) run(tokens []int, from0 int) ([]float64, error) {
	cfg := cg.m.Config
	cg.inputV.Zero()
	cg.posV.Zero()
	for i, tok := range tokens {
		if tok < 0 || tok >= cfg.Vocab {
			return nil, fmt.Errorf("token %d is outside the vocabulary [0, %d)", tok, cfg.Vocab)
		}
		setOne(cg.inputV, i*cfg.Vocab+tok)
		setOne(cg.posV, i*cfg.Seq+from0+i)
	}
	if cg.lensV != nil {
		cg.lensV.Data().([]int)[0] = len(tokens)
	}
	cg.vm.Reset()
	if err := cg.vm.RunAll(); err != nil {
		return nil, op.Cause(err)
	}
	last := len(tokens) - 1
	return toFloat64(cg.logitsV.Data())[last*cfg.Vocab : (last+1)*cfg.Vocab], nil
}

func setOne(t *tensor.Dense, at int) {
	switch d := t.Data().(type) {
	case []float32:
		d[at] = 1
	case []float64:
		d[at] = 1
	}
}

// Sample extends prompt by n tokens (see Generator), segment by segment
// (nextSegment): a new segment resets the caches and feeds its tokens in
// one prefill run; each later token is one step.
func (s *CachedSampler) Sample(prompt []int, n int, temperature float64, rng *rand.Rand) ([]int, error) {
	if err := checkSample(prompt, temperature); err != nil {
		return nil, err
	}
	cfg := s.m.Config
	out := slices.Clone(prompt)
	probs := make([]float64, cfg.Vocab)
	seg := -1 // no segment in the caches yet
	for range n {
		next := nextSegment(len(out), max(0, seg), cfg.Seq)
		var logits []float64
		var err error
		if next != seg {
			seg = next
			for _, c := range s.caches {
				c.Reset()
			}
			logits, err = s.prefill.run(out[seg:], 0)
		} else {
			logits, err = s.step.run(out[len(out)-1:], len(out)-1-seg)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, draw(logits, temperature, probs, rng))
	}
	return out, nil
}

// Close frees the caches.
func (s *CachedSampler) Close() error {
	var errs []error
	for _, c := range s.caches {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
