package autograd

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/gorgonia-flash/flashattention/kernels"
	"gorgonia.org/tensor"
)

// Config is what fixes an attention op's result, apart from its inputs.
type Config struct {
	Backend kernels.Backend
	Scale   float64 // already resolved: never the "default" placeholder
	Causal  bool
}

// String identifies the configuration completely; ops hash it, because
// gorgonia merges nodes whose hashes are equal.
func (c Config) String() string {
	return fmt.Sprintf("scale=%v causal=%v backend=%s", c.Scale, c.Causal, c.Backend.Name())
}

// Params combines c with the shapes of q ([B,H,Nq,D]) and k ([B,H,Nk,D]).
func (c Config) Params(q, k tensor.Shape) (kernels.Params, error) {
	if q.Dims() != 4 || k.Dims() != 4 {
		return kernels.Params{}, fmt.Errorf("%w: q has shape %v and k %v, want [B, H, N, D]", kernels.ErrInvalidParams, q, k)
	}
	return kernels.Params{B: q[0], H: q[1], Nq: q[2], Nk: k[2], D: q[3], Scale: c.Scale, Causal: c.Causal}, nil
}

// Saved carries the forward's LSE to the backward of the same op, and, on a
// backend that implements kernels.Resident, the forward's device copies of
// q, k, v, o and lse. Its zero value is empty; the forward stores into it at
// every run.
//
// Device state lifetime: the forward keeps it only once Gradient has built
// the backward nodes (KeepOnDevice reports that), so a graph that is only
// run forward holds no device memory between runs. The backward takes it
// and releases it when done; a forward that runs again releases the state
// of its previous run; Release drops it on demand; and when the Saved
// becomes unreachable the garbage collector releases what is left.
type Saved struct {
	mu   sync.Mutex
	lse  tensor.Tensor // [B, H, Nq], the dtype of the inputs
	keep bool
	dev  *deviceSlot // allocated with the first device state
}

// deviceSlot holds a device state apart from Saved, so that a cleanup
// attached to the Saved can release it without keeping the Saved alive.
type deviceSlot struct {
	mu sync.Mutex
	st kernels.DeviceState
	dt tensor.Dtype
	p  kernels.Params
}

// swap installs st (nil to empty the slot) and releases what it replaces.
func (d *deviceSlot) swap(st kernels.DeviceState, p kernels.Params, dt tensor.Dtype) error {
	d.mu.Lock()
	old := d.st
	d.st, d.p, d.dt = st, p, dt
	d.mu.Unlock()
	if old == nil {
		return nil
	}
	return old.Release()
}

// Store records the LSE of the latest forward run and its device state (nil
// when the forward kept none), releasing the device state of the previous
// run. p and the LSE's dtype identify the problem the state belongs to.
func (s *Saved) Store(lse tensor.Tensor, p kernels.Params, st kernels.DeviceState) error {
	s.mu.Lock()
	s.lse = lse
	if s.dev == nil && st == nil {
		s.mu.Unlock()
		return nil
	}
	if s.dev == nil {
		s.dev = new(deviceSlot)
		runtime.AddCleanup(s, func(d *deviceSlot) { _ = d.swap(nil, kernels.Params{}, tensor.Dtype{}) }, s.dev)
	}
	dev := s.dev
	s.mu.Unlock()
	return dev.swap(st, p, lse.Dtype())
}

// KeepOnDevice reports whether the forward should keep its device copies for
// the backward: true once Gradient has built the backward nodes.
func (s *Saved) KeepOnDevice() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keep
}

// Release frees the device state held, if any. The LSE stays, so a backward
// still runs; it uploads its inputs again.
func (s *Saved) Release() error {
	s.mu.Lock()
	dev := s.dev
	s.mu.Unlock()
	if dev == nil {
		return nil
	}
	return dev.swap(nil, kernels.Params{}, tensor.Dtype{})
}

// takeDevice removes and returns the device state if it belongs to p and
// dt, for the backward to use and release; nil otherwise.
func (s *Saved) takeDevice(p kernels.Params, dt tensor.Dtype) kernels.DeviceState {
	s.mu.Lock()
	dev := s.dev
	s.mu.Unlock()
	if dev == nil {
		return nil
	}
	dev.mu.Lock()
	defer dev.mu.Unlock()
	if dev.st == nil || dev.p != p || dev.dt != dt {
		return nil
	}
	st := dev.st
	dev.st = nil
	return st
}

// errNoForward reports a backward run without its forward.
var errNoForward = errors.New("attention backward ran before its forward: no saved LSE")

// load returns the saved LSE, checking it fits p.
func (s *Saved) load(p kernels.Params, dt tensor.Dtype) (tensor.Tensor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lse == nil {
		return nil, errNoForward
	}
	if s.lse.Dtype() != dt || s.lse.Shape().TotalSize() != p.LSELen() {
		return nil, fmt.Errorf("attention backward: saved LSE is %v %v, want %v of %d elements (was the forward run on these inputs?)",
			s.lse.Dtype(), s.lse.Shape(), dt, p.LSELen())
	}
	return s.lse, nil
}

// Dense returns the contiguous backing of a Gorgonia value, copying a view
// that is not contiguous.
func Dense(v any) (*tensor.Dense, error) {
	d, ok := v.(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("attention: got a %T, want a *tensor.Dense", v)
	}
	if d.RequiresIterator() {
		return d.Materialize().(*tensor.Dense), nil
	}
	return d, nil
}
