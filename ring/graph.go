package ring

import (
	"context"
	"fmt"
	"hash"
	"hash/fnv"
	"sync"

	"github.com/chewxy/hm"
	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Attention returns, as a node of q's graph, this rank's rows of attention
// over the whole sequence of the ring rg: q is the rank's queries [B, H,
// Len, D], k and v its keys and values [B, Hkv, Len, D] (Hkv dividing H),
// Len = rg.Layout.Len(rank), in the rank's local order (Layout.Split); the
// result has q's shape. Each rank builds its own graph, with the same ring
// nodes in the same order; running the ranks' machines at the same time,
// one goroutine each, computes exact attention over the concatenated
// sequence, forward and backward. The node is differentiable with respect
// to q, k and v under gorgonia.Grad (TapeMachine) and the LispMachine.
//
// opts are op.Attention's: op.WithCausal (causal over global positions),
// op.WithScale, op.WithSoftcap, op.WithBackend, op.WithDevice and
// op.WithPrecision; rg.Backend, when not nil, takes precedence over them.
// The variants that need global positions or a global matrix (window,
// ALiBi, lengths, dropout, bias), a key/value cache and the BNHD layout
// are refused. Errors
// wrap op.ErrInvalidInput; a rank that cannot build its node fails the
// ring, so that the other ranks' runs return an error instead of waiting.
func Attention(q, k, v *gorgonia.Node, rg Ring, opts ...op.Option) (*gorgonia.Node, error) {
	a, err := newAttention(q, k, v, rg, opts)
	if err != nil {
		return nil, failEarly(rg, err)
	}
	return gorgonia.ApplyOp(a, q, k, v)
}

// newAttention checks the nodes and options of Attention and returns its op.
func newAttention(q, k, v *gorgonia.Node, rg Ring, opts []op.Option) (*attnOp, error) {
	for _, n := range []*gorgonia.Node{q, k, v} {
		if n == nil {
			return nil, invalid("a nil node")
		}
	}
	g := q.Graph()
	for _, n := range []*gorgonia.Node{k, v} {
		if g == nil {
			g = n.Graph()
		} else if n.Graph() != nil && n.Graph() != g {
			return nil, invalid("q, k and v belong to different graphs")
		}
	}
	if g == nil {
		return nil, invalid("q, k and v are all constants; at least one must belong to a graph")
	}
	qs, ks := q.Shape(), k.Shape()
	dt := q.Dtype()
	if qs.Dims() != 4 || ks.Dims() != 4 || !ks.Eq(v.Shape()) {
		return nil, invalid("shapes q %v, k %v, v %v: want [B, H, N, D] and k, v of one shape [B, Hkv, N, D]", qs, ks, v.Shape())
	}
	if (dt != tensor.Float32 && dt != tensor.Float64) || k.Dtype() != dt || v.Dtype() != dt {
		return nil, invalid("dtypes %v, %v, %v: want one of Float32 and Float64", dt, k.Dtype(), v.Dtype())
	}
	res, err := op.Resolve(qs[3], opts...)
	if err != nil {
		return nil, err
	}
	if res.Params.Window.On || res.Params.ALiBi != nil || res.Params.Dropout.On() || res.Lengths || res.Bias || res.KVCache || res.Layout != op.BHND {
		return nil, invalid("window, ALiBi, dropout, lengths, bias, a key/value cache and the BNHD layout are not supported by ring attention")
	}
	if rg.Backend == nil {
		rg.Backend = res.Backend
	}
	p := Problem{B: qs[0], H: qs[1], D: qs[3], Scale: res.Params.Scale, Causal: res.Params.Causal, Softcap: res.Params.Softcap}
	if ks[1] != qs[1] {
		p.Hkv = ks[1]
	}
	if ks[0] != qs[0] || ks[3] != qs[3] || qs[1]%ks[1] != 0 {
		return nil, invalid("q %v and k %v: B and D must agree and k's heads divide q's", qs, ks)
	}
	var r *rank[float64]
	if r, err = newRank[float64](rg, p); err != nil {
		return nil, err
	}
	if n := rg.Layout.Len(r.me); qs[2] != n || ks[2] != n {
		return nil, invalid("rank %d holds %d positions, q has %d and k %d", r.me, n, qs[2], ks[2])
	}
	return &attnOp{rg: rg, p: p, dtype: dt, q: qs.Clone(), k: ks.Clone(), saved: new(savedLSE)}, nil
}

// attnOp is ring attention as a Gorgonia op, (q, k, v) → o; gradOp is its
// backward, which the two share the forward's LSE with.
type attnOp struct {
	rg    Ring
	p     Problem
	dtype tensor.Dtype
	q, k  tensor.Shape // v has k's shape
	saved *savedLSE
}

// savedLSE carries the forward's LSE ([]float32 or []float64) to the
// backward.
type savedLSE struct {
	mu  sync.Mutex
	lse any
}

var (
	_ gorgonia.SDOp = (*attnOp)(nil)
	_ gorgonia.ADOp = (*attnOp)(nil)
	_ gorgonia.Op   = (*gradOp)(nil)
	_ gorgonia.Op   = partOp{}
)

func (a *attnOp) Arity() int { return 3 }

func (a *attnOp) Type() hm.Type {
	t := gorgonia.TensorType{Dims: 4, Of: hm.TypeVariable('a')}
	return hm.NewFnType(t, t, t, t)
}

func (a *attnOp) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	if len(in) != 3 {
		return nil, fmt.Errorf("ring attention: %d inputs, want 3", len(in))
	}
	return a.q.Clone(), nil
}

