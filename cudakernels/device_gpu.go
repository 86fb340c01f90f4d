//go:build flashgpu

package cudakernels

// #cgo LDFLAGS: -lcuda
// #include <cuda.h>
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"gorgonia.org/cu"
)

// A worker owns one OS thread with the backend's CUDA context current on it.
// A CUDA context is bound to a thread, while goroutines move between threads,
// so every driver call of a Backend runs as a job on this thread.
type worker struct {
	jobs chan func()
	done chan struct{}
}

// startWorker locks a new goroutine to its thread, runs open there and, if
// open succeeds, serves jobs until stop. shutdown runs on the same thread after
// the last job.
func startWorker(open, shutdown func() error) (*worker, error) {
	w := &worker{jobs: make(chan func()), done: make(chan struct{})}
	opened := make(chan error, 1)
	go func() {
		// Never unlocked: when this goroutine returns, the runtime ends the
		// thread, so no other goroutine inherits its CUDA state.
		runtime.LockOSThread()
		defer close(w.done)
		if err := open(); err != nil {
			opened <- err
			return
		}
		opened <- nil
		for job := range w.jobs {
			job()
		}
		// The context is gone after this; there is no caller left to tell
		// about a failure.
		_ = shutdown()
	}()
	if err := <-opened; err != nil {
		<-w.done
		return nil, err
	}
	return w, nil
}

// do runs fn on the worker's thread and returns its error.
func (w *worker) do(fn func() error) error {
	errc := make(chan error, 1)
	w.jobs <- func() { errc <- fn() }
	return <-errc
}

// stop ends the worker after the jobs already queued.
func (w *worker) stop() {
	close(w.jobs)
	<-w.done
}

// gorgonia.org/cu v0.9.6 wraps neither cuFuncSetAttribute nor the opt-in
// shared-memory limit, which kernels using more than 48 KiB of dynamic shared
// memory need. Its Function is a struct holding only the CUfunction handle;
// the constants below fail to compile if that ever changes size.
const (
	_ = uintptr(unsafe.Sizeof(cu.Function{}) - unsafe.Sizeof(C.CUfunction(nil)))
	_ = uintptr(unsafe.Sizeof(C.CUfunction(nil)) - unsafe.Sizeof(cu.Function{}))
)

// setMaxDynamicSmem allows fn to be launched with up to bytes of dynamic
// shared memory.
func setMaxDynamicSmem(fn cu.Function, bytes int) error {
	h := *(*C.CUfunction)(unsafe.Pointer(&fn))
	if r := C.cuFuncSetAttribute(h, C.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, C.int(bytes)); r != C.CUDA_SUCCESS {
		return fmt.Errorf("cuFuncSetAttribute(max dynamic shared memory = %d): CUDA error %d", bytes, int(r))
	}
	return nil
}

// maxOptinSmem is the most shared memory one block may use on dev.
func maxOptinSmem(dev cu.Device) (int, error) {
	var v C.int
	if r := C.cuDeviceGetAttribute(&v, C.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, C.CUdevice(dev)); r != C.CUDA_SUCCESS {
		return 0, fmt.Errorf("cuDeviceGetAttribute(max shared memory per block, opt-in): CUDA error %d", int(r))
	}
	return int(v), nil
}

// wrapAlloc marks allocation failures for lack of memory with ErrOutOfMemory,
// keeping the driver's error in the chain.
func wrapAlloc(bytes int64, err error) error {
	if errors.Is(err, cu.OutOfMemory) {
		return fmt.Errorf("%w: allocating %d bytes: %w", ErrOutOfMemory, bytes, err)
	}
	return fmt.Errorf("cudakernels: allocating %d bytes: %w", bytes, err)
}

// part is one piece of a carved allocation: its size in bytes and where
// carve stores its address.
type part struct {
	at    *cu.DevicePtr
	bytes int64
}

