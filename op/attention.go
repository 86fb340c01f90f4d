package op

import (
	"errors"
	"fmt"
	"math"

	"github.com/gorgonia-flash/flashattention/autograd"
	"github.com/gorgonia-flash/flashattention/kernels"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ErrInvalidInput is wrapped by every error Attention returns for inputs it
// rejects. It is kernels.ErrInvalidParams, which backends wrap too.
var ErrInvalidInput = kernels.ErrInvalidParams

// ErrOutOfMemory is wrapped by the error a run returns when its results or
// work space cannot be allocated: host memory checked before allocating
// (the Go memory limit, the cgroup limit and the memory the system has
// available), or device memory on the GPU. It is kernels.ErrOutOfMemory,
// which cudakernels.ErrOutOfMemory wraps too.
var ErrOutOfMemory = kernels.ErrOutOfMemory

// Cause returns the op's own error from an error that a Gorgonia VM
// returned while running the graph, so that errors.Is and errors.As see the
// op's sentinels (cudakernels.ErrOutOfMemory, ErrInvalidInput, …). Gorgonia
// v0.9.18's machines wrap an op's error in a type that has no Unwrap method
// (only Err), which hides them from errors.Is. Errors that do not come from
// such a wrapper are returned as they are.
func Cause(err error) error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if vm, ok := e.(interface{ Err() error }); ok {
			return vm.Err()
		}
	}
	return err
}

// invalid formats an input error that wraps ErrInvalidInput.
func invalid(format string, args ...any) error {
	return fmt.Errorf("op.Attention: %w: "+format, append([]any{ErrInvalidInput}, args...)...)
}

// Attention returns softmax(scale·q·kᵀ + mask)·v as a node of q's graph.
//
// q is [B, H, Nq, D]; k and v are [B, Hkv, Nk, D] with Hkv dividing H (Hkv
// < H is grouped-query attention: query head h reads key head h/(H/Hkv),
// and the gradients of k and v sum over each group); the result is [B, H,
// Nq, D]. Nq and Nk may differ. All three must share one dtype, Float32 or
// Float64, and every dimension must be at least 1 (an empty key set has no
// softmax). Any of them may be a constant (gorgonia.NewConstant), as long as
// one belongs to a graph. The node is differentiable with respect to q, k
// and v under both gorgonia.Grad (TapeMachine) and the LispMachine.
func Attention(q, k, v *gorgonia.Node, opts ...Option) (*gorgonia.Node, error) {
	fwd, in, err := build(q, k, v, false, opts)
	if err != nil {
		return nil, err
	}
	return gorgonia.ApplyOp(fwd, in...)
}

// AttentionLSE is Attention that also returns the log-sum-exp of every
// row, lse = log Σ_j exp(s_ij) over the row's visible keys (the softmax's
// normaliser, before dropout), [B, H, Nq], in q's dtype: +Inf for a row
// that sees no key. Ring attention and split-KV decoding merge partial
// results through it. Both nodes are differentiable: a loss that uses lse
// reaches q and k through ∂lse_i/∂s_ij = P_ij, in the same recomputing
// backward (on the CPU; the GPU backward refuses a non-zero gradient of
// lse with cudakernels.ErrUnsupported for now). The options are those of
// Attention.
func AttentionLSE(q, k, v *gorgonia.Node, opts ...Option) (o, lse *gorgonia.Node, err error) {
	fwd, in, err := build(q, k, v, true, opts)
	if err != nil {
		return nil, nil, err
	}
	packed, err := gorgonia.ApplyOp(fwd, in...)
	if err != nil {
		return nil, nil, err
	}
	return fwd.Split(packed)
}

// build checks the inputs and options of Attention and AttentionLSE (with
// withLSE) and returns the op with the nodes it takes.
func build(q, k, v *gorgonia.Node, withLSE bool, opts []Option) (*autograd.Op, gorgonia.Nodes, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkNodes(q, k, v); err != nil {
		return nil, nil, err
	}
	if err := cfg.layout.check(); err != nil {
		return nil, nil, err
	}
	backend, err := cfg.resolveBackend()
	if err != nil {
		return nil, nil, err
	}
	cache, err := cfg.cacheFor(backend)
	if err != nil {
		return nil, nil, err
	}
	scale := 1 / math.Sqrt(float64(q.Shape()[3]))
	if cfg.scaleSet {
		scale = cfg.scale
	}
	lens, err := lengthNodes(q, cfg.qLens, cfg.kLens)
	if err != nil {
		return nil, nil, err
	}
	bias, biasShape, err := cfg.biasNode(q, k)
	if err != nil {
		return nil, nil, err
	}
	dtypeOf := func(n *gorgonia.Node) tensor.Dtype {
		if n == nil {
			return tensor.Dtype{}
		}
		return n.Dtype()
	}
	fwd, err := autograd.New(autograd.Config{Backend: backend, Scale: scale, Causal: cfg.causal,
		Window: cfg.window, Softcap: cfg.softcap, ALiBi: cfg.alibi, QLens: dtypeOf(cfg.qLens), KLens: dtypeOf(cfg.kLens),
		Dropout: cfg.dropout, LSE: withLSE, BNHD: cfg.layout == BNHD, Bias: biasShape, Cache: cache},
		q.Dtype(), q.Shape(), k.Shape(), v.Shape())
	if err != nil {
		return nil, nil, fmt.Errorf("op.Attention: %w", err)
	}
	// The op's inputs: q, k, v, then the bias, then the lengths.
	in := gorgonia.Nodes{q, k, v}
	if bias != nil {
		in = append(in, bias)
	}
	return fwd, append(in, lens...), nil
}

