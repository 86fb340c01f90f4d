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
	fwd                 fwdKernel
	dkdv, dq            cu.Function
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
	ks.fwd = fwdKernel{name: "flash_fwd_simt_" + suffix, rows: ks.tile, threads: ks.tile * 8, smem: ks.fwdSmem}
	var err error
	if ks.fwd.fn, err = lookup(mod, ks.fwd.name, ks.fwdSmem, maxSmem); err != nil {
		return nil, err
	}
	if ks.dkdv, err = lookup(mod, "flash_bwd_dkdv_simt_"+suffix, ks.bwdSmem, maxSmem); err != nil {
		return nil, err
	}
	if ks.dq, err = lookup(mod, "flash_bwd_dq_simt_"+suffix, ks.bwdSmem, maxSmem); err != nil {
		return nil, err
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
// scratch is fwdKernel.scratchBytes of device memory for the tensor-core
// forward's 16-bit copies of Q, K and V (unused by the CUDA-core one).
type fwdBuffers struct{ q, k, v, o, lse, scratch cu.DevicePtr }

type bwdBuffers struct {
	q, k, v, o, lse, do, delta, dq, dk, dv cu.DevicePtr
	scratch                                cu.DevicePtr // backwardScratchBytes
}

// A fwdKernel is a forward kernel of either family with its launch shape:
// one block per rows query rows of one (batch, head). The CUDA-core kernels
// take the fp32 tensors; the tensor-core ones take 16-bit copies of Q, K and
// V with rows padded to paddedDim, which toHalf writes into the scratch
// buffer first. Both share the rest of the argument list of csrc/flash.cu.
type fwdKernel struct {
	fn            cu.Function
	name          string
	rows, threads int
	smem          int // dynamic shared memory in bytes

	toHalf    *cu.Function // nil for the CUDA-core kernels
	paddedDim int
}

// scratchParts returns the byte sizes of the 16-bit copies of Q, K and V, or
// nil when the kernel needs none.
func (f *fwdKernel) scratchParts(p kernels.Params) []int64 {
	if f.toHalf == nil {
		return nil
	}
	bh, dp := int64(p.B)*int64(p.H), int64(f.paddedDim)
	kv := bh * int64(p.Nk) * dp * 2
	return []int64{bh * int64(p.Nq) * dp * 2, kv, kv}
}

// scratchBytes is the size of fwdBuffers.scratch the kernel needs.
func (f *fwdKernel) scratchBytes(p kernels.Params) int64 {
	var n int64
	for _, s := range f.scratchParts(p) {
		n += alignScratch(s)
	}
	return n
}

const scratchAlign = 256

// launch enqueues the forward (after the conversions into scratch, for the
// tensor-core kernels) on stream.
func (f *fwdKernel) launch(p kernels.Params, buf fwdBuffers, stream cu.Stream) error {
	grid, err := gridFor(p, p.Nq, f.rows)
	if err != nil {
		return err
	}
	q, k, v := buf.q, buf.k, buf.v
	if f.toHalf != nil {
		ptrs := []*cu.DevicePtr{&q, &k, &v}
		srcs := []cu.DevicePtr{buf.q, buf.k, buf.v}
		rows := []int{p.Nq, p.Nk, p.Nk}
		off := buf.scratch
		for i, s := range f.scratchParts(p) {
			*ptrs[i] = off
			off += cu.DevicePtr(alignScratch(s))
			if err := launchToHalf(*f.toHalf, srcs[i], *ptrs[i], p, rows[i], f.paddedDim, stream); err != nil {
				return err
			}
		}
	}
	return f.fn.Launch(grid, 1, 1, f.threads, 1, 1, f.smem, stream, args(
		q, k, v, buf.o, buf.lse,
		int64(p.Nq), int64(p.Nk), int64(p.D), bool64(p.Causal), p.Scale))
}

// lookup finds name in mod and allows it smem bytes of dynamic shared
// memory.
func lookup(mod cu.Module, name string, smem, maxSmem int) (cu.Function, error) {
	fn, err := mod.Function(name)
	if err != nil {
		return fn, fmt.Errorf("cudakernels: kernel %s: %w", name, err)
	}
	if smem > maxSmem {
		return fn, fmt.Errorf("%w: kernel %s needs %d bytes of shared memory, the device allows %d", ErrUnsupported, name, smem, maxSmem)
	}
	if err := setMaxDynamicSmem(fn, smem); err != nil {
		return fn, fmt.Errorf("cudakernels: kernel %s: %w", name, err)
	}
	return fn, nil
}

// mmaVerifiedDim is the largest padded head dimension whose tensor-core
// forward has passed the checks on a device; csrc/flash.cu builds none
// larger.
const mmaVerifiedDim = 128

// The tensor-core forward's block shape (csrc/fwd_mma.cuh: kFwdBQ query
// rows, kFwdThreads threads, key tiles of mmaBK) and its shared-memory layout
// (fwd_smem_bytes) in bytes: Q plus two K and two V tiles of 16-bit
// elements, rows padded to dp + 8.
const (
	mmaBQ      = 128
	mmaThreads = 128
	mmaBK      = 64
)

func mmaFwdSmem(dp int) int { return (mmaBQ + 4*mmaBK) * (dp + 8) * 2 }

// loadMmaForward looks up the tensor-core forward for precision prec (BF16
// or FP16) and padded head dimension dp, with its conversion kernel. A
// kernel that does not fit the device's shared memory yields an error
// wrapping ErrUnsupported, returned by calls that need it.
func loadMmaForward(mod cu.Module, prec Precision, dp, maxSmem int) (*fwdKernel, error) {
	f := &fwdKernel{name: fmt.Sprintf("flash_fwd_mma_%v_d%d", prec, dp), rows: mmaBQ, threads: mmaThreads,
		smem: mmaFwdSmem(dp), paddedDim: dp}
	name := "flash_to_half_" + prec.String()
	conv, err := mod.Function(name)
	if err != nil {
		return nil, fmt.Errorf("cudakernels: kernel %s: %w", name, err)
	}
	f.toHalf = &conv
	f.fn, err = lookup(mod, f.name, f.smem, maxSmem)
	return f, err
}

// launchBackward enqueues the three backward kernels: D = rowsum(dO∘O), then
// dK and dV per key tile, then dQ per query tile.
func (ks *simtKernels) launchBackward(dotDoO cu.Function, p kernels.Params, buf bwdBuffers, stream cu.Stream) error {
	gridK, err := gridFor(p, p.Nk, ks.tile)
	if err != nil {
		return err
	}
	gridQ, err := gridFor(p, p.Nq, ks.tile)
	if err != nil {
		return err
	}
	if err := launchDotDoO(dotDoO, p, buf, stream); err != nil {
		return err
	}
	shape := []any{int64(p.Nq), int64(p.Nk), int64(p.D), bool64(p.Causal), p.Scale}
	if err := ks.dkdv.Launch(gridK, 1, 1, ks.tile*8, 1, 1, ks.bwdSmem, stream, args(append([]any{
		buf.q, buf.k, buf.v, buf.do, buf.lse, buf.delta, buf.dk, buf.dv}, shape...)...)); err != nil {
		return err
	}
	return ks.dq.Launch(gridQ, 1, 1, ks.tile*8, 1, 1, ks.bwdSmem, stream, args(append([]any{
		buf.q, buf.k, buf.v, buf.do, buf.lse, buf.delta, buf.dq}, shape...)...))
}

// launchDotDoO enqueues D = rowsum(dO∘O) into buf.delta.
func launchDotDoO(fn cu.Function, p kernels.Params, buf bwdBuffers, stream cu.Stream) error {
	rows := int64(p.B) * int64(p.H) * int64(p.Nq)
	const rowsPerBlock = 256 // one thread per row
	return fn.Launch(int((rows+rowsPerBlock-1)/rowsPerBlock), 1, 1, rowsPerBlock, 1, 1, 0, stream, args(
		buf.o, buf.do, buf.delta, rows, int64(p.D)))
}

// launchRound enqueues the storage rounding of n float32 elements at x in
// place (csrc/round.cuh; a grid-stride loop, so any grid covers n).
func launchRound(fn cu.Function, x cu.DevicePtr, n int, stream cu.Stream) error {
	const threads, maxBlocks = 256, 4096
	blocks := min((n+threads-1)/threads, maxBlocks)
	if blocks == 0 {
		return nil
	}
	return fn.Launch(blocks, 1, 1, threads, 1, 1, 0, stream, args(x, int64(n)))
}
