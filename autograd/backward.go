package autograd

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/chewxy/hm"
	"github.com/gorgonia-flash/flashattention/kernels"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Gradient adds to the graph the nodes for dQ, dK and dV of the attention
// O = op(q, k, v) configured by cfg, given dO, the gradient flowing into O.
// saved must be the Saved the forward op stores its LSE into; from now on
// the forward also keeps its device state there (see Saved).
func Gradient(cfg Config, saved *Saved, q, k, v, o, dO *gorgonia.Node) (gorgonia.Nodes, error) {
	saved.mu.Lock()
	saved.keep = true
	saved.mu.Unlock()
	packed, err := gorgonia.ApplyOp(&gradOp{cfg: cfg, saved: saved}, q, k, v, o, dO)
	if err != nil {
		return nil, fmt.Errorf("attention backward: %w", err)
	}
	qLen, kLen := q.Shape().TotalSize(), k.Shape().TotalSize()
	parts := []struct {
		offset int
		shape  tensor.Shape
	}{{0, q.Shape()}, {qLen, k.Shape()}, {qLen + kLen, v.Shape()}}
	grads := make(gorgonia.Nodes, len(parts))
	for i, part := range parts {
		if grads[i], err = gorgonia.ApplyOp(unpackOp{offset: part.offset, shape: part.shape}, packed); err != nil {
			return nil, fmt.Errorf("attention backward: %w", err)
		}
	}
	return grads, nil
}

// Values computes dQ, dK and dV directly from the values of q, k, v, o and
// dO (all *tensor.Dense of one float dtype), for DoDiff.
func Values(cfg Config, saved *Saved, q, k, v, o, dO any) ([3]*tensor.Dense, error) {
	var grads [3]*tensor.Dense
	packed, err := backward(cfg, saved, q, k, v, o, dO)
	if err != nil {
		return grads, err
	}
	offset := 0
	for i, in := range []any{q, k, v} {
		t, err := Dense(in)
		if err != nil {
			return grads, err
		}
		if grads[i], err = (unpackOp{offset: offset, shape: t.Shape()}).unpack(packed); err != nil {
			return grads, err
		}
		offset += t.Shape().TotalSize()
	}
	return grads, nil
}

