//go:build flashgpu

package cudakernels

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

var _ kernels.Resident = (*Backend)(nil)

// Every call moves its tensors through a pipeline over chunks of (batch,
// head) pairs: the kernels take a flat grid over B·H pairs and every pair is
// independent, so a chunk is offset pointers and a smaller B·H, and results
// are bit-identical whatever the chunking. Chunk i runs on stream i mod 2:
// its host slices are copied to the device, computed, and its results
// copied back, while chunk i+1's copies and chunk i−1's run. The copy
// engines and the SMs thus work at the same time, and the op's wall time
// approaches the larger of the kernel time and the bus time. The copy
// engines read and write the caller's slices in place where the driver has
// them registered (hostPath registerReused: slices seen in an earlier
// call); the others go through page-locked staging, which the host fills
// and empties on several cores.
const (
	slots         = 2       // streams, staging halves and scratch buffers
	maxChunks     = 8       // more chunks shorten the exposed copies, but shrink the grids
	minChunkBytes = 8 << 20 // below this per chunk, launch and sync overheads win
	copyCores     = 16      // measured on the H200 host: 16 beat 8 by 5–15 % (BenchmarkCopyPipeline)
)

// transfers are the copy pipeline's resources, used on the worker's thread:
// streams and events per slot, page-locked staging and a device workspace,
// both kept between calls and grown to the largest call's need.
type transfers struct {
	streams     [slots]cu.Stream
	events      [slots]cu.Event
	pinned      unsafe.Pointer
	pinnedBytes int64
	work        cu.DevicePtr
	workBytes   int64
	pins        pinSet // caller memory registered with the driver
	// chunkOverride fixes the (batch, head) pairs per chunk, and
	// coresOverride the cores that copy, when positive; path chooses how
	// the caller's memory reaches the copy engines. Tests and benchmarks
	// set them to compare settings.
	chunkOverride, coresOverride int
	path                         hostPath
}

// hostPath is how the caller's slices meet the copy engines. Every path
// stages what it cannot register, so all give the same bits.
type hostPath int

const (
	// registerReused, the default, registers the caller's slices with the
	// driver (pinSet) from their second call on and keeps them registered
	// between calls, so that the copy engines move them directly, with no
	// copy on the host; the first sighting, and what the driver refuses,
	// is staged. On the H200 host (BenchmarkHostPaths, 2026-12-04) a
	// forward at D = 128, B·N = 16384 then takes 8.0–8.5 ms against
	// 19.8–20.4 staged, 1.06–1.12× its floor (the bus or the kernels).
	registerReused hostPath = iota
	// viaStaging copies every slice into page-locked staging on
	// copyCores cores; the copy engines touch staging only. Tests and
	// benchmarks compare the default with it.
	viaStaging
)

// open creates the streams and events.
func (x *transfers) open() (err error) {
	x.pins = newPinSet(registerHost, unregisterHost)
	for i := range x.streams {
		// Non-blocking: the legacy default stream must not serialise the
		// two slots.
		if x.streams[i], err = cu.MakeStream(cu.NonBlocking); err != nil {
			return fmt.Errorf("cudakernels: creating a stream: %w", err)
		}
		if x.events[i], err = cu.MakeEvent(cu.DisableTiming); err != nil {
			return fmt.Errorf("cudakernels: creating an event: %w", err)
		}
	}
	return nil
}

// release frees the memory, streams and events.
func (x *transfers) release() error {
	errs := []error{x.freeWork(), x.freePinned(), x.pins.clear()}
	for i := range x.streams {
		if x.events[i] != (cu.Event{}) {
			errs = append(errs, cu.DestroyEvent(&x.events[i]))
		}
		if x.streams[i] != (cu.Stream{}) {
			errs = append(errs, x.streams[i].Destroy())
			x.streams[i] = cu.Stream{}
		}
	}
	return errors.Join(errs...)
}

// A chunk is n (batch, head) pairs from h0, and the pipeline slot it uses.
type chunk struct{ h0, n, slot int }

// chunkHeads returns the pairs per chunk for a call over bh pairs that
// copies headBytes per pair.
func (x *transfers) chunkHeads(bh int, headBytes int64) int {
	if x.chunkOverride > 0 {
		return min(x.chunkOverride, bh)
	}
	n := (bh + maxChunks - 1) / maxChunks
	n = max(n, int((minChunkBytes+headBytes-1)/headBytes))
	return min(n, bh)
}