// biasNode checks the bias of WithBias against q and k (already checked:
// rank 4, one dtype) and returns it with its shape; nil and a nil shape
// without WithBias. The bias is [Bb, Hb, Nq, Nk] in either layout.
func (c *config) biasNode(q, k *gorgonia.Node) (*gorgonia.Node, tensor.Shape, error) {
	if !c.biasSet {
		return nil, nil, nil
	}
	n := c.bias
	if n == nil {
		return nil, nil, invalid("the bias is nil")
	}
	qs, ks := q.Shape(), k.Shape()
	b, h, nq, nk := qs[0], qs[1], qs[2], ks[2]
	if c.layout == BNHD {
		h, nq, nk = qs[2], qs[1], ks[1]
	}
	s := n.Shape()
	if s.Dims() != 4 {
		return nil, nil, invalid("the bias has shape %v (rank %d), want [Bb, Hb, Nq, Nk] = [1 or %d, 1 or %d, %d, %d]", s, s.Dims(), b, h, nq, nk)
	}
	if (s[0] != 1 && s[0] != b) || (s[1] != 1 && s[1] != h) || s[2] != nq || s[3] != nk {
		return nil, nil, invalid("the bias has shape %v, which does not broadcast to the scores: want [1 or %d, 1 or %d, %d, %d]", s, b, h, nq, nk)
	}
	if n.Dtype() != q.Dtype() {
		return nil, nil, invalid("the bias is %v but q is %v; convert one of them", n.Dtype(), q.Dtype())
	}
	if g := n.Graph(); g != nil && q.Graph() != nil && g != q.Graph() {
		return nil, nil, invalid("the bias belongs to another graph than q")
	}
	return n, s.Clone(), nil
}

// lengthNodes checks the length inputs of WithLengths, which must be
// integer vectors of q's batch size in q's graph, and returns those given,
// query lengths first.
func lengthNodes(q, qLens, kLens *gorgonia.Node) (gorgonia.Nodes, error) {
	var lens gorgonia.Nodes
	for _, l := range []struct {
		name string
		n    *gorgonia.Node
	}{{"query lengths", qLens}, {"key lengths", kLens}} {
		if l.n == nil {
			continue
		}
		if dt := l.n.Dtype(); dt != tensor.Int && dt != tensor.Int32 && dt != tensor.Int64 {
			return nil, invalid("%s have dtype %v, want Int, Int32 or Int64", l.name, dt)
		}
		if s, b := l.n.Shape(), q.Shape()[0]; s.Dims() != 1 || s[0] != b {
			return nil, invalid("%s have shape %v, want [%d], one per batch entry", l.name, s, b)
		}
		if g := l.n.Graph(); g != nil && q.Graph() != nil && g != q.Graph() {
			return nil, invalid("%s belong to another graph than q", l.name)
		}
		lens = append(lens, l.n)
	}
	return lens, nil
}

// checkNodes validates what autograd.New cannot see: that the nodes exist,
// share a graph and a float dtype, and have rank 4 (a shape of another rank
// is not even a [B, H, N, D] to compare).
func checkNodes(q, k, v *gorgonia.Node) error {
	nodes := []struct {
		name string
		n    *gorgonia.Node
	}{{"q", q}, {"k", k}, {"v", v}}
	var g *gorgonia.ExprGraph
	for _, x := range nodes {
		if x.n == nil {
			return invalid("%s is nil", x.name)
		}
		if g == nil {
			g = x.n.Graph()
		}
	}
	if g == nil {
		return invalid("q, k and v are all constants; at least one must belong to a graph")
	}
	for _, x := range nodes {
		// Gorgonia gives a constant the graph of the op that uses it.
		if x.n.Graph() != g && x.n.Graph() != nil {
			return invalid("%s belongs to another graph than the other inputs", x.name)
		}
		if s := x.n.Shape(); s.Dims() != 4 {
			return invalid("%s has shape %v (rank %d), want [B, H, N, D]", x.name, s, s.Dims())
		}
		if dt := x.n.Dtype(); dt != tensor.Float32 && dt != tensor.Float64 {
			return invalid("%s has dtype %v, want Float32 or Float64", x.name, dt)
		}
		if x.n.Dtype() != q.Dtype() {
			return invalid("%s is %v but q is %v; convert one of them", x.name, x.n.Dtype(), q.Dtype())
		}
	}
	return nil
}
