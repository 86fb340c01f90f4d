//go:build flashgpu

package cudakernels

import (
	"fmt"
	"math"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// headDims are the head dimensions kernels are compiled for. A problem's D is
// padded up to the next one inside the kernel (zero columns add nothing to
// dot products and are not written back).
var headDims = []int{32, 64, 128, 256}

// paddedDim returns the compiled head dimension that serves d.
func paddedDim(d int) (int, error) {
	for _, dp := range headDims {
		if d <= dp {
			return dp, nil
		}
	}
	return 0, fmt.Errorf("%w: %w: head dimension %d, at most %d", kernels.ErrInvalidParams, ErrUnsupported, d, headDims[len(headDims)-1])
}

// simtKernels are the CUDA-core kernels for one element type and padded head
// dimension.
type simtKernels struct {
	fwd, dkdv, dq       cu.Function
	tile                int // rows per tile; blocks have tile·8 threads
	fwdSmem, bwdSmem    int // dynamic shared memory in bytes
	elemSize, paddedDim int
}

// simtTile mirrors the tile sizes instantiated in csrc/flash.cu.
func simtTile(elemSize, dp int) int {
	if elemSize == 8 && dp == 256 {
		return 16
	}
	return 32
}

// The shared-memory layouts of csrc/simt_tile.cuh (fwd_smem_elems,
// bwd_smem_elems), in bytes. The kernels trap if launched with less.
func simtFwdSmem(elemSize, dp, tile int) int {
	return elemSize * (3*tile*(dp+1) + tile*(tile+1))
}

func simtBwdSmem(elemSize, dp, tile int) int {
	return elemSize * (4*tile*(dp+1) + 2*tile*(tile+1) + 2*tile)
}

func typeName(elemSize int) string {
	if elemSize == 8 {
		return "f64"
	}
	return "f32"
}

// loadSimt looks up and configures the CUDA-core kernels of one element type
// and head dimension in mod.
func loadSimt(mod cu.Module, elemSize, dp, maxSmem int) (*simtKernels, error) {
	ks := &simtKernels{tile: simtTile(elemSize, dp), elemSize: elemSize, paddedDim: dp}
	ks.fwdSmem = simtFwdSmem(elemSize, dp, ks.tile)
	ks.bwdSmem = simtBwdSmem(elemSize, dp, ks.tile)
	suffix := fmt.Sprintf("%s_d%d", typeName(elemSize), dp)
	for _, k := range []struct {
		fn   *cu.Function
		name string
		smem int
	}{
		{&ks.fwd, "flash_fwd_simt_" + suffix, ks.fwdSmem},
		{&ks.dkdv, "flash_bwd_dkdv_simt_" + suffix, ks.bwdSmem},
		{&ks.dq, "flash_bwd_dq_simt_" + suffix, ks.bwdSmem},
	} {
		fn, err := mod.Function(k.name)
		if err != nil {
			return nil, fmt.Errorf("cudakernels: kernel %s: %w", k.name, err)
		}
		if k.smem > maxSmem {
			// Only reachable on devices with less shared memory than sm_80.
			return nil, fmt.Errorf("%w: kernel %s needs %d bytes of shared memory, the device allows %d", ErrUnsupported, k.name, k.smem, maxSmem)
		}
		if err := setMaxDynamicSmem(fn, k.smem); err != nil {
			return nil, fmt.Errorf("cudakernels: kernel %s: %w", k.name, err)
		}
		*k.fn = fn
	}
	return ks, nil
}

// gridFor returns the number of blocks covering rows in tiles for every
// (batch, head), or an error past the grid's limit.
func gridFor(p kernels.Params, rows, tile int) (int, error) {
	n := int64(p.B) * int64(p.H) * int64((rows+tile-1)/tile)
	if n > math.MaxInt32 {
		return 0, fmt.Errorf("%w: %w: %d thread blocks, more than a grid holds", kernels.ErrInvalidParams, ErrUnsupported, n)
	}
	return int(n), nil
}

// args converts kernel arguments to the form cu.Function.Launch takes. Every
// value must be 8 bytes (pointer, int64 or float64): Launch copies 8 bytes per
// argument.
func args(vals ...any) []unsafe.Pointer {
	out := make([]unsafe.Pointer, len(vals))
	for i, v := range vals {
		switch v := v.(type) {
		case cu.DevicePtr:
			out[i] = unsafe.Pointer(&v)
		case int64:
			out[i] = unsafe.Pointer(&v)
		case float64:
			out[i] = unsafe.Pointer(&v)
		default:
			panic(fmt.Sprintf("cudakernels: kernel argument %d has type %T, want cu.DevicePtr, int64 or float64", i, v))
		}
	}
	return out
}

func bool64(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// fwdBuffers and bwdBuffers are device pointers of one call's tensors.
type fwdBuffers struct{ q, k, v, o, lse cu.DevicePtr }

type bwdBuffers struct {
	q, k, v, o, lse, do, delta, dq, dk, dv cu.DevicePtr
}

// launchForward enqueues the forward kernel on the default stream.
func (ks *simtKernels) launchForward(p kernels.Params, buf fwdBuffers) error {
	grid, err := gridFor(p, p.Nq, ks.tile)
	if err != nil {
		return err
	}
	return ks.fwd.Launch(grid, 1, 1, ks.tile*8, 1, 1, ks.fwdSmem, cu.Stream{}, args(
		buf.q, buf.k, buf.v, buf.o, buf.lse,
		int64(p.Nq), int64(p.Nk), int64(p.D), bool64(p.Causal), p.Scale))
}

// launchBackward enqueues the three backward kernels: D = rowsum(dO∘O), then
// dK and dV per key tile, then dQ per query tile.
func (ks *simtKernels) launchBackward(dotDoO cu.Function, p kernels.Params, buf bwdBuffers) error {
	gridK, err := gridFor(p, p.Nk, ks.tile)
	if err != nil {
		return err
	}
	gridQ, err := gridFor(p, p.Nq, ks.tile)
	if err != nil {
		return err
	}
	rows := int64(p.B) * int64(p.H) * int64(p.Nq)
	const rowsPerBlock = 256 // one thread per row
	if err := dotDoO.Launch(int((rows+rowsPerBlock-1)/rowsPerBlock), 1, 1, rowsPerBlock, 1, 1, 0, cu.Stream{}, args(
		buf.o, buf.do, buf.delta, rows, int64(p.D))); err != nil {
		return err
	}
	shape := []any{int64(p.Nq), int64(p.Nk), int64(p.D), bool64(p.Causal), p.Scale}
	if err := ks.dkdv.Launch(gridK, 1, 1, ks.tile*8, 1, 1, ks.bwdSmem, cu.Stream{}, args(append([]any{
		buf.q, buf.k, buf.v, buf.do, buf.lse, buf.delta, buf.dk, buf.dv}, shape...)...)); err != nil {
		return err
	}
	return ks.dq.Launch(gridQ, 1, 1, ks.tile*8, 1, 1, ks.bwdSmem, cu.Stream{}, args(append([]any{
		buf.q, buf.k, buf.v, buf.do, buf.lse, buf.delta, buf.dq}, shape...)...))
}
