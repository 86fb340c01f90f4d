package autograd

import (
	"errors"
	"runtime"
	"sync"

	"github.com/gorgonia-flash/flashattention/kernels"
	"gorgonia.org/tensor"
)

// saved carries the forward's LSE to the backward of the same Op, and, on a
// backend that implements kernels.Resident, the forward's device copies of
// q, k, v, o and lse. Its zero value is empty; the forward stores into it at
// every run. An Op's shapes and dtype are fixed when it is built, so what is
// saved always fits the backward of the same Op.
//
// Device state lifetime: the forward keeps it only once SymDiff has built
// the backward nodes (keepOnDevice reports that), so a graph that is only
// run forward holds no device memory between runs. The backward takes it
// and releases it when done; a forward that runs again releases the state
// of its previous run; release drops it on demand; and when the saved value
// becomes unreachable the garbage collector releases what is left.
type saved struct {
	mu   sync.Mutex
	lse  *tensor.Dense // [B, H, Nq], the dtype of the inputs
	keep bool
	dev  *deviceSlot // allocated with the first device state
	// runs counts the forward runs begun; each takes the count before it
	// as its dropout offset, so that every run draws a fresh mask and a
	// seed gives the same sequence of masks. offset is the latest stored
	// run's, which its backward draws again.
	runs, offset uint64
}

// nextRun returns the dropout offset of a forward run that begins now.
func (s *saved) nextRun() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs++
	return s.runs - 1
}

// deviceSlot holds a device state apart from saved, so that a cleanup
// attached to the saved value can release it without keeping it alive.
type deviceSlot struct {
	mu sync.Mutex
	st kernels.DeviceState
}

// swap installs st (nil to empty the slot) and releases what it replaces.
func (d *deviceSlot) swap(st kernels.DeviceState) error {
	d.mu.Lock()
	old := d.st
	d.st = st
	d.mu.Unlock()
	if old == nil {
		return nil
	}
	return old.Release()
}

// take empties the slot and returns what it held.
func (d *deviceSlot) take() kernels.DeviceState {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.st
	d.st = nil
	return st
}

// store records the LSE and dropout offset of the latest forward run and
// its device state (nil when the forward kept none), releasing the device
// state of the previous run.
func (s *saved) store(lse *tensor.Dense, offset uint64, st kernels.DeviceState) error {
	s.mu.Lock()
	s.lse, s.offset = lse, offset
	if s.dev == nil && st == nil {
		s.mu.Unlock()
		return nil
	}
	if s.dev == nil {
		s.dev = new(deviceSlot)
		runtime.AddCleanup(s, func(d *deviceSlot) { _ = d.swap(nil) }, s.dev)
	}
	dev := s.dev
	s.mu.Unlock()
	return dev.swap(st)
}

// setKeep makes later forwards keep their device state for the backward.
func (s *saved) setKeep() {
	s.mu.Lock()
	s.keep = true
	s.mu.Unlock()
}

// keepOnDevice reports whether the forward should keep its device copies
// for the backward: true once SymDiff has built the backward nodes.
func (s *saved) keepOnDevice() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keep
}

// release frees the device state held, if any. The LSE stays, so a backward
// still runs; it uploads its inputs again.
func (s *saved) release() error {
	s.mu.Lock()
	dev := s.dev
	s.mu.Unlock()
	if dev == nil {
		return nil
	}
	return dev.swap(nil)
}

// takeDevice removes and returns the device state, for the backward to use
// and release; nil when there is none.
func (s *saved) takeDevice() kernels.DeviceState {
	s.mu.Lock()
	dev := s.dev
	s.mu.Unlock()
	if dev == nil {
		return nil
	}
	return dev.take()
}

// errNoForward reports a backward run without its forward.
var errNoForward = errors.New("attention backward ran before its forward: no saved LSE")

// load returns the saved LSE and dropout offset.
func (s *saved) load() (*tensor.Dense, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lse == nil {
		return nil, 0, errNoForward
	}
	return s.lse, s.offset, nil
}
