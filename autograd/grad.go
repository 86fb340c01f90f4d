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
// computes the packed gradients [dQ | dK | dV], and dBias after them with a
// bias, from (q, k, v, o, dO, bias) and the LSE its forward saved,
// recomputing P block by block. It has a single output because Gorgonia
// ops have one; unpackOp views the parts.
type gradOp struct{ *Op }

var _ gorgonia.Op = (*gradOp)(nil)

// Arity: q, k, v, o and dO, then the forward's extra inputs (the bias, the
// lengths).
func (op *gradOp) Arity() int { return 5 + op.cfg.extraInputs() }

func (op *gradOp) Type() hm.Type {
	return hm.NewFnType(append(op.inputTypes(2), gorgonia.TensorType{Dims: 1, Of: hm.TypeVariable('a')})...)
}

func (op *gradOp) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	if len(in) != op.Arity() {
		return nil, fmt.Errorf("attention backward: %d inputs, want %d", len(in), op.Arity())
	}
	return tensor.Shape{op.shapes[0].TotalSize() + 2*op.shapes[1].TotalSize() + op.p.BiasLen()}, nil
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
	o, dO, dLSE, err := op.splitOutputs(ts[3], ts[4])
	if err != nil {
		return nil, err
	}
	kt, err := op.toKernelLayout(ts[0], ts[1], ts[2], o, dO)
	if err != nil {
		return nil, err
	}
	// Only the forward of this Op keeps state, on this Op's backend, which
	// is then a kernels.Resident.
	st := op.saved.takeDevice()
	e := engineFor(op.dtype)
	packed, err := e.backward(op.cfg.Backend, st, p, kt[0], kt[1], kt[2], kt[3], lse, kt[4], dLSE)
	if st != nil {
		// A training step ends with no device memory held for it.
		err = errors.Join(err, st.Release())
	}
	if err == nil && op.cfg.BNHD {
		packed, err = op.gradsToBNHD(e, packed)
	}
	if err != nil {
		return nil, fmt.Errorf("attention backward on %s: %w", op.cfg.Backend.Name(), err)
	}
	return packed, nil
}

// gradsToBNHD moves dQ, dK and dV of the packed gradients to the BNHD
// layout; dBias, [Bb, Hb, Nq, Nk] in every layout, stays. relayout copies
// the whole vector, so with a bias only the first three parts go through it
// and are copied back into packed: a second Nq×Nk buffer for dBias is what
// the op never allocates.
func (op *gradOp) gradsToBNHD(e engine, packed *tensor.Dense) (*tensor.Dense, error) {
	p := op.p
	qp, kp := [4]int{p.B, p.H, p.Nq, p.D}, [4]int{p.B, p.KVHeads(), p.Nk, p.D}
	if p.Bias == nil {
		return e.relayout(packed, qp, kp, kp)
	}
	head, err := unpackOp{0, tensor.Shape{p.QLen() + 2*p.KLen()}, false}.view(packed)
	if err != nil {
		return nil, err
	}
	moved, err := e.relayout(head, qp, kp, kp)
	if err != nil {
		return nil, err
	}
	return packed, tensor.Copy(head, moved)
}

func (op *gradOp) ReturnsPtr() bool      { return false }
func (op *gradOp) CallsExtern() bool     { return false }
func (op *gradOp) OverwritesInput() int  { return -1 }
func (op *gradOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op *gradOp) Hashcode() uint32      { return hashOf(op) }
func (op *gradOp) String() string        { return "Backward" + op.Op.String() }

// splitOutputs returns O, dO and dLSE from the forward's result and its
// gradient: as they are, with no dLSE, or with Config.LSE the O and LSE
// parts of the packed vectors.
func (op *gradOp) splitOutputs(out, dOut *tensor.Dense) (o, dO, dLSE *tensor.Dense, err error) {
	if !op.cfg.LSE {
		return out, dOut, nil, nil
	}
	ov, lv := op.outputViews()
	if o, err = ov.view(out); err != nil {
		return nil, nil, nil, err
	}
	if dO, err = ov.view(dOut); err != nil {
		return nil, nil, nil, err
	}
	if dLSE, err = lv.view(dOut); err != nil {
		return nil, nil, nil, err
	}
	return o, dO, dLSE, nil
}

// gradParts returns the ops that view dQ, dK, dV and, with a bias, dBias
// in gradOp's result, in the order of the Op's inputs.
func (op *Op) gradParts() []unpackOp {
	qLen, kLen := op.shapes[0].TotalSize(), op.shapes[1].TotalSize()
	parts := []unpackOp{{0, op.shapes[0], false}, {qLen, op.shapes[1], false}, {qLen + kLen, op.shapes[2], false}}
	if op.cfg.Bias != nil {
		parts = append(parts, unpackOp{qLen + 2*kLen, op.cfg.Bias.Clone(), false})
	}
	return parts
}

// unpackOp views one part of a packed result: O or the LSE in an Op's
// [O | LSE] (Config.LSE), dQ, dK or dV in gradOp's [dQ | dK | dV]. It is
// differentiable: the gradient of a part is embedOp's zeros elsewhere.
type unpackOp struct {
	offset int
	shape  tensor.Shape
	// copied makes Do return a copy instead of a view. Gorgonia does not
	// know that a view shares its input's memory, so a later op may write
	// into it in place; that is harmless for the gradient parts, whose
	// packed vector nothing reads again, but not for O and the LSE, whose
	// packed vector the backward reads.
	copied bool
}