// Do runs the ring's forward, with the other ranks' runs, and keeps the
// LSE for the backward.
func (a *attnOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	ts, err := a.values(in, a.q, a.k, a.k)
	if err != nil {
		return nil, err
	}
	var o, lse any
	switch a.dtype {
	case tensor.Float32:
		o, lse, err = forwardDense[float32](a, ts)
	default:
		o, lse, err = forwardDense[float64](a, ts)
	}
	if err != nil {
		return nil, err
	}
	a.saved.mu.Lock()
	a.saved.lse = lse
	a.saved.mu.Unlock()
	return tensor.New(tensor.WithShape(a.q.Clone()...), tensor.WithBacking(o)), nil
}

func forwardDense[T kernels.Float](a *attnOp, ts []*tensor.Dense) (o, lse []T, err error) {
	return Forward(context.Background(), a.rg, a.p, ts[0].Data().([]T), ts[1].Data().([]T), ts[2].Data().([]T))
}

// values checks the values a machine passes against the shapes and dtype
// the op was built for (a node's value may be replaced by one of another
// shape) and returns them contiguous. A mismatch fails the ring.
func (a *attnOp) values(in []gorgonia.Value, shapes ...tensor.Shape) ([]*tensor.Dense, error) {
	if len(in) != len(shapes) {
		return nil, a.fail(fmt.Errorf("ring attention: %d inputs, want %d", len(in), len(shapes)))
	}
	out := make([]*tensor.Dense, len(in))
	for i, v := range in {
		d, ok := v.(*tensor.Dense)
		if !ok {
			return nil, a.fail(invalid("input %d is a %T, want a *tensor.Dense", i, v))
		}
		if !d.Shape().Eq(shapes[i]) || d.Dtype() != a.dtype {
			return nil, a.fail(invalid("input %d is %v %v at run time, the op was built for %v %v", i, d.Shape(), d.Dtype(), shapes[i], a.dtype))
		}
		if d.RequiresIterator() {
			d = d.Materialize().(*tensor.Dense)
		}
		out[i] = d
	}
	return out, nil
}

// fail fails the ring with err and returns it.
func (a *attnOp) fail(err error) error {
	a.rg.Transport.Fail(err)
	return err
}

// DiffWRT: q, k and v.
func (a *attnOp) DiffWRT(inputs int) []bool {
	d := make([]bool, inputs)
	for i := range d {
		d[i] = true
	}
	return d
}

