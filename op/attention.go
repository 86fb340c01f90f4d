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
// q is [B, H, Nq, D]; k and v are [B, H, Nk, D]; the result is [B, H, Nq,
// D]. Nq and Nk may differ. All three must share one dtype, Float32 or
// Float64, and every dimension must be at least 1 (an empty key set has no
// softmax). The node is differentiable with respect to q, k and v under both
// gorgonia.Grad (TapeMachine) and the LispMachine.
func Attention(q, k, v *gorgonia.Node, opts ...Option) (*gorgonia.Node, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkNodes(q, k, v); err != nil {
		return nil, err
	}
	backend, err := cfg.resolveBackend()
	if err != nil {
		return nil, err
	}
	scale := 1 / math.Sqrt(float64(q.Shape()[3]))
	if cfg.scaleSet {
		scale = cfg.scale
	}
	if math.IsNaN(scale) || math.IsInf(scale, 0) {
		return nil, invalid("scale %v must be finite", scale)
	}
	op := &attentionOp{
		cfg:   autograd.Config{Backend: backend, Scale: scale, Causal: cfg.causal},
		saved: new(autograd.Saved),
	}
	return gorgonia.ApplyOp(op, q, k, v)
}

// checkNodes validates everything about q, k and v that is known while the
// graph is built, so that running it cannot fail on their shapes or types.
func checkNodes(q, k, v *gorgonia.Node) error {
	nodes := []struct {
		name string
		n    *gorgonia.Node
	}{{"q", q}, {"k", k}, {"v", v}}
	for _, x := range nodes {
		if x.n == nil {
			return invalid("%s is nil", x.name)
		}
		if x.n.Graph() != q.Graph() {
			return invalid("%s belongs to another graph than q", x.name)
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
		for i, d := range x.n.Shape() {
			if d < 1 {
				return invalid("%s has shape %v; dimension %d is %d, want at least 1", x.name, x.n.Shape(), i, d)
			}
		}
	}
	qs, ks, vs := q.Shape(), k.Shape(), v.Shape()
	if !ks.Eq(vs) {
		return invalid("k %v and v %v must have the same shape", ks, vs)
	}
	for i, name := range []string{"B", "H"} {
		if qs[i] != ks[i] {
			return invalid("%s differs: q %v, k %v", name, qs, ks)
		}
	}
	if qs[3] != ks[3] {
		return invalid("head dimension D differs: q %v, k %v", qs, ks)
	}
	p := kernels.Params{B: qs[0], H: qs[1], Nq: qs[2], Nk: ks[2], D: qs[3], Scale: 1}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("op.Attention: %w", err)
	}
	return nil
}
