package cudakernels

import (
	"errors"
	"runtime"
	"slices"
	"testing"
	"unsafe"
)

// fakeDriver stands in for cuMemHostRegister: it refuses a page registered
// twice, and pages in refuse, as the driver does for memory registered by
// someone else.
type fakeDriver struct {
	page    uintptr
	locked  map[uintptr]int64 // registered base → bytes
	refuse  map[uintptr]bool  // pages
	calls   int
	failUnr bool
}

func (d *fakeDriver) pages(p uintptr, n int64) (lo, hi uintptr) {
	return p &^ (d.page - 1), (p + uintptr(n) + d.page - 1) &^ (d.page - 1)
}

func (d *fakeDriver) register(p unsafe.Pointer, n int64) error {
	d.calls++
	lo, hi := d.pages(uintptr(p), n)
	for pg := lo; pg < hi; pg += d.page {
		if d.refuse[pg] {
			return errors.New("already registered")
		}
	}
	for base, m := range d.locked {
		if blo, bhi := d.pages(base, m); blo < hi && lo < bhi {
			return errors.New("already registered")
		}
	}
	d.locked[uintptr(p)] = n
	return nil
}

func (d *fakeDriver) unregister(p unsafe.Pointer) error {
	if d.failUnr {
		return errors.New("unregister failed")
	}
	if _, ok := d.locked[uintptr(p)]; !ok {
		return errors.New("not registered")
	}
	delete(d.locked, uintptr(p))
	return nil
}

func newFake(t *testing.T) (*fakeDriver, *pinSet) {
	d := &fakeDriver{page: 4096, locked: map[uintptr]int64{}, refuse: map[uintptr]bool{}}
	s := newPinSet(d.register, d.unregister)
	s.page, s.min, s.sighting = d.page, 1, 1
	t.Cleanup(func() {
		d.failUnr = false
		if err := s.clear(); err != nil {
			t.Error(err)
		}
		if len(d.locked) != 0 || s.bytes != 0 {
			t.Errorf("after clear: %d registrations, %d bytes", len(d.locked), s.bytes)
		}
	})
	return d, &s
}

