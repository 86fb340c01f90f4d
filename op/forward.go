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
		o, lse, st, err = runForward[float32](op.cfg.Backend, res, keep, p, q, k, v)
	case tensor.Float64:
		o, lse, st, err = runForward[float64](op.cfg.Backend, res, keep, p, q, k, v)
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

// runForward runs b's forward for element type T, through res keeping the
// device copies when keep is set, and returns O, LSE and the state kept.
func runForward[T kernels.Float](b kernels.Backend, res kernels.Resident, keep bool, p kernels.Params, q, k, v *tensor.Dense) (o, lse *tensor.Dense, st kernels.DeviceState, err error) {
	ob, lb := make([]T, p.QLen()), make([]T, p.LSELen())
	qs, ks, vs := q.Data().([]T), k.Data().([]T), v.Data().([]T)
	if keep {
		fwd, _ := kernels.ResidentEntryPoints[T](res)
		st, err = fwd(p, qs, ks, vs, ob, lb)
	} else {
		fwd, _ := kernels.EntryPoints[T](b)
		err = fwd(p, qs, ks, vs, ob, lb)
	}
	return tensor.New(tensor.WithBacking(ob)), tensor.New(tensor.WithBacking(lb)), st, err
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