// SymDiff adds the ring's backward: one gradOp node for the packed [dQ |
// dK | dV] and a view of each part.
func (a *attnOp) SymDiff(in gorgonia.Nodes, output, grad *gorgonia.Node) (gorgonia.Nodes, error) {
	if len(in) != 3 {
		return nil, fmt.Errorf("ring attention: SymDiff got %d inputs, want 3", len(in))
	}
	packed, err := gorgonia.ApplyOp(&gradOp{a: a}, in[0], in[1], in[2], output, grad)
	if err != nil {
		return nil, fmt.Errorf("ring attention backward: %w", err)
	}
	grads := make(gorgonia.Nodes, 3)
	for i, part := range a.parts() {
		if grads[i], err = gorgonia.ApplyOp(part, packed); err != nil {
			return nil, fmt.Errorf("ring attention backward: %w", err)
		}
	}
	return grads, nil
}

// DoDiff runs the ring's backward and adds the gradients into those of
// the inputs, for the LispMachine; constants have none.
func (a *attnOp) DoDiff(_ gorgonia.ExecutionContext, in gorgonia.Nodes, output *gorgonia.Node) error {
	if len(in) != 3 {
		return fmt.Errorf("ring attention: DoDiff got %d inputs, want 3", len(in))
	}
	dO, err := output.Grad()
	if err != nil {
		return a.fail(fmt.Errorf("ring attention: DoDiff: %w", err))
	}
	packed, err := (&gradOp{a: a}).Do(in[0].Value(), in[1].Value(), in[2].Value(), output.Value(), dO)
	if err != nil {
		return err
	}
	for i, part := range a.parts() {
		// A constant is the node whose op takes no input (Gorgonia keeps
		// its own test unexported).
		if in[i].Op() != nil && in[i].Op().Arity() == 0 {
			continue
		}
		acc, err := in[i].Grad()
		if err != nil {
			return fmt.Errorf("ring attention: DoDiff: %w", err)
		}
		g, err := part.Do(packed)
		if err != nil {
			return err
		}
		if err := addValue(acc, g.(*tensor.Dense)); err != nil {
			return err
		}
	}
	return nil
}

// addValue adds g into the gradient value acc in place.
func addValue(acc gorgonia.Value, g *tensor.Dense) error {
	dst, ok := acc.(*tensor.Dense)
	if !ok || dst.RequiresIterator() || dst.Dtype() != g.Dtype() || dst.Shape().TotalSize() != g.Shape().TotalSize() {
		return fmt.Errorf("ring attention: DoDiff: gradient holder %T %v cannot take %v", acc, acc.Shape(), g.Shape())
	}
	switch d := dst.Data().(type) {
	case []float32:
		add(d, g.Float32s())
	case []float64:
		add(d, g.Float64s())
	}
	return nil
}

// parts are the views of dQ, dK and dV in gradOp's result.
func (a *attnOp) parts() []partOp {
	ql, kl := a.q.TotalSize(), a.k.TotalSize()
	return []partOp{{0, a.q}, {ql, a.k}, {ql + kl, a.k}}
}

func (a *attnOp) ReturnsPtr() bool      { return false }
func (a *attnOp) CallsExtern() bool     { return false }
func (a *attnOp) OverwritesInput() int  { return -1 }
func (a *attnOp) WriteHash(h hash.Hash) { fmt.Fprint(h, a.String()) }
func (a *attnOp) Hashcode() uint32      { return hashOf(a) }

// String names everything that fixes the result, the transport included:
// Gorgonia merges nodes of equal hashes.
func (a *attnOp) String() string {
	return fmt.Sprintf("RingAttention{rank %d of %p %+v %v q%v k%v layout %v backend %s}",
		a.rg.Transport.Rank(), a.rg.Transport, a.p, a.dtype, a.q, a.k, a.rg.Layout.ranks, a.rg.Backend.Name())
}

// hashOf is FNV-1a of an op's WriteHash.
func hashOf(o interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	o.WriteHash(h)
	return h.Sum32()
}

// gradOp is the backward of an attnOp: (q, k, v, o, dO) → [dQ | dK | dV],
// one vector, since a Gorgonia op has a single output. It is not itself
// differentiable: second derivatives are not supported.
type gradOp struct{ a *attnOp }

