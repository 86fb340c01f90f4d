package model

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/gorgonia-flash/flashattention/internal/naivegraph"
)

// selfAttention is one multi-head causal self-attention sublayer on x [B·T, C]
// (already normalised). It returns the output projection, [B·T, C].
func (b *builder) selfAttention(x *G.Node, batch int, prefix string) (*G.Node, error) {
	cfg := b.m.Config
	T, H, D := x.Shape()[0]/batch, cfg.Heads, cfg.HeadDim()
	heads := func(w string) (*G.Node, error) {
		y, err := b.linear(x, prefix+"."+w, "")
		if err != nil {
			return nil, err
		}
		if y, err = G.Reshape(y, tensor.Shape{batch, T, H, D}); err != nil {
			return nil, err
		}
		return G.Transpose(y, 0, 2, 1, 3) // [B, H, T, D]
	}
	q, err := heads("wq")
	if err != nil {
		return nil, err
	}
	k, err := heads("wk")
	if err != nil {
		return nil, err
	}
	v, err := heads("wv")
	if err != nil {
		return nil, err
	}
	scale := 1 / math.Sqrt(float64(D))
	var o *G.Node
	switch b.attn {
	case AttentionNaive:
		o, err = naivegraph.Attention(q, k, v, scale, true)
	case AttentionFlash:
		o, err = flashAttention(q, k, v, scale, b.flashOpts)
	default:
		err = fmt.Errorf("%w: attention %q", ErrInvalidConfig, b.attn)
	}
	if err != nil {
		return nil, fmt.Errorf("%s attention: %w", b.attn, err)
	}
	if o, err = G.Transpose(o, 0, 2, 1, 3); err != nil { // [B, T, H, D]
		return nil, err
	}
	if o, err = G.Reshape(o, tensor.Shape{batch * T, H * D}); err != nil {
		return nil, err
	}
	return b.linear(o, prefix+".wo", "")
}
