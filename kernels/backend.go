package kernels

// Float is the element type of every tensor a backend reads or writes.
type Float interface{ ~float32 | ~float64 }

// A Backend computes fused attention for one kind of hardware.
//
// Forward writes o and lse; Backward reads q, k, v, o, lse and do and
// overwrites dq, dk and dv. Neither may allocate anything of size Nq×Nk, and
// neither may modify its inputs. Slices follow the shapes in the package
// documentation. For the same inputs a backend returns bit-identical results
// from one call to the next. Errors wrap ErrInvalidParams for bad arguments;
// hardware failures (no device, out of memory) return other errors.
type Backend interface {
	Name() string
	Forward32(p Params, q, k, v, o, lse []float32) error
	Forward64(p Params, q, k, v, o, lse []float64) error
	Backward32(p Params, q, k, v, o, lse, do, dq, dk, dv []float32) error
	Backward64(p Params, q, k, v, o, lse, do, dq, dk, dv []float64) error
}
