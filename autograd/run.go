package autograd

import (
	"github.com/gorgonia-flash/flashattention/internal/hostmem"
	"github.com/gorgonia-flash/flashattention/kernels"
	"gorgonia.org/tensor"
)

// engine is the one path from Gorgonia tensors to a backend, for both
// directions: it allocates the results, picks the backend's entry point
// for the element type (the resident one when device state is kept or
// held) and calls it. The Op and gradOp choose an engine by dtype once, in
// engineFor, and never switch on the element type themselves.
type engine interface {
	// forward returns [O | LSE] in one vector (O flat, q's size; LSE
	// [B, H, Nq] flat) and, with keep (b must then be a kernels.Resident),
	// the device state kept.
	forward(b kernels.Backend, keep bool, p kernels.Params, q, k, v *tensor.Dense) (packed *tensor.Dense, st kernels.DeviceState, err error)
	// backward returns [dQ | dK | dV] in one vector, followed by dBias
	// when p has a bias, computed on st's device copies when st is not nil
	// (b must then be a kernels.Resident), else on the inputs given. dLSE,
	// the gradient with respect to the LSE, may be nil.
	backward(b kernels.Backend, st kernels.DeviceState, p kernels.Params, q, k, v, o, lse, dO, dLSE *tensor.Dense) (*tensor.Dense, error)
	// bias returns a copy of shape (a bias's shape, no data) reading d's
	// data in place as the data of this element type.
	bias(shape *kernels.Bias, d *tensor.Dense) *kernels.Bias
	// forwardCached is the package function forwardCached of this
	// element type, returning [O | LSE] like forward.
	forwardCached(c *Cache, b kernels.Backend, p kernels.Params, q, k, v *tensor.Dense) (*tensor.Dense, error)
	// relayout is the package function relayout of this element type.
	relayout(x *tensor.Dense, parts ...[4]int) (*tensor.Dense, error)
}

// engineFor returns the engine of dt, which New has checked is Float32 or
// Float64.
func engineFor(dt tensor.Dtype) engine {
	if dt == tensor.Float32 {
		return typed[float32]{}
	}
	return typed[float64]{}
}

// typed is the engine of element type T.
type typed[T kernels.Float] struct{}

func (typed[T]) forward(b kernels.Backend, keep bool, p kernels.Params, q, k, v *tensor.Dense) (packed *tensor.Dense, st kernels.DeviceState, err error) {
	// Results the memory left cannot hold are an error wrapping
	// kernels.ErrOutOfMemory, not a fatal runtime error.
	if err := hostmem.CheckElems[T](p.QLen() + p.LSELen()); err != nil {
		return nil, nil, err
	}
	buf := make([]T, p.QLen()+p.LSELen())
	ob, lb := buf[:p.QLen()], buf[p.QLen():]
	qs, ks, vs := q.Data().([]T), k.Data().([]T), v.Data().([]T)
	if keep {
		fwd, _ := kernels.ResidentEntryPoints[T](b.(kernels.Resident))
		st, err = fwd(p, qs, ks, vs, ob, lb)
	} else {
		fwd, _ := kernels.EntryPoints[T](b)
		err = fwd(p, qs, ks, vs, ob, lb)
	}
	return tensor.New(tensor.WithShape(len(buf)), tensor.WithBacking(buf)), st, err
}

func (typed[T]) forwardCached(c *Cache, b kernels.Backend, p kernels.Params, q, k, v *tensor.Dense) (*tensor.Dense, error) {
	if err := hostmem.CheckElems[T](p.QLen() + p.LSELen()); err != nil {
		return nil, err
	}
	buf := make([]T, p.QLen()+p.LSELen())
	err := forwardCached(c, b, p, q.Data().([]T), k.Data().([]T), v.Data().([]T), buf[:p.QLen()], buf[p.QLen():])
	return tensor.New(tensor.WithShape(len(buf)), tensor.WithBacking(buf)), err
}

func (typed[T]) backward(b kernels.Backend, st kernels.DeviceState, p kernels.Params, q, k, v, o, lse, dO, dLSE *tensor.Dense) (*tensor.Dense, error) {
	n := p.QLen() + 2*p.KLen()
	if err := hostmem.CheckElems[T](n + p.BiasLen()); err != nil {
		return nil, err
	}
	// dBias, the one Nq×Nk buffer, is the graph's gradient of the bias;
	// the kernels write it in place, at the end of the packed result.
	buf := make([]T, n+p.BiasLen())
	dq, dk, dv := buf[:p.QLen()], buf[p.QLen():p.QLen()+p.KLen()], buf[p.QLen()+p.KLen():n]
	if p.Bias != nil {
		b := *p.Bias
		setBiasGrad(&b, buf[n:])
		p.Bias = &b
	}
	var err error
	if st != nil {
		_, bwd := kernels.ResidentEntryPoints[T](b.(kernels.Resident))
		err = bwd(st, p, dO.Data().([]T), dataOf[T](dLSE), dq, dk, dv)
	} else {
		_, bwd := kernels.EntryPoints[T](b)
		err = bwd(p, q.Data().([]T), k.Data().([]T), v.Data().([]T), o.Data().([]T), lse.Data().([]T), dO.Data().([]T), dataOf[T](dLSE), dq, dk, dv)
	}
	return tensor.New(tensor.WithShape(len(buf)), tensor.WithBacking(buf)), err
}

func (typed[T]) bias(shape *kernels.Bias, d *tensor.Dense) *kernels.Bias {
	b := &kernels.Bias{Bb: shape.Bb, Hb: shape.Hb}
	switch x := any(d.Data().([]T)).(type) {
	case []float32:
		b.Data32 = x
	case []float64:
		b.Data64 = x
	}
	return b
}

// setBiasGrad makes b's gradient of element type T be g.
func setBiasGrad[T kernels.Float](b *kernels.Bias, g []T) {
	switch x := any(g).(type) {
	case []float32:
		b.Grad32 = x
	case []float64:
		b.Grad64 = x
	}
}

// dataOf is t's backing, or nil for a nil t.
func dataOf[T kernels.Float](t *tensor.Dense) []T {
	if t == nil {
		return nil
	}
	return t.Data().([]T)
}

func (typed[T]) relayout(x *tensor.Dense, parts ...[4]int) (*tensor.Dense, error) {
	return relayout[T](x, parts...)
}
