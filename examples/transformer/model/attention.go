package model

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
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
		o, err = b.naiveAttention(q, k, v, scale)
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

// naiveAttention is the textbook computation softmax(scale·Q·Kᵀ + mask)·V on
// [B, H, T, D] inputs. It materialises the [B·H, T, T] scores, their softmax
// and the repeated mask, and the tape keeps all of them (and their gradients)
// alive: the O(T²) memory that flash attention avoids.
func (b *builder) naiveAttention(q, k, v *G.Node, scale float64) (*G.Node, error) {
	s := q.Shape()
	B, H, T, D := s[0], s[1], s[2], s[3]
	flat := tensor.Shape{B * H, T, D}
	q3, err := G.Reshape(q, flat)
	if err != nil {
		return nil, err
	}
	// Scaling Q rather than the scores touches T·D instead of T·T numbers.
	if q3, err = G.HadamardProd(q3, b.scalar(scale)); err != nil {
		return nil, err
	}
	k3, err := G.Reshape(k, flat)
	if err != nil {
		return nil, err
	}
	v3, err := G.Reshape(v, flat)
	if err != nil {
		return nil, err
	}
	scores, err := G.BatchedMatMul(q3, k3, false, true)
	if err != nil {
		return nil, err
	}
	if scores, err = G.BroadcastAdd(scores, b.causalMask(T), nil, []byte{0}); err != nil {
		return nil, err
	}
	p, err := G.SoftMax(scores, 2)
	if err != nil {
		return nil, err
	}
	o, err := G.BatchedMatMul(p, v3)
	if err != nil {
		return nil, err
	}
	return G.Reshape(o, tensor.Shape{B, H, T, D})
}

// maskedScore replaces a score that a causal query must not see. It is finite
// so that even a fully masked row could not produce (−∞) − (−∞) = NaN; for
// self-attention every row sees at least its own key anyway.
const maskedScore = -1e9

// causalMask is the additive [T, T] mask: 0 where key j ≤ query i, else
// maskedScore. With Nq = Nk this is also the bottom-right aligned mask that
// op.Attention applies.
func (b *builder) causalMask(T int) *G.Node {
	dt, _ := b.m.Config.dtype()
	m := tensor.New(tensor.Of(dt), tensor.WithShape(T, T))
	switch d := m.Data().(type) {
	case []float32:
		for i := range T {
			for j := i + 1; j < T; j++ {
				d[i*T+j] = maskedScore
			}
		}
	case []float64:
		for i := range T {
			for j := i + 1; j < T; j++ {
				d[i*T+j] = maskedScore
			}
		}
	}
	return G.NewMatrix(b.g, dt, G.WithShape(T, T), G.WithValue(m), G.WithName(fmt.Sprintf("causalMask%d", T)))
}
