//go:build flashgpu

package ring

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/gorgonia-flash/flashattention/op"
)

// cudaError describes a CUDA driver result.
func cudaError(what string, r C.CUresult) error {
	return fmt.Errorf("ring: CUDA %s: error %d", what, int(r))
}

// deviceThread is a locked OS thread with a CUDA device's primary context
// current and a stream of its own, running jobs one at a time, with two
// device buffers that stage a transfer's outgoing and incoming bytes. The
// GPU transports (NCCL, DeviceRing) each run one per rank; everything that
// touches the device goes through do.
type deviceThread struct {
	jobs      chan func()
	done      chan struct{}
	closeOnce sync.Once
	// Owned by the thread:
	ctx        C.CUcontext
	dev        C.CUdevice
	stream     C.CUstream
	send, recv C.CUdeviceptr
	capacity   int // bytes of send and of recv
}

// startDeviceThread starts the thread on CUDA device ordinal device; once
// the context and the stream exist it runs then (nil for nothing more), and
// reports on opened whether both succeeded. A failed thread has ended.
func startDeviceThread(device int, then func(*deviceThread) error) (t *deviceThread, opened <-chan error) {
	t = &deviceThread{jobs: make(chan func()), done: make(chan struct{})}
	ch := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine, and with it
		// the context current on it.
		runtime.LockOSThread()
		defer close(t.done)
		err := t.open(device)
		if err == nil && then != nil {
			if err = then(t); err != nil {
				err = errors.Join(err, t.release())
			}
		}
		ch <- err
		if err != nil {
			return
		}
		for job := range t.jobs {
			job()
		}
	}()
	return t, ch
}

// open makes the device's primary context current and creates the stream.
func (t *deviceThread) open(device int) error {
	if r := C.cuInit(0); r != C.CUDA_SUCCESS {
		return cudaError("cuInit", r)
	}
	if r := C.cuDeviceGet(&t.dev, C.int(device)); r != C.CUDA_SUCCESS {
		return cudaError(fmt.Sprintf("cuDeviceGet(%d)", device), r)
	}
	if r := C.cuDevicePrimaryCtxRetain(&t.ctx, t.dev); r != C.CUDA_SUCCESS {
		return cudaError("cuDevicePrimaryCtxRetain", r)
	}
	if r := C.cuCtxSetCurrent(t.ctx); r != C.CUDA_SUCCESS {
		return errors.Join(cudaError("cuCtxSetCurrent", r), t.release())
	}
	if r := C.cuStreamCreate(&t.stream, C.CU_STREAM_NON_BLOCKING); r != C.CUDA_SUCCESS {
		return errors.Join(cudaError("cuStreamCreate", r), t.release())
	}
	return nil
}

// release frees the buffers, the stream and the context, on the thread.
func (t *deviceThread) release() error {
	var errs []error
	for _, p := range []*C.CUdeviceptr{&t.send, &t.recv} {
		if *p != 0 {
			if r := C.cuMemFree(*p); r != C.CUDA_SUCCESS {
				errs = append(errs, cudaError("cuMemFree", r))
			}
			*p = 0
		}
	}
	t.capacity = 0
	if t.stream != nil {
		if r := C.cuStreamDestroy(t.stream); r != C.CUDA_SUCCESS {
			errs = append(errs, cudaError("cuStreamDestroy", r))
		}
		t.stream = nil
	}
	if t.ctx != nil {
		if r := C.cuDevicePrimaryCtxRelease(t.dev); r != C.CUDA_SUCCESS {
			errs = append(errs, cudaError("cuDevicePrimaryCtxRelease", r))
		}
		t.ctx = nil
	}
	return errors.Join(errs...)
}

// do runs fn on the thread; closed is the error once the thread has ended.
func (t *deviceThread) do(fn func() error, closed error) error {
	errc := make(chan error, 1)
	select {
	case t.jobs <- func() { errc <- fn() }:
		return <-errc
	case <-t.done:
		return closed
	}
}

// close runs first (nil for nothing) and release on the thread, then ends
// it; later calls do nothing.
func (t *deviceThread) close(first func() error, closed error) error {
	var err error
	t.closeOnce.Do(func() {
		err = t.do(func() error {
			var e error
			if first != nil {
				e = first()
			}
			return errors.Join(e, t.release())
		}, closed)
		close(t.jobs)
		<-t.done
	})
	return err
}

