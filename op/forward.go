package op

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/chewxy/hm"
	"github.com/gorgonia-flash/flashattention/autograd"
	"github.com/gorgonia-flash/flashattention/kernels"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// attentionOp is the fused forward. It saves the LSE of its latest run in
// saved, which its backward (autograd.Gradient, autograd.Values) reads.
type attentionOp struct {
	cfg   autograd.Config
	saved *autograd.Saved
}

var (
	_ gorgonia.SDOp = (*attentionOp)(nil)
	_ gorgonia.ADOp = (*attentionOp)(nil)
)

func (op *attentionOp) Arity() int { return 3 }

// Type is (Tensor4 a, Tensor4 a, Tensor4 a) → Tensor4 a.
func (op *attentionOp) Type() hm.Type {
	t := gorgonia.TensorType{Dims: 4, Of: hm.TypeVariable('a')}
	return hm.NewFnType(t, t, t, t)
}

// InferShape checks ranks itself: gorgonia does not unify the rank of a
// TensorType, and a wrong rank would otherwise panic later in ApplyOp.
func (op *attentionOp) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	if len(in) != 3 {
		return nil, fmt.Errorf("op.Attention: %d inputs, want 3", len(in))
	}
	shapes := make([]tensor.Shape, 3)
	for i, ds := range in {
		s, ok := ds.(tensor.Shape)
		if !ok || s.Dims() != 4 {
			return nil, invalid("input %d has shape %v, want [B, H, N, D]", i, ds)
		}
		shapes[i] = s
	}
	return shapes[0].Clone(), nil
}

func (op *attentionOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	if len(in) != 3 {
		return nil, fmt.Errorf("op.Attention: %d inputs, want 3", len(in))
	}
	ts := make([]*tensor.Dense, 3)
	for i, v := range in {
		d, err := autograd.Dense(v)
		if err != nil {
			return nil, err
		}
		ts[i] = d
	}
	q, k, v := ts[0], ts[1], ts[2]
	p, err := op.cfg.Params(q.Shape(), k.Shape())
	if err != nil {
		return nil, err
	}
	if k.Dtype() != q.Dtype() || v.Dtype() != q.Dtype() {
		return nil, invalid("dtypes %v, %v, %v must match", q.Dtype(), k.Dtype(), v.Dtype())
	}
	// On a backend with device memory, a forward whose backward nodes exist
	// keeps its device copies for that backward (see autograd.Saved).
	res, _ := op.cfg.Backend.(kernels.Resident)
	keep := res != nil && op.saved.KeepOnDevice()
	var (
		o, lse *tensor.Dense
		st     kernels.DeviceState
	)
	switch q.Dtype() {
	case tensor.Float32:
		o32, lse32 := make([]float32, p.QLen()), make([]float32, p.LSELen())
		if keep {
			st, err = res.ForwardKeep32(p, q.Float32s(), k.Float32s(), v.Float32s(), o32, lse32)
		} else {
			err = op.cfg.Backend.Forward32(p, q.Float32s(), k.Float32s(), v.Float32s(), o32, lse32)
		}
		o, lse = tensor.New(tensor.WithBacking(o32)), tensor.New(tensor.WithBacking(lse32))
	case tensor.Float64:
		o64, lse64 := make([]float64, p.QLen()), make([]float64, p.LSELen())
		if keep {
			st, err = res.ForwardKeep64(p, q.Float64s(), k.Float64s(), v.Float64s(), o64, lse64)
		} else {
			err = op.cfg.Backend.Forward64(p, q.Float64s(), k.Float64s(), v.Float64s(), o64, lse64)
		}
		o, lse = tensor.New(tensor.WithBacking(o64)), tensor.New(tensor.WithBacking(lse64))
	default:
		return nil, invalid("dtype %v, want Float32 or Float64", q.Dtype())
	}
	if err != nil {
		// The previous run's device state is of no use to anyone now.
		return nil, errors.Join(fmt.Errorf("op.Attention on %s: %w", op.cfg.Backend.Name(), err), op.saved.Release())
	}
	o.Reshape(q.Shape()...)
	lse.Reshape(p.B, p.H, p.Nq)
	if err := op.saved.Store(lse, p, st); err != nil {
		return nil, fmt.Errorf("op.Attention on %s: releasing the previous run's device state: %w", op.cfg.Backend.Name(), err)
	}
	return o, nil
}

func (op *attentionOp) DiffWRT(inputs int) []bool { return []bool{true, true, true} }

// SymDiff builds the recomputing backward (see package autograd).
func (op *attentionOp) SymDiff(in gorgonia.Nodes, output, grad *gorgonia.Node) (gorgonia.Nodes, error) {
	if len(in) != 3 {
		return nil, fmt.Errorf("op.Attention: SymDiff got %d inputs, want 3", len(in))
	}
	return autograd.Gradient(op.cfg, op.saved, in[0], in[1], in[2], output, grad)
}

// DoDiff adds this op's gradients into the inputs' gradients, for the
// LispMachine, which skips ops that lack it without a word.
func (op *attentionOp) DoDiff(_ gorgonia.ExecutionContext, in gorgonia.Nodes, output *gorgonia.Node) error {
	if len(in) != 3 {
		return fmt.Errorf("op.Attention: DoDiff got %d inputs, want 3", len(in))
	}
	dO, err := output.Grad()
	if err != nil {
		return fmt.Errorf("op.Attention: DoDiff: %w", err)
	}
	grads, err := autograd.Values(op.cfg, op.saved, in[0].Value(), in[1].Value(), in[2].Value(), output.Value(), dO)
	if err != nil {
		return err
	}
	for i, n := range in {
		acc, err := n.Grad()
		if err != nil {
			return fmt.Errorf("op.Attention: DoDiff: %w", err)
		}
		if err := addInto(acc, grads[i]); err != nil {
			return err
		}
	}
	return nil
}

// addInto accumulates g into the gradient value acc in place.
func addInto(acc gorgonia.Value, g *tensor.Dense) error {
	dst, ok := acc.(*tensor.Dense)
	if !ok || dst.RequiresIterator() || dst.Dtype() != g.Dtype() || dst.Shape().TotalSize() != g.Shape().TotalSize() {
		return fmt.Errorf("op.Attention: DoDiff: gradient holder %T %v cannot take %v", acc, acc.Shape(), g.Shape())
	}
	switch d := dst.Data().(type) {
	case []float32:
		for i, x := range g.Float32s() {
			d[i] += x
		}
	case []float64:
		for i, x := range g.Float64s() {
			d[i] += x
		}
	default:
		return fmt.Errorf("op.Attention: DoDiff: gradient holder of %v", dst.Dtype())
	}
	return nil
}

func (op *attentionOp) ReturnsPtr() bool      { return false }
func (op *attentionOp) CallsExtern() bool     { return false }
func (op *attentionOp) OverwritesInput() int  { return -1 }
func (op *attentionOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }

func (op *attentionOp) Hashcode() uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}

func (op *attentionOp) String() string { return "FlashAttention{" + op.cfg.String() + "}" }