func acquire(t *testing.T, s *pinSet, x []float32) bool {
	t.Helper()
	ok, err := s.acquire(unsafe.Pointer(unsafe.SliceData(x)), int64(len(x))*4)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func endCall(t *testing.T, s *pinSet) {
	t.Helper()
	if err := s.endCall(); err != nil {
		t.Fatal(err)
	}
}

// TestPinSetReuse: a slice, or a part of it, passed again finds its
// registration while kept; after clear it registers afresh.
func TestPinSetReuse(t *testing.T) {
	d, s := newFake(t)
	x := make([]float32, 1<<16)
	for _, part := range [][]float32{x, x, x[100:2000]} { // the slice twice, then a part of it
		if !acquire(t, s, part) {
			t.Fatal("not registered")
		}
	}
	if d.calls != 1 {
		t.Fatalf("%d registrations within a call, want 1", d.calls)
	}
	endCall(t, s)
	if !acquire(t, s, x) || d.calls != 1 {
		t.Fatalf("kept: %d registrations, want 1", d.calls)
	}
	if err := s.clear(); err != nil {
		t.Fatal(err)
	}
	if len(d.locked) != 0 {
		t.Fatalf("%d registrations left after clear", len(d.locked))
	}
	if !acquire(t, s, x) || d.calls != 2 {
		t.Fatalf("after clear: %d registrations, want 2", d.calls)
	}
}

// TestPinSetSecondSighting: at the default sighting, a slice is staged in
// the first call that passes it and registered in the next one within
// pinKeepCalls calls; a slice seen once, then not for pinKeepCalls calls,
// starts over.
func TestPinSetSecondSighting(t *testing.T) {
	d, s := newFake(t)
	s.sighting = pinSighting
	x, y := make([]float32, 1<<12), make([]float32, 1<<12)
	for range 2 { // twice within the call: still its first sighting
		if acquire(t, s, x) {
			t.Fatal("x registered at its first call")
		}
	}
	acquire(t, s, y)
	endCall(t, s)
	if !acquire(t, s, x) || d.calls != 1 {
		t.Fatalf("x at its second call: %d registrations, want 1", d.calls)
	}
	endCall(t, s)
	for range pinKeepCalls {
		endCall(t, s)
	}
	if acquire(t, s, y) {
		t.Fatalf("y registered %d calls after its first sighting", pinKeepCalls+1)
	}
	if len(s.seen) != 1 {
		t.Fatalf("%d sightings remembered, want y's alone", len(s.seen))
	}
}

// TestPinSetSharedPages: slices on the pages of a slice this call
// registered are staged; an older registration on those pages makes room.
func TestPinSetSharedPages(t *testing.T) {
	d, s := newFake(t)
	buf := make([]float32, 3<<12)  // 12 pages of 4 KiB
	a, b := buf[:5000], buf[5000:] // share a page
	if !acquire(t, s, a) {
		t.Fatal("a: not registered")
	}
	if acquire(t, s, b) {
		t.Fatal("b shares a page with a, registered in the same call")
	}
	endCall(t, s)
	if !acquire(t, s, b) {
		t.Fatal("b: not registered once a is from an earlier call")
	}
	if len(s.entries) != 1 || len(d.locked) != 1 {
		t.Fatalf("%d entries, %d registrations, want a replaced by b", len(s.entries), len(d.locked))
	}
	// The whole buffer replaces b, which it contains.
	endCall(t, s)
	if !acquire(t, s, buf) || !acquire(t, s, a) || !acquire(t, s, b) {
		t.Fatal("buf and its parts: not registered")
	}
	if len(s.entries) != 1 || s.bytes != int64(len(buf))*4 {
		t.Fatalf("%d entries of %d bytes, want buf alone", len(s.entries), s.bytes)
	}
}

// TestPinSetRefused: memory the driver refuses, and small slices, are
// staged, and leave nothing behind.
func TestPinSetRefused(t *testing.T) {
	d, s := newFake(t)
	x := make([]float32, 1<<12)
	d.refuse[uintptr(unsafe.Pointer(&x[0]))&^(d.page-1)] = true
	if acquire(t, s, x) {
		t.Fatal("refused memory reported registered")
	}
	if len(s.entries) != 0 || s.bytes != 0 {
		t.Fatalf("%d entries, %d bytes after a refusal", len(s.entries), s.bytes)
	}
	s.min = minPinBytes
	if acquire(t, s, make([]float32, 1<<10)) {
		t.Fatal("a 4 KiB slice registered")
	}
	if acquire(t, s, nil) {
		t.Fatal("an empty slice registered")
	}
}

// TestPinSetKeepBounds: registrations unused for pinKeepCalls calls go, and
// the least recently used while more than keepBytes are kept.
func TestPinSetKeepBounds(t *testing.T) {
	d, s := newFake(t)
	x, y := make([]float32, 1<<12), make([]float32, 1<<12)
	acquire(t, s, x)
	acquire(t, s, y)
	endCall(t, s)
	for range pinKeepCalls {
		acquire(t, s, x)
		endCall(t, s)
	}
	if len(d.locked) != 1 || len(s.entries) != 1 || s.entries[0].lo != uintptr(unsafe.Pointer(&x[0])) {
		t.Fatalf("%d registrations, want x's alone after %d calls without y", len(d.locked), pinKeepCalls)
	}
	z := make([]float32, 1<<12)
	s.keepBytes = int64(len(z)) * 4
	acquire(t, s, z)
	acquire(t, s, x) // x, used last, stays
	endCall(t, s)
	if len(s.entries) != 1 || s.entries[0].lo != uintptr(unsafe.Pointer(&x[0])) || s.bytes != s.keepBytes {
		t.Fatalf("%d entries of %d bytes, want x's alone within %d bytes", len(s.entries), s.bytes, s.keepBytes)
	}
}

// TestPinSetUnregisterFails: the error reaches the caller, the entry is
// gone from the set, and its object stays pinned without the runtime
// panicking over a collected Pinner (stuckPins keeps it).
func TestPinSetUnregisterFails(t *testing.T) {
	d, s := newFake(t)
	x := make([]float32, 1<<12)
	acquire(t, s, x)
	d.failUnr = true
	if err := s.clear(); err == nil {
		t.Fatal("a failed unregistration reported no error")
	}
	if len(s.entries) != 0 || s.bytes != 0 {
		t.Fatalf("%d entries, %d bytes left", len(s.entries), s.bytes)
	}
	d.failUnr = false
	// The fake still holds x; the real driver might too, and x stays pinned.
	delete(d.locked, uintptr(unsafe.Pointer(&x[0])))
	stuckPins.Lock()
	stuck := slices.ContainsFunc(stuckPins.entries, func(e *pinEntry) bool { return e.p == unsafe.Pointer(&x[0]) })
	stuckPins.Unlock()
	if !stuck {
		t.Fatal("the entry that failed to unregister is not in stuckPins")
	}
	// A Pinner collected while pinning panics in the finalizer goroutine.
	runtime.GC()
	runtime.GC()
}