// reserve grows the staging buffers to hold n bytes each.
func (t *deviceThread) reserve(n int) error {
	if n <= t.capacity {
		return nil
	}
	for _, p := range []*C.CUdeviceptr{&t.send, &t.recv} {
		if *p != 0 {
			if r := C.cuMemFree(*p); r != C.CUDA_SUCCESS {
				return cudaError("cuMemFree", r)
			}
			*p = 0
		}
		if r := C.cuMemAlloc(p, C.size_t(n)); r != C.CUDA_SUCCESS {
			t.capacity = 0
			return cudaError(fmt.Sprintf("cuMemAlloc(%d)", n), r)
		}
	}
	t.capacity = n
	return nil
}

// upload enqueues the copy of parts, one after the other, into dst.
func (t *deviceThread) upload(dst C.CUdeviceptr, parts [][]byte) error {
	off := C.CUdeviceptr(0)
	for _, p := range parts {
		if len(p) > 0 {
			if r := C.cuMemcpyHtoDAsync(dst+off, unsafe.Pointer(&p[0]), C.size_t(len(p)), t.stream); r != C.CUDA_SUCCESS {
				return cudaError("cuMemcpyHtoDAsync", r)
			}
		}
		off += C.CUdeviceptr(len(p))
	}
	return nil
}

// download enqueues the copy of src into parts, one after the other.
func (t *deviceThread) download(parts [][]byte, src C.CUdeviceptr) error {
	off := C.CUdeviceptr(0)
	for _, p := range parts {
		if len(p) > 0 {
			if r := C.cuMemcpyDtoHAsync(unsafe.Pointer(&p[0]), src+off, C.size_t(len(p)), t.stream); r != C.CUDA_SUCCESS {
				return cudaError("cuMemcpyDtoHAsync", r)
			}
		}
		off += C.CUdeviceptr(len(p))
	}
	return nil
}

