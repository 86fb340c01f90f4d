package kernels

// Float is the element type of every tensor a backend reads or writes.
type Float interface{ ~float32 | ~float64 }

// A Backend computes fused attention for one kind of hardware.
//
// Forward writes o and lse; Backward reads q, k, v, o, lse, do and dlse and
// overwrites dq, dk and dv. dlse is the gradient of the loss with respect to
// the LSE, for callers that use the LSE (it lowers D_i by dLSE_i, see the
// package documentation); nil means none. Neither may allocate anything of size Nq×Nk, and
// neither may modify its inputs. Slices follow the shapes in the package
// documentation. For the same inputs a backend returns bit-identical results
// from one call to the next. Errors wrap ErrInvalidParams for bad arguments
// and ErrOutOfMemory when the memory a call needs cannot be had; other
// hardware failures (no device) return other errors.
type Backend interface {
	Name() string
	Forward32(p Params, q, k, v, o, lse []float32) error
	Forward64(p Params, q, k, v, o, lse []float64) error
	Backward32(p Params, q, k, v, o, lse, do, dlse, dq, dk, dv []float32) error
	Backward64(p Params, q, k, v, o, lse, do, dlse, dq, dk, dv []float64) error
}

// ForwardFunc is a backend's forward for one element type.
type ForwardFunc[T Float] func(p Params, q, k, v, o, lse []T) error

// BackwardFunc is a backend's backward for one element type.
type BackwardFunc[T Float] func(p Params, q, k, v, o, lse, do, dlse, dq, dk, dv []T) error

// EntryPoints returns b's forward and backward for the element type T, so
// that generic code can call a backend without switching on T itself.
func EntryPoints[T Float](b Backend) (ForwardFunc[T], BackwardFunc[T]) {
	var zero T
	if _, ok := any(zero).(float32); ok {
		return any(ForwardFunc[float32](b.Forward32)).(ForwardFunc[T]),
			any(BackwardFunc[float32](b.Backward32)).(BackwardFunc[T])
	}
	return any(ForwardFunc[float64](b.Forward64)).(ForwardFunc[T]),
		any(BackwardFunc[float64](b.Backward64)).(BackwardFunc[T])
}