var (
	_ gorgonia.SDOp = unpackOp{}
	_ gorgonia.ADOp = unpackOp{}
)

func (op unpackOp) DiffWRT(int) []bool { return []bool{true} }

// SymDiff places the part's gradient in a packed vector, zero elsewhere;
// Gorgonia sums those of the parts a loss uses.
func (op unpackOp) SymDiff(in gorgonia.Nodes, _, grad *gorgonia.Node) (gorgonia.Nodes, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("attention: unpack SymDiff got %d inputs, want 1", len(in))
	}
	g, err := gorgonia.ApplyOp(embedOp{op, in[0].Shape().TotalSize()}, grad)
	if err != nil {
		return nil, err
	}
	return gorgonia.Nodes{g}, nil
}

// DoDiff adds the part's gradient into its range of the packed input's,
// for the LispMachine.
func (op unpackOp) DoDiff(_ gorgonia.ExecutionContext, in gorgonia.Nodes, output *gorgonia.Node) error {
	if len(in) != 1 {
		return fmt.Errorf("attention: unpack DoDiff got %d inputs, want 1", len(in))
	}
	g, err := output.Grad()
	if err != nil {
		return fmt.Errorf("attention: unpack DoDiff: %w", err)
	}
	acc, err := in[0].Grad()
	if err != nil {
		return fmt.Errorf("attention: unpack DoDiff: %w", err)
	}
	accd, err := dense(acc)
	if err != nil {
		return err
	}
	part, err := op.view(accd)
	if err != nil {
		return err
	}
	gd, err := dense(g)
	if err != nil {
		return err
	}
	return addInto(part, gd)
}

func (op unpackOp) Arity() int { return 1 }

func (op unpackOp) Type() hm.Type {
	return hm.NewFnType(gorgonia.TensorType{Dims: 1, Of: hm.TypeVariable('a')},
		gorgonia.TensorType{Dims: len(op.shape), Of: hm.TypeVariable('a')})
}

func (op unpackOp) InferShape(...gorgonia.DimSizer) (tensor.Shape, error) {
	return op.shape.Clone(), nil
}

// Do returns a view, not a copy, unless copied: every backward run
// allocates a fresh packed result and the three parts never overlap, so
// nothing else reads or writes this range (copying it cost as much as the
// GPU kernels at large N).
func (op unpackOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("attention: unpack got %d inputs, want 1", len(in))
	}
	packed, err := dense(in[0])
	if err != nil {
		return nil, err
	}
	part, err := op.view(packed)
	if err != nil || !op.copied {
		return part, err
	}
	return part.Clone().(*tensor.Dense), nil
}

// view returns the part of packed that op views, sharing its memory.
func (op unpackOp) view(packed *tensor.Dense) (*tensor.Dense, error) {
	end := op.offset + op.shape.TotalSize()
	if end > packed.Shape().TotalSize() {
		return nil, fmt.Errorf("attention: unpack [%d, %d) of %d elements", op.offset, end, packed.Shape().TotalSize())
	}
	switch data := packed.Data().(type) {
	case []float32:
		return tensor.New(tensor.WithShape(op.shape.Clone()...), tensor.WithBacking(data[op.offset:end:end])), nil
	case []float64:
		return tensor.New(tensor.WithShape(op.shape.Clone()...), tensor.WithBacking(data[op.offset:end:end])), nil
	}
	return nil, fmt.Errorf("attention: unpack of %v", packed.Dtype())
}

func (op unpackOp) ReturnsPtr() bool      { return false }
func (op unpackOp) CallsExtern() bool     { return false }
func (op unpackOp) OverwritesInput() int  { return -1 }
func (op unpackOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op unpackOp) Hashcode() uint32      { return hashOf(op) }
func (op unpackOp) String() string {
	return fmt.Sprintf("FlashAttentionUnpack{offset=%d shape=%v copied=%v}", op.offset, op.shape, op.copied)
}

// embedOp is the gradient of an unpackOp: a packed vector of total
// elements holding its input in the part's range and zeros elsewhere.
type embedOp struct {
	part  unpackOp
	total int
}

var _ gorgonia.Op = embedOp{}

func (op embedOp) Arity() int { return 1 }

func (op embedOp) Type() hm.Type {
	return hm.NewFnType(gorgonia.TensorType{Dims: len(op.part.shape), Of: hm.TypeVariable('a')},
		gorgonia.TensorType{Dims: 1, Of: hm.TypeVariable('a')})
}

func (op embedOp) InferShape(...gorgonia.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.total}, nil
}

func (op embedOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("attention: embed got %d inputs, want 1", len(in))
	}
	g, err := dense(in[0])
	if err != nil {
		return nil, err
	}
	out := tensor.New(tensor.Of(g.Dtype()), tensor.WithShape(op.total))
	part, err := op.part.view(out)
	if err != nil {
		return nil, err
	}
	if err := addInto(part, g); err != nil {
		return nil, err
	}
	return out, nil
}

func (op embedOp) ReturnsPtr() bool      { return false }
func (op embedOp) CallsExtern() bool     { return false }
func (op embedOp) OverwritesInput() int  { return -1 }
func (op embedOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op embedOp) Hashcode() uint32      { return hashOf(op) }
func (op embedOp) String() string {
	return fmt.Sprintf("FlashAttentionEmbed{offset=%d shape=%v total=%d}", op.part.offset, op.part.shape, op.total)
}