// wait polls the stream until its work is done; stop, polled in between,
// returns non-nil to give up (the ring failed, a deadline passed).
// Polling, not cuStreamSynchronize, so that work that never completes (a
// peer that never sends) cannot block the thread for ever.
func (t *deviceThread) wait(stop func() error) error {
	for {
		switch r := C.cuStreamQuery(t.stream); r {
		case C.CUDA_SUCCESS:
			return nil
		case C.CUDA_ERROR_NOT_READY:
		default:
			return cudaError("stream", r)
		}
		if err := stop(); err != nil {
			return err
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// stopper returns the stop function of wait for rank's transfer: the
// ring's failure, or ctx's end (ErrTimeout on a deadline).
func stopper(ctx context.Context, f *failure, what string, rank int) func() error {
	return func() error {
		select {
		case <-f.failed:
			return f.cause
		case <-ctx.Done():
			err := fmt.Errorf("ring: %s rank %d: %w", what, rank, ctx.Err())
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				err = fmt.Errorf("%w: %w", ErrTimeout, err)
			}
			return err
		default:
			return nil
		}
	}
}

// DeviceRing returns the transports of a ring of size ranks sharing CUDA
// device ordinal device, to be used by one goroutine each: the one-GPU
// stand-in for a ring of GPUs, which runs the GPU backends, the merges and
// every transfer's device copies as a ring of devices would, on one. Each
// rank has its own thread, stream and device buffers. A transfer uploads
// the sender's parts to its buffer on the sender's stream, copies them
// device to device into the receiver's buffer on the receiver's stream,
// and downloads them there; a header (part count, bytes, a hash of the
// part lengths) travels with them, so that a size mismatch is an error on
// both sides. Close every transport when done.
func DeviceRing(size, device int) ([]Transport, error) {
	if size < 1 {
		return nil, invalid("a ring of %d ranks", size)
	}
	g := &deviceGroup{f: newFailure(), inbox: make([]chan *deviceParcel, size)}
	ts := make([]*DeviceTransport, size)
	var errs []error
	for r := range size {
		g.inbox[r] = make(chan *deviceParcel, 1)
		th, opened := startDeviceThread(device, nil)
		if err := <-opened; err != nil {
			errs = append(errs, fmt.Errorf("ring: device rank %d: %w", r, err))
			break
		}
		ts[r] = &DeviceTransport{rank: r, size: size, g: g, th: th}
	}
	if len(errs) > 0 {
		for _, t := range ts {
			if t != nil {
				errs = append(errs, t.Close())
			}
		}
		return nil, errors.Join(errs...)
	}
	out := make([]Transport, size)
	for r, t := range ts {
		out[r] = t
	}
	return out, nil
}

// deviceGroup is what the ranks of a DeviceRing share.
type deviceGroup struct {
	f     *failure
	inbox []chan *deviceParcel // inbox[r]: the parcel rank r is to receive
}

// deviceParcel is one message in the sender's device buffer: its header,
// and delivered, which the receiver closes once its copy is done (if the
// copy fails the ring fails instead, and the sender learns of it so).
type deviceParcel struct {
	at        C.CUdeviceptr
	header    [3]uint64
	delivered chan struct{}
}

// DeviceTransport is one rank of a DeviceRing.
type DeviceTransport struct {
	rank, size int
	g          *deviceGroup
	th         *deviceThread
}

var _ Transport = (*DeviceTransport)(nil)

func (t *DeviceTransport) Rank() int { return t.rank }
func (t *DeviceTransport) Size() int { return t.size }

// Fail implements Transport.
func (t *DeviceTransport) Fail(cause error) { t.g.f.fail(t.rank, cause) }

func (t *DeviceTransport) closed() error { return fmt.Errorf("ring: device rank %d is closed", t.rank) }

// Close frees the rank's device memory, stream and thread; later calls do
// nothing. Use it once every rank is done with the ring.
func (t *DeviceTransport) Close() error { return t.th.close(nil, t.closed()) }

// SendRecv implements Transport.
func (t *DeviceTransport) SendRecv(ctx context.Context, send, recv [][]byte) error {
	f := t.g.f
	select {
	case <-f.failed:
		return f.cause
	default:
	}
	stop := stopper(ctx, f, "device", t.rank)
	ns, nr := 0, 0
	for _, p := range send {
		ns += len(p)
	}
	for _, p := range recv {
		nr += len(p)
	}
	// The send buffer is this rank's until its parcel is delivered, the
	// receive buffer until this call returns.
	if err := t.th.do(func() error {
		if err := t.th.reserve(max(ns, nr)); err != nil {
			return err
		}
		if err := t.th.upload(t.th.send, send); err != nil {
			return err
		}
		return t.th.wait(stop)
	}, t.closed()); err != nil {
		t.Fail(err)
		return err
	}
	mine := &deviceParcel{at: t.th.send, header: header(send), delivered: make(chan struct{})}
	select {
	case t.g.inbox[(t.rank+1)%t.size] <- mine:
	case <-f.failed:
		return f.cause
	case <-ctx.Done():
		return t.fail(stop())
	}
	var theirs *deviceParcel
	select {
	case theirs = <-t.g.inbox[t.rank]:
	case <-f.failed:
		return f.cause
	case <-ctx.Done():
		return t.fail(stop())
	}
	if want := header(recv); theirs.header != want {
		err := fmt.Errorf("ring: rank %d: %w: %d parts of %d bytes sent, %d of %d expected (do the ranks agree on the problem and the layout?)",
			t.rank, op.ErrInvalidInput, theirs.header[0], theirs.header[1], want[0], want[1])
		t.Fail(err)
		return err
	}
	if err := t.th.do(func() error {
		if nr > 0 {
			if r := C.cuMemcpyDtoDAsync(t.th.recv, theirs.at, C.size_t(nr), t.th.stream); r != C.CUDA_SUCCESS {
				return cudaError("cuMemcpyDtoDAsync", r)
			}
		}
		if err := t.th.download(recv, t.th.recv); err != nil {
			return err
		}
		return t.th.wait(stop)
	}, t.closed()); err != nil {
		t.Fail(err)
		return err
	}
	close(theirs.delivered)
	select {
	case <-mine.delivered:
		return nil
	case <-f.failed:
		return f.cause
	case <-ctx.Done():
		return t.fail(stop())
	}
}

// fail fails the ring with err (from stopper, non-nil once ctx is done)
// and returns the error.
func (t *DeviceTransport) fail(err error) error {
	if err == nil {
		err = fmt.Errorf("ring: device rank %d: stopped", t.rank)
	}
	t.Fail(err)
	return err
}
