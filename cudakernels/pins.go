package cudakernels

import (
	"errors"
	"os"
	"runtime"
	"slices"
	"sync"
	"unsafe"
)

// minPinBytes is the smallest tensor whose memory is registered rather
// than staged: a registration costs a driver call and a walk over the
// pages whatever the size, and a small slice may share a page with other
// objects, which the driver refuses to lock twice.
const minPinBytes = 1 << 20

// Registrations kept between calls: those used in the last pinKeepCalls
// calls, so that a forward and its backward find each other's tensors, but
// slices the caller allocates afresh for every call (a graph's outputs) are
// held for a few calls only; and never more than pinKeepBytes of them,
// least recently used first out.
//
// A slice is registered at its second sighting within pinKeepCalls calls,
// not its first: registering costs more than staging (on the H200 host,
// 4.1 ms to register 134 MB and 2.1 ms to unregister it, against 3.2 ms to
// stage it on 16 cores), so it pays only for memory that comes back.
const (
	pinKeepCalls = 4
	pinKeepBytes = 16 << 30
	pinSighting  = 2
)

// pinSet is the caller memory that the driver has page-locked for the copy
// engines (cuMemHostRegister), so that they read and write it directly
// instead of going through staging. It is used on the worker's thread.
//
// An entry pins its Go object (runtime.Pinner) while the driver holds its
// pages: the object can be neither freed nor moved, so its pages cannot be
// reused for another object or returned to the system while the
// registration still points at them, and a later call on the same slice
// finds the same memory.
type pinSet struct {
	register   func(p unsafe.Pointer, n int64) error
	unregister func(p unsafe.Pointer) error
	page       uintptr
	// min is the smallest slice registered, keepBytes the most kept
	// between calls and sighting the sighting that registers a slice:
	// minPinBytes, pinKeepBytes and pinSighting, which tests change.
	min, keepBytes int64
	sighting       int

	entries []*pinEntry // least recently used first
	seen    []sighted   // slices staged in the last pinKeepCalls calls
	bytes   int64
	call    int // serial of the current call
}

// sighted is a slice that acquire staged, and how often in a row.
type sighted struct {
	lo, hi uintptr
	times  int
	last   int // serial of the last call that staged it
}

// stuckPins keeps, for the process's lifetime, the entries whose
// unregistration failed (drop), whatever becomes of their pinSet.
var stuckPins struct {
	sync.Mutex
	entries []*pinEntry
}

type pinEntry struct {
	p      unsafe.Pointer
	lo, hi uintptr // registered bytes
	pin    runtime.Pinner
	last   int // serial of the last call that used it
}

func newPinSet(register func(unsafe.Pointer, int64) error, unregister func(unsafe.Pointer) error) pinSet {
	return pinSet{register: register, unregister: unregister, page: uintptr(os.Getpagesize()),
		min: minPinBytes, keepBytes: pinKeepBytes, sighting: pinSighting}
}

// acquire reports whether the n bytes at p are registered for the current
// call, registering them if no entry holds them. It reports false, for the
// caller to stage the slice, when the slice is small, before its sighting-th
// sighting in calls no further apart than pinKeepCalls, when it shares a page
// with memory that another of this call's slices registered, or when the
// driver refuses (memory someone else registered, the system's limits); an
// error only when unregistering an older entry on those pages failed.
func (s *pinSet) acquire(p unsafe.Pointer, n int64) (bool, error) {
	if n < s.min || n <= 0 {
		return false, nil
	}
	lo, hi := uintptr(p), uintptr(p)+uintptr(n)
	for i, e := range s.entries {
		if e.lo <= lo && hi <= e.hi {
			e.last = s.call
			s.entries = append(slices.Delete(s.entries, i, i+1), e)
			return true, nil
		}
	}
	if !s.sight(lo, hi) {
		return false, nil
	}
	// The driver locks whole pages and refuses a page twice: entries on
	// the same pages go first, unless this call uses them.
	plo, phi := lo&^(s.page-1), (hi+s.page-1)&^(s.page-1)
	shares := func(e *pinEntry) bool { return e.lo < phi && plo < e.hi }
	var errs []error
	for _, e := range s.entries {
		if shares(e) && e.last == s.call {
			return false, nil
		}
	}
	s.entries = slices.DeleteFunc(s.entries, func(e *pinEntry) bool {
		if shares(e) {
			errs = append(errs, s.drop(e))
			return true
		}
		return false
	})
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	e := &pinEntry{p: p, lo: lo, hi: hi, last: s.call}
	e.pin.Pin(p)
	if err := s.register(p, n); err != nil {
		e.pin.Unpin()
		return false, nil
	}
	s.entries = append(s.entries, e)
	s.bytes += n
	return true, nil
}

// sight counts a sighting of the bytes [lo, hi) that no entry holds and
// reports whether it is the one that registers them.
func (s *pinSet) sight(lo, hi uintptr) bool {
	i := slices.IndexFunc(s.seen, func(v sighted) bool { return v.lo == lo && v.hi == hi })
	if i < 0 {
		s.seen = append(s.seen, sighted{lo: lo, hi: hi, last: s.call - 1})
		i = len(s.seen) - 1
	}
	v := &s.seen[i]
	if v.last != s.call {
		v.times++
		v.last = s.call
	}
	if v.times < s.sighting {
		return false
	}
	s.seen = slices.Delete(s.seen, i, i+1)
	return true
}

// endCall ends the current call, whose copies must have completed: entries
// used in the last pinKeepCalls calls stay registered, within keepBytes,
// and sightings older than that are forgotten.
func (s *pinSet) endCall() error {
	var errs []error
	bytes := s.bytes
	s.entries = slices.DeleteFunc(s.entries, func(e *pinEntry) bool {
		// Least recently used first: the oldest go while over the limit.
		if s.call-e.last < pinKeepCalls && bytes <= s.keepBytes {
			return false
		}
		bytes -= int64(e.hi - e.lo)
		errs = append(errs, s.drop(e))
		return true
	})
	s.seen = slices.DeleteFunc(s.seen, func(v sighted) bool { return s.call-v.last >= pinKeepCalls })
	s.call++
	return errors.Join(errs...)
}

// clear unregisters every entry and forgets every sighting.
func (s *pinSet) clear() error {
	var errs []error
	for _, e := range s.entries {
		errs = append(errs, s.drop(e))
	}
	s.entries, s.seen = nil, nil
	return errors.Join(errs...)
}

// drop unregisters e and unpins its object; the caller removes it from
// entries. When the driver fails to unregister, the object stays pinned
// for good (the driver may still hold its pages), and its entry goes to
// stuckPins: the runtime panics when it collects a Pinner that still pins.
func (s *pinSet) drop(e *pinEntry) error {
	s.bytes -= int64(e.hi - e.lo)
	if err := s.unregister(e.p); err != nil {
		stuckPins.Lock()
		stuckPins.entries = append(stuckPins.entries, e)
		stuckPins.Unlock()
		return err
	}
	e.pin.Unpin()
	return nil
}