// backward runs the backend on the five inputs and the saved LSE, and
// returns [dQ | dK | dV] flattened into one vector.
func backward(cfg Config, saved *Saved, inputs ...any) (*tensor.Dense, error) {
	ts := make([]*tensor.Dense, len(inputs))
	for i, in := range inputs {
		d, err := Dense(in)
		if err != nil {
			return nil, err
		}
		ts[i] = d
	}
	q, k, v, o, dO := ts[0], ts[1], ts[2], ts[3], ts[4]
	p, err := cfg.Params(q.Shape(), k.Shape())
	if err != nil {
		return nil, err
	}
	for _, t := range ts[1:] {
		if t.Dtype() != q.Dtype() {
			return nil, fmt.Errorf("attention backward: mixed dtypes %v and %v", q.Dtype(), t.Dtype())
		}
	}
	lse, err := saved.load(p, q.Dtype())
	if err != nil {
		return nil, err
	}
	st := saved.takeDevice(p, q.Dtype())
	res, _ := cfg.Backend.(kernels.Resident)
	if st != nil && res == nil {
		// The backend changed under the Saved; a state never outlives it.
		if err := st.Release(); err != nil {
			return nil, fmt.Errorf("attention backward: %w", err)
		}
		st = nil
	}
	var out *tensor.Dense
	switch q.Dtype() {
	case tensor.Float32:
		out, err = runBackward[float32](cfg.Backend, res, st, p, q, k, v, o, dO, lse)
	case tensor.Float64:
		out, err = runBackward[float64](cfg.Backend, res, st, p, q, k, v, o, dO, lse)
	default:
		err = fmt.Errorf("attention backward: dtype %v, want Float32 or Float64", q.Dtype())
	}
	if st != nil {
		// The backward is the state's last user: a training step ends with
		// no device memory held for it.
		err = errors.Join(err, st.Release())
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// runBackward runs b's backward for element type T (on st's device copies
// when st is set, through res) and returns [dQ | dK | dV] in one vector.
func runBackward[T kernels.Float](b kernels.Backend, res kernels.Resident, st kernels.DeviceState, p kernels.Params,
	q, k, v, o, dO *tensor.Dense, lse tensor.Tensor) (*tensor.Dense, error) {
	buf := make([]T, p.QLen()+2*p.KLen())
	dq, dk, dv := buf[:p.QLen()], buf[p.QLen():p.QLen()+p.KLen()], buf[p.QLen()+p.KLen():]
	var err error
	if st != nil {
		_, bwd := kernels.ResidentEntryPoints[T](res)
		err = bwd(st, p, dO.Data().([]T), dq, dk, dv)
	} else {
		_, bwd := kernels.EntryPoints[T](b)
		err = bwd(p, q.Data().([]T), k.Data().([]T), v.Data().([]T), o.Data().([]T), lse.Data().([]T), dO.Data().([]T), dq, dk, dv)
	}
	return tensor.New(tensor.WithShape(len(buf)), tensor.WithBacking(buf)), err
}

// gradOp computes the packed gradients [dQ | dK | dV] from (q, k, v, o, dO).
type gradOp struct {
	cfg   Config
	saved *Saved
}

var _ gorgonia.Op = (*gradOp)(nil)

func (op *gradOp) Arity() int { return 5 }

func (op *gradOp) Type() hm.Type {
	t4 := gorgonia.TensorType{Dims: 4, Of: hm.TypeVariable('a')}
	return hm.NewFnType(t4, t4, t4, t4, t4, gorgonia.TensorType{Dims: 1, Of: hm.TypeVariable('a')})
}

func (op *gradOp) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	if len(in) != 5 {
		return nil, fmt.Errorf("attention backward: %d inputs, want 5", len(in))
	}
	q, qok := in[0].(tensor.Shape)
	k, kok := in[1].(tensor.Shape)
	if !qok || !kok || q.Dims() != 4 || k.Dims() != 4 {
		return nil, fmt.Errorf("attention backward: input shapes %v and %v, want rank 4", in[0], in[1])
	}
	return tensor.Shape{q.TotalSize() + 2*k.TotalSize()}, nil
}

func (op *gradOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	if len(in) != 5 {
		return nil, fmt.Errorf("attention backward: %d inputs, want 5", len(in))
	}
	return backward(op.cfg, op.saved, in[0], in[1], in[2], in[3], in[4])
}

func (op *gradOp) ReturnsPtr() bool      { return false }
func (op *gradOp) CallsExtern() bool     { return false }
func (op *gradOp) OverwritesInput() int  { return -1 }
func (op *gradOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op *gradOp) Hashcode() uint32      { return hashOf(op) }
func (op *gradOp) String() string        { return "FlashAttentionBackward{" + op.cfg.String() + "}" }

// unpackOp copies one of dQ, dK, dV out of gradOp's packed result.
type unpackOp struct {
	offset int
	shape  tensor.Shape
}

var _ gorgonia.Op = unpackOp{}

func (op unpackOp) Arity() int { return 1 }

func (op unpackOp) Type() hm.Type {
	return hm.NewFnType(gorgonia.TensorType{Dims: 1, Of: hm.TypeVariable('a')},
		gorgonia.TensorType{Dims: len(op.shape), Of: hm.TypeVariable('a')})
}

func (op unpackOp) InferShape(...gorgonia.DimSizer) (tensor.Shape, error) {
	return op.shape.Clone(), nil
}

func (op unpackOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("attention backward: unpack got %d inputs, want 1", len(in))
	}
	return op.unpack(in[0])
}

func (op unpackOp) unpack(v any) (*tensor.Dense, error) {
	packed, err := Dense(v)
	if err != nil {
		return nil, err
	}
	end := op.offset + op.shape.TotalSize()
	if end > packed.Shape().TotalSize() {
		return nil, fmt.Errorf("attention backward: unpack [%d, %d) of %d elements", op.offset, end, packed.Shape().TotalSize())
	}
	// A view, not a copy: every backward run allocates a fresh packed
	// result, and the three parts never overlap, so nothing else reads or
	// writes this range (copying it cost as much as the GPU kernels at
	// large N).
	switch data := packed.Data().(type) {
	case []float32:
		return tensor.New(tensor.WithShape(op.shape.Clone()...), tensor.WithBacking(data[op.offset:end:end])), nil
	case []float64:
		return tensor.New(tensor.WithShape(op.shape.Clone()...), tensor.WithBacking(data[op.offset:end:end])), nil
	}
	return nil, fmt.Errorf("attention backward: unpack of %v", packed.Dtype())
}

func (op unpackOp) ReturnsPtr() bool      { return false }
func (op unpackOp) CallsExtern() bool     { return false }
func (op unpackOp) OverwritesInput() int  { return -1 }
func (op unpackOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op unpackOp) Hashcode() uint32      { return hashOf(op) }
func (op unpackOp) String() string {
	return fmt.Sprintf("FlashAttentionUnpack{offset=%d shape=%v}", op.offset, op.shape)
}

// hashOf is FNV-1a of an op's WriteHash, as gorgonia's own ops do.
func hashOf(op interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}
