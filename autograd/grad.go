package autograd

import (
	"errors"
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// gradOp is the backward of an Op, as maxPoolDiffOp is maxPoolOp's: it
// computes the packed gradients [dQ | dK | dV] from (q, k, v, o, dO) and the
// LSE its forward saved, recomputing P block by block. It has a single
// output because Gorgonia ops have one; unpackOp views the three parts.
type gradOp struct{ *Op }

var _ gorgonia.Op = (*gradOp)(nil)

// Arity: q, k, v, o and dO, then the forward's length inputs.
func (op *gradOp) Arity() int { return 5 + op.cfg.lengthInputs() }

func (op *gradOp) Type() hm.Type {
	t4 := gorgonia.TensorType{Dims: 4, Of: hm.TypeVariable('a')}
	ts := append([]hm.Type{t4, t4, t4, t4, t4}, op.lengthTypes()...)
	return hm.NewFnType(append(ts, gorgonia.TensorType{Dims: 1, Of: hm.TypeVariable('a')})...)
}

func (op *gradOp) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	if len(in) != op.Arity() {
		return nil, fmt.Errorf("attention backward: %d inputs, want %d", len(in), op.Arity())
	}
	return tensor.Shape{op.shapes[0].TotalSize() + 2*op.shapes[1].TotalSize()}, nil
}

// Do runs the backward on the forward's saved state: its device copies when
// the forward kept them (they are released afterwards: the backward is their
// last user), else the inputs given and the saved LSE.
func (op *gradOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	ts, p, err := op.inputs(in, 5)
	if err != nil {
		return nil, err
	}
	lse, offset, err := op.saved.load()
	if err != nil {
		return nil, err
	}
	p.Dropout.Offset = offset // the forward's mask
	// Only the forward of this Op keeps state, on this Op's backend, which
	// is then a kernels.Resident.
	st := op.saved.takeDevice()
	packed, err := engineFor(op.dtype).backward(op.cfg.Backend, st, p, ts[0], ts[1], ts[2], ts[3], lse, ts[4])
	if st != nil {
		// A training step ends with no device memory held for it.
		err = errors.Join(err, st.Release())
	}
	if err != nil {
		return nil, fmt.Errorf("attention backward on %s: %w", op.cfg.Backend.Name(), err)
	}
	return packed, nil
}

func (op *gradOp) ReturnsPtr() bool      { return false }
func (op *gradOp) CallsExtern() bool     { return false }
func (op *gradOp) OverwritesInput() int  { return -1 }
func (op *gradOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op *gradOp) Hashcode() uint32      { return hashOf(op) }
func (op *gradOp) String() string        { return "Backward" + op.Op.String() }

// gradParts returns the ops that view dQ, dK and dV in gradOp's result.
func (op *Op) gradParts() [3]unpackOp {
	qLen, kLen := op.shapes[0].TotalSize(), op.shapes[1].TotalSize()
	return [3]unpackOp{{0, op.shapes[0]}, {qLen, op.shapes[1]}, {qLen + kLen, op.shapes[2]}}
}

// unpackOp views one of dQ, dK, dV in gradOp's packed result.
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

// Do returns a view, not a copy: every backward run allocates a fresh packed
// result and the three parts never overlap, so nothing else reads or writes
// this range (copying it cost as much as the GPU kernels at large N).
func (op unpackOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("attention backward: unpack got %d inputs, want 1", len(in))
	}
	packed, err := dense(in[0])
	if err != nil {
		return nil, err
	}
	end := op.offset + op.shape.TotalSize()
	if end > packed.Shape().TotalSize() {
		return nil, fmt.Errorf("attention backward: unpack [%d, %d) of %d elements", op.offset, end, packed.Shape().TotalSize())
	}
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
