//go:build flashgpu

package cudakernels

/*
#include <cuda.h>

// flash_launch launches f with the bytes at params as its parameter buffer:
// how a kernel taking one struct by value receives it.
static CUresult flash_launch(CUfunction f, unsigned grid, unsigned threads, unsigned smem, CUstream stream,
                             void* params, size_t size) {
	void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
	return cuLaunchKernel(f, grid, 1, 1, threads, 1, 1, smem, stream, NULL, extra);
}
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// gorgonia.org/cu's Function.Launch copies 8 bytes per argument, so it
// cannot pass a struct; launch calls cuLaunchKernel itself. cu.Stream, like
// cu.Function (device_gpu.go), is a struct holding only the handle; the
// constants fail to compile if that ever changes size.
const (
	_ = uintptr(unsafe.Sizeof(cu.Stream{}) - unsafe.Sizeof(C.CUstream(nil)))
	_ = uintptr(unsafe.Sizeof(C.CUstream(nil)) - unsafe.Sizeof(cu.Stream{}))
)

// launch enqueues fn on stream over grid blocks of threads threads with smem
// bytes of dynamic shared memory, its one argument being kp (Params).
func launch(fn cu.Function, grid, threads, smem int, stream cu.Stream, kp *kernelParams) error {
	return launchWith(fn, grid, threads, smem, stream, kp)
}

// launchWith is launch for a kernel whose arguments are more than Params:
// args is a struct of the kernel's arguments in order, laid out as the
// kernel's parameter buffer is (each field 8 bytes, Params first).
func launchWith[T any](fn cu.Function, grid, threads, smem int, stream cu.Stream, args *T) error {
	h := *(*C.CUfunction)(unsafe.Pointer(&fn))
	s := *(*C.CUstream)(unsafe.Pointer(&stream))
	// args holds numbers only, so cgo lets C read it for the duration of
	// the call; the driver copies the buffer before cuLaunchKernel returns.
	r := C.flash_launch(h, C.uint(grid), C.uint(threads), C.uint(smem), s, unsafe.Pointer(args), C.size_t(unsafe.Sizeof(*args)))
	if r != C.CUDA_SUCCESS {
		return fmt.Errorf("cuLaunchKernel: CUDA error %d", int(r))
	}
	return nil
}

// launchFlat enqueues one of the element-wise conversion kernels, whose
// arguments are a few pointers and integers, with gorgonia.org/cu's
// launcher: every value must be 8 bytes (cu.DevicePtr or int64).
func launchFlat(fn cu.Function, grid, threads int, stream cu.Stream, vals ...any) error {
	args := make([]unsafe.Pointer, len(vals))
	for i, v := range vals {
		switch v := v.(type) {
		case cu.DevicePtr:
			args[i] = unsafe.Pointer(&v)
		case int64:
			args[i] = unsafe.Pointer(&v)
		default:
			panic(fmt.Sprintf("cudakernels: kernel argument %d has type %T, want cu.DevicePtr or int64", i, v))
		}
	}
	return fn.Launch(grid, 1, 1, threads, 1, 1, 0, stream, args)
}

// gridFor returns the number of blocks covering rows in tiles for every
// (batch, head), or an error past the grid's limit.
func gridFor(p kernels.Params, rows, tile int) (int, error) {
	return gridOver(int64(p.B)*int64(p.H), rows, tile)
}

// gridOver is gridFor over pairs (batch, head) pairs: blocks of tile rows
// each.
func gridOver(pairs int64, rows, tile int) (int, error) {
	n := pairs * int64((rows+tile-1)/tile)
	if n > math.MaxInt32 {
		return 0, fmt.Errorf("%w: %w: %d thread blocks, more than a grid holds", kernels.ErrInvalidParams, ErrUnsupported, n)
	}
	return int(n), nil
}

// backwardGrids returns the grids of a backward's two kernels: blocks of
// rows keys of each key head for dK and dV (a block sums the gradients of
// every query head of its group), blocks of rows queries for dQ.
func backwardGrids(p kernels.Params, rows int) (gridK, gridQ int, err error) {
	if gridK, err = gridOver(int64(p.B)*int64(p.KVHeads()), p.Nk, rows); err != nil {
		return 0, 0, err
	}
	gridQ, err = gridFor(p, p.Nq, rows)
	return gridK, gridQ, err
}

// lookup finds name in mod, a kernel that needs smem bytes of dynamic
// shared memory, and allows it the device's maxSmem less its static shared
// memory. Allowing the most, not smem: choices of other launch shapes look
// up the same kernel (the mma.sync plain forward comes with a _full choice
// whose blocks need less), and the attribute is the function's, so the
// last lookup's would hold for every launch. A launch's occupancy follows
// the bytes it asks for, not the attribute.
func lookup(mod cu.Module, name string, smem, maxSmem int) (cu.Function, error) {
	fn, err := mod.Function(name)
	if err != nil {
		return fn, fmt.Errorf("cudakernels: kernel %s: %w", name, err)
	}
	// The kernel's own __shared__ variables come out of the same budget:
	// the driver refuses a dynamic limit that leaves them no room.
	static, err := fn.Attribute(cu.SharedSizeBytes)
	if err != nil {
		return fn, fmt.Errorf("cudakernels: kernel %s: static shared memory: %w", name, err)
	}
	if smem+static > maxSmem {
		return fn, fmt.Errorf("%w: kernel %s needs %d bytes of shared memory (%d of them static), the device allows %d", ErrUnsupported, name, smem+static, static, maxSmem)
	}
	if err := setMaxDynamicSmem(fn, maxSmem-static); err != nil {
		return fn, fmt.Errorf("cudakernels: kernel %s: %w", name, err)
	}
	return fn, nil
}

// function finds name in mod (a kernel without dynamic shared memory).
func function(mod cu.Module, name string) (cu.Function, error) {
	fn, err := mod.Function(name)
	if err != nil {
		return fn, fmt.Errorf("cudakernels: kernel %s: %w", name, err)
	}
	return fn, nil
}

// dense is a tensor at ptr: rows rows of d elements per head.
func dense(ptr cu.DevicePtr, rows, d int) tensorAt {
	return tensorAt{ptr: uint64(ptr), rows: int64(rows), ld: int64(d)}
}
