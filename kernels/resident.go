package kernels

// DeviceState is what a Resident backend's forward leaves in its device
// memory for the backward of the same problem: its copies of q, k, v, o and
// lse. It holds O(N) memory (the size of those five tensors) until Release.
// Release may be called more than once, from any goroutine, and after the
// backend is closed (closing frees the memory with the device context).
type DeviceState interface {
	Release() error
}

// Resident is implemented by backends whose tensors live in memory of their
// own (GPUs), so that a backward need not upload again what its forward
// uploaded. A plain Backward call on such a backend uploads every input;
// BackwardKept uploads only do.
//
// ForwardKeep32 and ForwardKeep64 are Forward32 and Forward64 that also
// return the device copies of their inputs and results. BackwardKept32 and
// BackwardKept64 are Backward32 and Backward64 on the inputs st holds; st
// must come from the same backend's ForwardKeep of the same element type and
// p, else the error wraps ErrInvalidParams. st stays valid after the
// backward, and its owner still releases it. Results are bit-identical to
// those of the plain entry points.
type Resident interface {
	Backend
	ForwardKeep32(p Params, q, k, v, o, lse []float32) (DeviceState, error)
	ForwardKeep64(p Params, q, k, v, o, lse []float64) (DeviceState, error)
	BackwardKept32(st DeviceState, p Params, do, dlse, dq, dk, dv []float32) error
	BackwardKept64(st DeviceState, p Params, do, dlse, dq, dk, dv []float64) error
}

// ForwardKeepFunc is a Resident backend's ForwardKeep for one element type.
type ForwardKeepFunc[T Float] func(p Params, q, k, v, o, lse []T) (DeviceState, error)

// BackwardKeptFunc is a Resident backend's BackwardKept for one element type.
type BackwardKeptFunc[T Float] func(st DeviceState, p Params, do, dlse, dq, dk, dv []T) error

// ResidentEntryPoints returns r's ForwardKeep and BackwardKept for the
// element type T, as EntryPoints does for a Backend's plain entry points.
func ResidentEntryPoints[T Float](r Resident) (ForwardKeepFunc[T], BackwardKeptFunc[T]) {
	var zero T
	if _, ok := any(zero).(float32); ok {
		return any(ForwardKeepFunc[float32](r.ForwardKeep32)).(ForwardKeepFunc[T]),
			any(BackwardKeptFunc[float32](r.BackwardKept32)).(BackwardKeptFunc[T])
	}
	return any(ForwardKeepFunc[float64](r.ForwardKeep64)).(ForwardKeepFunc[T]),
		any(BackwardKeptFunc[float64](r.BackwardKept64)).(BackwardKeptFunc[T])
}