// chunkParams is p restricted to n (batch, head) pairs, as the chunk's
// dense tensors hold them: B = 1, H = n, and n / (H/Hkv) key heads. The
// lengths, ALiBi slopes and bias, indexed by the call's batch entries and
// heads, reach the kernels as device copies instead (variantArgs).
func chunkParams(p kernels.Params, n int) kernels.Params {
	if p.Hkv != 0 {
		p.Hkv = n / (p.H / p.Hkv)
	}
	p.B, p.H = 1, n
	// The lengths and slopes live on the device for the whole call
	// (variantArgs); the chunk keeps empty ones where the call has them,
	// so that kernel selection (requestFor's plain) still sees them.
	p.QLens, p.KLens, p.ALiBi = emptyIfSet(p.QLens), emptyIfSet(p.KLens), emptyIfSet(p.ALiBi)
	if p.Bias != nil {
		// The bias lives on the device for the whole call (variantArgs);
		// the chunk keeps one of no data, so that kernel selection
		// (requestFor) still sees it.
		p.Bias = &kernels.Bias{Bb: 1, Hb: 1}
	}
	return p
}

// emptyIfSet returns nil for nil, else an empty slice that is not nil.
func emptyIfSet[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return []T{}
}

// groupHeads rounds a chunk's pairs hc to whole key-head groups of p (a
// chunk must hold every query head of the key heads it holds), at least
// one group and at most every pair.
func groupHeads(p kernels.Params, hc int) int {
	g := p.H / p.KVHeads()
	return min(max(g, hc/g*g), p.B*p.H)
}

// staged is one tensor of a call: host holds per elements for each (batch,
// head) pair (nil for work space, which is never copied). On the device it
// is either whole (a kept state's copy: a chunk is an offset into it) or in
// chunk-sized buffers, one per slot: chunks of one slot run in order on one
// stream, so each reuses the buffer after the last.
//
// Key-like tensors under grouped-query attention hold one head per group
// of query pairs: group is the number of query pairs a head serves (0 or
// 1: one per pair), and chunks, made of whole groups, take a head per
// group.
type staged[T kernels.Float] struct {
	host  []T
	per   int
	group int
	whole cu.DevicePtr
	slot  [slots]cu.DevicePtr
}

// bytes is the size of one head's part.
func (t *staged[T]) bytes() int64 { return int64(t.per) * int64(elemSize[T]()) }

// heads is the number of t's heads that n query pairs from h0 cover.
func (t *staged[T]) heads(n int) int { return n / max(t.group, 1) }

// dev returns the device address of chunk c.
func (t *staged[T]) dev(c chunk) cu.DevicePtr {
	if t.whole != 0 {
		return t.whole + cu.DevicePtr(int64(t.heads(c.h0))*t.bytes())
	}
	return t.slot[c.slot]
}

// hostPart is the part of t's host slice that chunk c copies.
func (t *staged[T]) hostPart(c chunk) []T {
	return t.host[t.heads(c.h0)*t.per : t.heads(c.h0+c.n)*t.per]
}

// slotParts are the chunk buffers of hc pairs, for the workspace to carve.
func (t *staged[T]) slotParts(hc int) []part {
	n := int64(t.heads(hc)) * t.bytes()
	return []part{{&t.slot[0], n}, {&t.slot[1], n}}
}

// headBytes is what a call copies per (batch, head) pair, rounded down
// for tensors shared by a group: it sizes chunks, nothing more.
func headBytes[T kernels.Float](ts []*staged[T]) int64 {
	var n int64
	for _, t := range ts {
		n += t.bytes() / int64(max(t.group, 1))
	}
	return n
}

