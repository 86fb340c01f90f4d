package model

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/gorgonia-flash/flashattention/internal/naivegraph"
	"github.com/gorgonia-flash/flashattention/op"
)

// selfAttention is layer l's multi-head causal self-attention sublayer on
// x [B·T, C] (already normalised). It returns the output projection,
// [B·T, C]. In a cached graph the attention appends the T tokens' keys and
// values to the layer's cache and attends to all it holds.
func (b *builder) selfAttention(x *G.Node, batch, l int) (*G.Node, error) {
	cfg := b.m.Config
	prefix := fmt.Sprintf("h%d", l)
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
		o, err = flashAttention(q, k, v, scale, append(b.cacheOptions(l), b.flashOpts...))
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

// cacheOptions are the op.Attention options of layer l's cache in a cached
// graph, none otherwise.
func (b *builder) cacheOptions(l int) []op.Option {
	if b.caches == nil {
		return nil
	}
	opts := []op.Option{op.WithKVCache(b.caches[l])}
	if b.lens != nil {
		opts = append(opts, op.WithLengths(b.lens, nil))
	}
	return opts
}
