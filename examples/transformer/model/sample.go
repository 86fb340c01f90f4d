package model

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gorgonia-flash/flashattention/op"
)

// Sampler draws text from a model one token at a time through a forward-only
// graph of batch 1.
type Sampler struct {
	gr *Graph
}

// NewSampler compiles the forward graph used by Sample.
func (m *Model) NewSampler(attn Attention, flashOpts ...op.Option) (*Sampler, error) {
	gr, err := m.NewGraph(1, attn, false, flashOpts...)
	if err != nil {
		return nil, err
	}
	return &Sampler{gr: gr}, nil
}

// Sample extends prompt by n tokens (see Generator). The context is the
// current segment (nextSegment): at most Seq tokens, padded on the right,
// which under the causal mask its last real position never sees, so the
// prediction there is exact.
func (s *Sampler) Sample(prompt []int, n int, temperature float64, rng *rand.Rand) ([]int, error) {
	if err := checkSample(prompt, temperature); err != nil {
		return nil, err
	}
	cfg := s.gr.m.Config
	out := append([]int(nil), prompt...)
	window := make([]int, cfg.Seq)
	probs := make([]float64, cfg.Vocab)
	seg := 0
	for range n {
		seg = nextSegment(len(out), seg, cfg.Seq)
		ctx := out[seg:]
		clear(window)
		copy(window, ctx)
		if _, err := s.gr.Run([][]int{window}, nil); err != nil {
			return nil, err
		}
		logits := s.gr.Logits()[(len(ctx)-1)*cfg.Vocab : len(ctx)*cfg.Vocab]
		out = append(out, draw(logits, temperature, probs, rng))
	}
	return out, nil
}

// checkSample refuses an empty prompt and a temperature that is not
// positive.
func checkSample(prompt []int, temperature float64) error {
	if len(prompt) == 0 {
		return fmt.Errorf("the prompt is empty")
	}
	if !(temperature > 0) {
		return fmt.Errorf("temperature = %v, must be positive", temperature)
	}
	return nil
}

// draw samples an index from softmax(logits/temperature), using probs as
// scratch space.
func draw(logits []float64, temperature float64, probs []float64, rng *rand.Rand) int {
	m := math.Inf(-1)
	for _, l := range logits {
		m = max(m, l)
	}
	sum := 0.0
	for i, l := range logits {
		probs[i] = math.Exp((l - m) / temperature)
		sum += probs[i]
	}
	u := rng.Float64() * sum
	for i, p := range probs {
		if u -= p; u < 0 {
			return i
		}
	}
	return len(probs) - 1
}