// pipeline copies in, runs launch and copies out chunk by chunk, over bh
// pairs in chunks of hc; see the comment at the top of this file. It runs on
// the worker's thread. When it returns, nothing it queued is still running.
func pipeline[T kernels.Float](x *transfers, bh, hc int, in, out []*staged[T], launch func(chunk, cu.Stream) error) (err error) {
	elem := int64(elemSize[T]())
	all := append(append([]*staged[T](nil), in...), out...)
	direct, err := register(x, all)
	defer func() {
		// After the synchronisation below: the copies must be done.
		err = errors.Join(err, x.pins.endCall())
	}()
	if err != nil {
		return err
	}
	sizes := make([]int64, len(all))
	for i, t := range all {
		if !direct[i] {
			sizes[i] = int64(t.heads(hc)) * t.bytes()
		}
	}
	offs, slotBytes := carveAll(0, sizes) // offsets into one slot's staging
	pin, err := x.staging(slots * slotBytes)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// Queued copies and kernels must not outlive the buffers the
			// caller frees or reuses next. A failure here is the one being
			// returned or follows from it.
			_ = cu.Synchronize()
		}
	}()
	// host is where the copy engines meet chunk c of tensor i: the
	// caller's slice when registered, else its part of staging.
	host := func(i int, c chunk) []T {
		if direct[i] {
			return all[i].hostPart(c)
		}
		return unsafe.Slice((*T)(unsafe.Add(pin, int64(c.slot)*slotBytes+int64(offs[i]))), all[i].heads(c.n)*all[i].per)
	}
	// Only staging is shared between the host and the copies in flight:
	// without it, each slot's chunks run in order on its stream, which is
	// all that reusing the slot's device buffers needs, and the host waits
	// once, at the end.
	staging := slices.Contains(direct, false)
	finish := func(c chunk) error {
		if err := x.events[c.slot].Synchronize(); err != nil {
			return fmt.Errorf("cudakernels: kernels or copies: %w", err)
		}
		for j, t := range out {
			if !direct[len(in)+j] {
				parallelCopy(t.hostPart(c), host(len(in)+j, c), x.copyCores())
			}
		}
		return nil
	}
	var prev chunk
	for i, h0 := 0, 0; h0 < bh; i, h0 = i+1, h0+hc {
		c := chunk{h0: h0, n: min(hc, bh-h0), slot: i % slots}
		s := x.streams[c.slot]
		for j, t := range in {
			src := host(j, c)
			if !direct[j] {
				parallelCopy(src, t.hostPart(c), x.copyCores())
			}
			if err := cu.MemcpyHtoDAsync(t.dev(c), unsafe.Pointer(&src[0]), int64(len(src))*elem, s); err != nil {
				return fmt.Errorf("cudakernels: copy to device: %w", err)
			}
		}
		if err := launch(c, s); err != nil {
			return err
		}
		for j, t := range out {
			dst := host(len(in)+j, c)
			if err := cu.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), t.dev(c), int64(len(dst))*elem, s); err != nil {
				return fmt.Errorf("cudakernels: copy from device: %w", err)
			}
		}
		if err := x.events[c.slot].Record(s); err != nil {
			return fmt.Errorf("cudakernels: recording an event: %w", err)
		}
		// The slot of chunk i−1 is free again once it is emptied; chunk i
		// keeps the device busy meanwhile.
		if i > 0 && (staging || h0+hc >= bh) {
			if err := finish(prev); err != nil {
				return err
			}
		}
		prev = c
	}
	return finish(prev)
}

// register returns, for each tensor of a call, whether the copy engines
// move it straight from or to the caller's slice: on a registering path,
// when the pinSet registers the slice; the others are staged.
func register[T kernels.Float](x *transfers, ts []*staged[T]) ([]bool, error) {
	direct := make([]bool, len(ts))
	if x.path == viaStaging {
		return direct, nil
	}
	for i, t := range ts {
		var err error
		if direct[i], err = x.pins.acquire(unsafe.Pointer(unsafe.SliceData(t.host)), int64(len(t.host))*int64(elemSize[T]())); err != nil {
			return nil, err
		}
	}
	return direct, nil
}

// copyCores returns how many cores copy between caller and staging memory.
func (x *transfers) copyCores() int {
	if x.coresOverride > 0 {
		return x.coresOverride
	}
	return copyCores
}

