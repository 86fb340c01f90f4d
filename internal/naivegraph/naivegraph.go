// Package naivegraph builds attention the textbook way out of Gorgonia's own
// ops — BatchedMatMul, an additive mask, SoftMax, BatchedMatMul — with
// Gorgonia's own gradients. It is the baseline that benchmarks and memory
// tests compare op.Attention against: it materialises the [B·H, Nq, Nk]
// scores and probabilities, and a tape keeps them alive for the backward.
package naivegraph

import (
	"fmt"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// MaskedScore is added to the scores a causal query must not see. It is
// finite so that a row that sees no key gives a uniform softmax rather than
// (−∞) − (−∞) = NaN; op.Attention gives such rows 0 instead.
const MaskedScore = -1e9

// Attention returns softmax(scale·q·kᵀ + mask)·v for q [B, H, Nq, D] and k, v
// [B, H, Nk, D], with the bottom-right aligned causal mask of op.Attention
// when causal is set. Use it under a TapeMachine: gorgonia v0.9.18's SoftMax
// DoDiff is wrong on the LispMachine.
func Attention(q, k, v *gorgonia.Node, scale float64, causal bool) (*gorgonia.Node, error) {
	qs, ks := q.Shape(), k.Shape()
	if qs.Dims() != 4 || ks.Dims() != 4 || !ks.Eq(v.Shape()) {
		return nil, fmt.Errorf("naivegraph: shapes %v, %v, %v, want [B, H, N, D]", qs, ks, v.Shape())
	}
	b, h, nq, nk, d := qs[0], qs[1], qs[2], ks[2], qs[3]
	q3, err := gorgonia.Reshape(q, tensor.Shape{b * h, nq, d})
	if err != nil {
		return nil, err
	}
	k3, err := gorgonia.Reshape(k, tensor.Shape{b * h, nk, d})
	if err != nil {
		return nil, err
	}
	v3, err := gorgonia.Reshape(v, tensor.Shape{b * h, nk, d})
	if err != nil {
		return nil, err
	}
	s, err := gorgonia.BatchedMatMul(q3, k3, false, true)
	if err != nil {
		return nil, err
	}
	factor := gorgonia.NewConstant(castScalar(q.Dtype(), scale))
	if s, err = gorgonia.Mul(s, factor); err != nil {
		return nil, err
	}
	if causal {
		mask := gorgonia.NewMatrix(q.Graph(), q.Dtype(), gorgonia.WithShape(nq, nk),
			gorgonia.WithValue(causalMask(q.Dtype(), nq, nk)), gorgonia.WithName(fmt.Sprintf("causalMask%dx%d", nq, nk)))
		if s, err = gorgonia.BroadcastAdd(s, mask, nil, []byte{0}); err != nil {
			return nil, err
		}
	}
	p, err := gorgonia.SoftMax(s, 2)
	if err != nil {
		return nil, err
	}
	o, err := gorgonia.BatchedMatMul(p, v3)
	if err != nil {
		return nil, err
	}
	return gorgonia.Reshape(o, tensor.Shape{b, h, nq, d})
}

func castScalar(dt tensor.Dtype, x float64) any {
	if dt == tensor.Float32 {
		return float32(x)
	}
	return x
}

// causalMask is 0 where query i sees key j (j ≤ i + Nk − Nq) and MaskedScore
// elsewhere.
func causalMask(dt tensor.Dtype, nq, nk int) *tensor.Dense {
	m := tensor.New(tensor.Of(dt), tensor.WithShape(nq, nk))
	for i := range nq {
		for j := max(0, i+nk-nq+1); j < nk; j++ {
			if err := m.SetAt(castScalar(dt, MaskedScore), i, j); err != nil {
				panic(err) // indices are in range by construction
			}
		}
	}
	return m
}