func (g *gradOp) Arity() int { return 5 }

func (g *gradOp) Type() hm.Type {
	t := gorgonia.TensorType{Dims: 4, Of: hm.TypeVariable('a')}
	return hm.NewFnType(t, t, t, t, t, gorgonia.TensorType{Dims: 1, Of: hm.TypeVariable('a')})
}

func (g *gradOp) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	if len(in) != 5 {
		return nil, fmt.Errorf("ring attention backward: %d inputs, want 5", len(in))
	}
	return tensor.Shape{g.a.q.TotalSize() + 2*g.a.k.TotalSize()}, nil
}

// Do runs the ring's backward, with the other ranks' runs, from the LSE
// of the latest forward.
func (g *gradOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	a := g.a
	ts, err := a.values(in, a.q, a.k, a.k, a.q, a.q)
	if err != nil {
		return nil, err
	}
	a.saved.mu.Lock()
	lse := a.saved.lse
	a.saved.mu.Unlock()
	if lse == nil {
		return nil, a.fail(fmt.Errorf("ring attention backward ran before its forward: no saved LSE"))
	}
	var packed any
	switch a.dtype {
	case tensor.Float32:
		packed, err = backwardDense(a, ts, lse.([]float32))
	default:
		packed, err = backwardDense(a, ts, lse.([]float64))
	}
	if err != nil {
		return nil, err
	}
	return tensor.New(tensor.WithShape(a.q.TotalSize()+2*a.k.TotalSize()), tensor.WithBacking(packed)), nil
}

func backwardDense[T kernels.Float](a *attnOp, ts []*tensor.Dense, lse []T) ([]T, error) {
	d := func(i int) []T { return ts[i].Data().([]T) }
	dq, dk, dv, err := Backward(context.Background(), a.rg, a.p, d(0), d(1), d(2), d(3), lse, d(4))
	if err != nil {
		return nil, err
	}
	return append(append(dq, dk...), dv...), nil
}

func (g *gradOp) ReturnsPtr() bool      { return false }
func (g *gradOp) CallsExtern() bool     { return false }
func (g *gradOp) OverwritesInput() int  { return -1 }
func (g *gradOp) String() string        { return "Backward" + g.a.String() }
func (g *gradOp) WriteHash(h hash.Hash) { fmt.Fprint(h, g.String()) }
func (g *gradOp) Hashcode() uint32      { return hashOf(g) }

// partOp views one part of gradOp's packed result.
type partOp struct {
	offset int
	shape  tensor.Shape
}

func (p partOp) Arity() int { return 1 }

func (p partOp) Type() hm.Type {
	return hm.NewFnType(gorgonia.TensorType{Dims: 1, Of: hm.TypeVariable('a')}, gorgonia.TensorType{Dims: 4, Of: hm.TypeVariable('a')})
}

func (p partOp) InferShape(...gorgonia.DimSizer) (tensor.Shape, error) { return p.shape.Clone(), nil }

// Do returns a view: every backward run allocates a fresh packed result,
// whose parts nothing else reads.
func (p partOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("ring attention: part got %d inputs, want 1", len(in))
	}
	end := p.offset + p.shape.TotalSize()
	var backing any
	switch d := in[0].Data().(type) {
	case []float32:
		backing = d[p.offset:end:end]
	case []float64:
		backing = d[p.offset:end:end]
	default:
		return nil, fmt.Errorf("ring attention: part of %T", d)
	}
	return tensor.New(tensor.WithShape(p.shape.Clone()...), tensor.WithBacking(backing)), nil
}

func (p partOp) ReturnsPtr() bool      { return false }
func (p partOp) CallsExtern() bool     { return false }
func (p partOp) OverwritesInput() int  { return -1 }
func (p partOp) WriteHash(h hash.Hash) { fmt.Fprint(h, p.String()) }
func (p partOp) Hashcode() uint32      { return hashOf(p) }
func (p partOp) String() string {
	return fmt.Sprintf("RingAttentionPart{offset=%d shape=%v}", p.offset, p.shape)
}