// parallelCopy copies src into dst on up to cores cores: one core's memcpy
// is slower than the bus, and would leave the copy engines waiting.
func parallelCopy[T any](dst, src []T, cores int) {
	parallelFor(len(src), cores, func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
}

// parallelFor runs body over [0, n) split into up to cores ranges, each on
// a goroutine of its own.
func parallelFor(n, cores int, body func(lo, hi int)) {
	const grain = 1 << 18 // elements; smaller pieces cost more to start than to copy
	w := min(runtime.GOMAXPROCS(0), cores, (n+grain-1)/grain)
	if w <= 1 {
		body(0, n)
		return
	}
	var wg sync.WaitGroup
	step := (n + w - 1) / w
	for lo := 0; lo < n; lo += step {
		wg.Go(func() { body(lo, min(lo+step, n)) })
	}
	wg.Wait()
}

// workspace carves parts out of one device allocation that is kept
// between calls: it grows to the largest call's need and stays until Trim
// or Close, so calls in a steady state allocate nothing.
func (x *transfers) workspace(parts ...part) error {
	if total := carve(0, parts...); total > x.workBytes {
		if err := x.freeWork(); err != nil {
			return err
		}
		p, err := cu.MemAlloc(total)
		if err != nil {
			return wrapAlloc(total, err)
		}
		x.work, x.workBytes = p, total
	}
	carve(x.work, parts...)
	return nil
}

func (x *transfers) freeWork() error {
	if x.workBytes == 0 {
		return nil
	}
	err := cu.MemFree(x.work)
	x.work, x.workBytes = 0, 0
	return err
}

// staging returns at least bytes of page-locked host memory, kept between
// calls like the workspace.
func (x *transfers) staging(bytes int64) (unsafe.Pointer, error) {
	if bytes > x.pinnedBytes {
		if err := x.freePinned(); err != nil {
			return nil, err
		}
		p, err := allocHost(bytes)
		if err != nil {
			return nil, err
		}
		x.pinned, x.pinnedBytes = p, bytes
	}
	return x.pinned, nil
}

func (x *transfers) freePinned() error {
	if x.pinnedBytes == 0 {
		return nil
	}
	err := cu.MemFreeHost(x.pinned)
	x.pinned, x.pinnedBytes = nil, 0
	return err
}

// Trim frees the device workspace and the page-locked staging memory the
// backend keeps between calls (each as large as the largest call so far
// needed), and unregisters the caller memory it keeps registered; the next
// call allocates them again. Device states from ForwardKeep are not
// affected.
func (b *Backend) Trim() error {
	return b.run(func() error { return errors.Join(b.xfer.freeWork(), b.xfer.freePinned(), b.xfer.pins.clear()) })
}

// MemInfo reports the free and total memory of the backend's device in
// bytes, as the driver counts it: for every context and process on it.
func (b *Backend) MemInfo() (free, total int64, err error) {
	err = b.run(func() (err error) {
		free, total, err = cu.MemInfo()
		return err
	})
	return free, total, err
}

// deviceState is the kernels.DeviceState of this backend: device copies of
// q, k, v, o and lse in one allocation.
type deviceState struct {
	b               *Backend
	p               kernels.Params
	elem            int
	q, k, v, o, lse cu.DevicePtr
	a               *arena // nil once released; read and written on the worker's thread
}

// Release frees the state's device memory. After Close it does nothing: the
// memory went with the context.
func (s *deviceState) Release() error {
	err := s.b.run(func() error {
		if s.a == nil {
			return nil
		}
		a := s.a
		s.a = nil
		return a.free()
	})
	if errors.Is(err, errClosed) {
		return nil
	}
	return err
}

// ForwardKeep32 implements kernels.Resident: Forward32, keeping the device
// copies of q, k, v, o and lse. In TF32, BF16 and FP16 mode, where the
// CUDA-core backward serves the head dimension, a later BackwardKept32
// rounds the kept q, k and v in place to the storage precision, as the
// forward rounded them; rounding again changes nothing.
func (b *Backend) ForwardKeep32(p kernels.Params, q, k, v, o, lse []float32) (kernels.DeviceState, error) {
	return forwardKeep(b, p, q, k, v, o, lse)
}

// ForwardKeep64 implements kernels.Resident: Forward64, keeping the device
// copies.
func (b *Backend) ForwardKeep64(p kernels.Params, q, k, v, o, lse []float64) (kernels.DeviceState, error) {
	return forwardKeep(b, p, q, k, v, o, lse)
}

func forwardKeep[T kernels.Float](b *Backend, p kernels.Params, q, k, v, o, lse []T) (kernels.DeviceState, error) {
	st, err := forward(b, p, q, k, v, o, lse, true)
	if err != nil {
		return nil, err // not a typed nil in an interface
	}
	return st, nil
}

// BackwardKept32 implements kernels.Resident: Backward32 on the inputs st
// holds, uploading only do.
func (b *Backend) BackwardKept32(st kernels.DeviceState, p kernels.Params, do, dlse, dq, dk, dv []float32) error {
	return backwardKept(b, st, p, do, dlse, dq, dk, dv)
}

// BackwardKept64 implements kernels.Resident: Backward64 on the inputs st
// holds, uploading only do.
func (b *Backend) BackwardKept64(st kernels.DeviceState, p kernels.Params, do, dlse, dq, dk, dv []float64) error {
	return backwardKept(b, st, p, do, dlse, dq, dk, dv)
}

func backwardKept[T kernels.Float](b *Backend, st kernels.DeviceState, p kernels.Params, do, dlse, dq, dk, dv []T) error {
	s, ok := st.(*deviceState)
	var zero T
	switch {
	case !ok || s == nil:
		return fmt.Errorf("%w: device state %T is not one of this package's", kernels.ErrInvalidParams, st)
	case s.b != b:
		return fmt.Errorf("%w: device state of another backend", kernels.ErrInvalidParams)
	case !s.p.Equal(p) || s.elem != int(unsafe.Sizeof(zero)):
		return fmt.Errorf("%w: device state of %+v with %d-byte elements, called with %+v and %d-byte elements",
			kernels.ErrInvalidParams, s.p, s.elem, p, unsafe.Sizeof(zero))
	}
	if err := p.Validate(); err != nil {
		return err
	}
	for _, t := range []struct {
		name    string
		n, want int
	}{{"do", len(do), p.QLen()}, {"dq", len(dq), p.QLen()}, {"dk", len(dk), p.KLen()}, {"dv", len(dv), p.KLen()}} {
		if t.n != t.want {
			return fmt.Errorf("%w: %s has %d elements, want %d", kernels.ErrInvalidParams, t.name, t.n, t.want)
		}
	}
	return backward(b, p, s, nil, nil, nil, nil, nil, do, dlse, dq, dk, dv)
}
