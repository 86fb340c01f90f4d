package model

import (
	G "gorgonia.org/gorgonia"

	"github.com/gorgonia-flash/flashattention/op"
)

// flashAttention is op.Attention with a causal mask on [B, H, T, D] inputs.
// extra carries caller options such as op.WithBackend.
func flashAttention(q, k, v *G.Node, scale float64, extra []op.Option) (*G.Node, error) {
	opts := append([]op.Option{op.WithCausal(true), op.WithScale(scale)}, extra...)
	return op.Attention(q, k, v, opts...)
}