// carve places parts one after the other from base, each at a multiple of
// 256 bytes (the alignment cuMemAlloc guarantees and vectorised kernels
// rely on), stores their addresses and returns the total size. With base 0
// it measures, and the addresses are offsets. Every allocation of the
// package is cut this way: arenas, the workspace, staging and scratch.
func carve(base cu.DevicePtr, parts ...part) int64 {
	const align = 256
	var total int64
	for _, p := range parts {
		*p.at = base + cu.DevicePtr(total)
		total += (p.bytes + align - 1) / align * align
	}
	return total
}

// carveAll carves len(sizes) parts from base and returns their addresses
// and the total size.
func carveAll(base cu.DevicePtr, sizes []int64) ([]cu.DevicePtr, int64) {
	at := make([]cu.DevicePtr, len(sizes))
	parts := make([]part, len(sizes))
	for i, s := range sizes {
		parts[i] = part{&at[i], s}
	}
	return at, carve(base, parts...)
}

// arena is one device allocation carved into parts, so a call costs one
// cuMemAlloc and one cuMemFree.
type arena struct {
	base cu.DevicePtr
}

// newArena allocates room for parts and stores their addresses.
func newArena(parts ...part) (*arena, error) {
	total := carve(0, parts...)
	base, err := cu.MemAlloc(total)
	if err != nil {
		return nil, wrapAlloc(total, err)
	}
	carve(base, parts...)
	return &arena{base: base}, nil
}

func (a *arena) free() error { return cu.MemFree(a.base) }

// allocHost allocates bytes of page-locked host memory, which the copy
// engines read and write directly, so that copies from and to it run
// asynchronously at full bus speed. gorgonia.org/cu v0.9.6 wraps
// cuMemFreeHost but not cuMemAllocHost.
func allocHost(bytes int64) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	switch r := C.cuMemAllocHost(&p, C.size_t(bytes)); r {
	case C.CUDA_SUCCESS:
		return p, nil
	case C.CUDA_ERROR_OUT_OF_MEMORY:
		return nil, fmt.Errorf("%w: allocating %d bytes of page-locked host memory", ErrOutOfMemory, bytes)
	default:
		return nil, fmt.Errorf("cudakernels: allocating %d bytes of page-locked host memory: CUDA error %d", bytes, int(r))
	}
}

// registerHost page-locks the n bytes of caller memory at p for the
// current context (cuMemHostRegister), so that the copy engines read and
// write it directly and asynchronously. gorgonia.org/cu v0.9.6 wraps
// neither this nor unregisterHost. Registration fails for pages already
// registered, by this context or another.
func registerHost(p unsafe.Pointer, n int64) error {
	if r := C.cuMemHostRegister(p, C.size_t(n), 0); r != C.CUDA_SUCCESS {
		return fmt.Errorf("cudakernels: registering %d bytes of host memory: CUDA error %d", n, int(r))
	}
	return nil
}

// unregisterHost undoes registerHost(p, …).
func unregisterHost(p unsafe.Pointer) error {
	if r := C.cuMemHostUnregister(p); r != C.CUDA_SUCCESS {
		return fmt.Errorf("cudakernels: unregistering host memory: CUDA error %d", int(r))
	}
	return nil
}

// probe finds device ordinal and what kernel selection needs to know of it.
func probe(ordinal int) (cu.Device, Capability, error) {
	dev, err := cu.GetDevice(ordinal)
	if err != nil {
		return dev, Capability{}, fmt.Errorf("%w: %w", ErrNoDevice, err)
	}
	var c Capability
	if c.Major, err = dev.Attribute(cu.ComputeCapabilityMajor); err != nil {
		return dev, c, fmt.Errorf("cudakernels: device %d: %w", ordinal, err)
	}
	if c.Minor, err = dev.Attribute(cu.ComputeCapabilityMinor); err != nil {
		return dev, c, fmt.Errorf("cudakernels: device %d: %w", ordinal, err)
	}
	if c.MaxSmem, err = maxOptinSmem(dev); err != nil {
		return dev, c, err
	}
	if c.SMs, err = dev.Attribute(cu.MultiprocessorCount); err != nil {
		return dev, c, fmt.Errorf("cudakernels: device %d: %w", ordinal, err)
	}
	return dev, c, nil
}
