package model

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/gorgonia-flash/flashattention/op"
)

// builder carries what every layer constructor needs while a graph is built.
type builder struct {
	g      *G.ExprGraph
	m      *Model
	nodes  map[string]*G.Node
	params G.Nodes // in Model.params order

	attn      Attention
	flashOpts []op.Option

	// A cached graph's (cached.go): one-hot positions [B·T, Seq], one
	// key/value cache per layer, and the query lengths of a prefill (nil
	// for a step, whose every sequence takes its one token).
	pos    *G.Node
	caches []*op.KVCache
	lens   *G.Node
}

// scalar returns a constant of the model's dtype.
func (b *builder) scalar(v float64) *G.Node {
	if b.m.Config.Dtype == "float32" {
		return G.NewConstant(float32(v))
	}
	return G.NewConstant(v)
}

func (b *builder) p(name string) *G.Node {
	n, ok := b.nodes[name]
	if !ok {
		panic(fmt.Sprintf("model: parameter %q was never created", name))
	}
	return n
}

// layerNorm normalises every row of x [R, C] to zero mean and unit variance,
// then applies the per-column gain and bias. Gorgonia has no LayerNorm op, so
// it is built from reductions and broadcasts; the broadcasts repeat [R] to
// [R, C] (axis 1) and [C] to [R, C] (axis 0).
func (b *builder) layerNorm(x *G.Node, prefix string) (*G.Node, error) {
	const eps = 1e-5
	C := x.Shape()[1]
	invC := b.scalar(1 / float64(C))
	sum, err := G.Sum(x, 1)
	if err != nil {
		return nil, err
	}
	mean, err := G.HadamardProd(sum, invC)
	if err != nil {
		return nil, err
	}
	xc, err := G.BroadcastSub(x, mean, nil, []byte{1})
	if err != nil {
		return nil, err
	}
	sq, err := G.Square(xc)
	if err != nil {
		return nil, err
	}
	sqSum, err := G.Sum(sq, 1)
	if err != nil {
		return nil, err
	}
	variance, err := G.HadamardProd(sqSum, invC)
	if err != nil {
		return nil, err
	}
	veps, err := G.Add(variance, b.scalar(eps))
	if err != nil {
		return nil, err
	}
	// Not G.InverseSqrt: its gradient in gorgonia v0.9.18 is −g/(2y³) where
	// d(x^−½)/dx·g is −g·y³/2, which left every parameter below a LayerNorm
	// with a wrong gradient (TestGradientsMatchFiniteDifferences). Sqrt and
	// Inverse differentiate correctly.
	std, err := G.Sqrt(veps)
	if err != nil {
		return nil, err
	}
	inv, err := G.Inverse(std)
	if err != nil {
		return nil, err
	}
	xn, err := G.BroadcastHadamardProd(xc, inv, nil, []byte{1})
	if err != nil {
		return nil, err
	}
	scaled, err := G.BroadcastHadamardProd(xn, b.p(prefix+".g"), nil, []byte{0})
	if err != nil {
		return nil, err
	}
	return G.BroadcastAdd(scaled, b.p(prefix+".b"), nil, []byte{0})
}

// linear computes x·W (+ bias when bias is not empty) for x [R, In].
func (b *builder) linear(x *G.Node, w, bias string) (*G.Node, error) {
	y, err := G.Mul(x, b.p(w))
	if err != nil {
		return nil, err
	}
	if bias == "" {
		return y, nil
	}
	return G.BroadcastAdd(y, b.p(bias), nil, []byte{0})
}

// mlp is the position-wise feed-forward network C → 4C → C.
func (b *builder) mlp(x *G.Node, prefix string) (*G.Node, error) {
	h, err := b.linear(x, prefix+".w1", prefix+".b1")
	if err != nil {
		return nil, err
	}
	if h, err = G.Rectify(h); err != nil {
		return nil, err
	}
	return b.linear(h, prefix+".w2", prefix+".b2")
}
