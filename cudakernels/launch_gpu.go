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

// A forwardKernel enqueues a forward, with the conversions its operands
// need, on a stream; scratchBytes is the size of fwdBuffers.scratch it
// needs for p.
type forwardKernel interface {
	scratchBytes(p kernels.Params) int64
	launch(p kernels.Params, buf fwdBuffers, stream cu.Stream) error
}

// A fwdKernel is a forward kernel of either family with its launch shape:
// one block per rows query rows of one (batch, head). The CUDA-core kernels
// take the fp32 tensors; the tensor-core ones take copies of Q, K and V in
// their operand type, rows padded to paddedDim, which the conversion kernels
// write into the scratch buffer first (V transposed with permuted keys for
// TF32: csrc/mma.cuh). Both share the rest of the argument list of
// csrc/flash.cu.
type fwdKernel struct {
	fn            cu.Function
	name          string
	rows, threads int
	smem          int // dynamic shared memory in bytes

	toStorage *cu.Function // Q, K (and V unless toVt is set); nil for the CUDA-core kernels
	toVt      *cu.Function // TF32: V transposed
	elemBytes int          // of the converted copies
	paddedDim int
}

// scratchParts returns the byte sizes of the converted copies of Q, K and V,
// or nil when the kernel needs none.
func (f *fwdKernel) scratchParts(p kernels.Params) []int64 {
	if f.toStorage == nil {
		return nil
	}
	bh, dp, eb := int64(p.B)*int64(p.H), int64(f.paddedDim), int64(f.elemBytes)
	k := bh * int64(p.Nk) * dp * eb
	v := k
	if f.toVt != nil {
		v = bh * dp * transposedKeys(p.Nk) * eb
	}
	return []int64{bh * int64(p.Nq) * dp * eb, k, v}
}

// transposedKeys is the row length of TF32's transposed V: nk rounded up to
// the 8 keys its permutation works on.
func transposedKeys(nk int) int64 { return (int64(nk) + 7) / 8 * 8 }

// scratchBytes is the size of fwdBuffers.scratch the kernel needs.
func (f *fwdKernel) scratchBytes(p kernels.Params) int64 { return scratchTotal(f.scratchParts(p)) }

// Scratch memory is carved into consecutive parts, each starting at a
// multiple of scratchAlign bytes.
const scratchAlign = 256

func alignScratch(n int64) int64 { return (n + scratchAlign - 1) / scratchAlign * scratchAlign }

// scratchTotal is the scratch size that holds parts (byte sizes).
func scratchTotal(parts []int64) int64 {
	var n int64
	for _, s := range parts {
		n += alignScratch(s)
	}
	return n
}

// carveScratch returns where each of parts starts in the scratch at base.
func carveScratch(base cu.DevicePtr, parts []int64) []cu.DevicePtr {
	at := make([]cu.DevicePtr, len(parts))
	for i, s := range parts {
		at[i] = base
		base += cu.DevicePtr(alignScratch(s))
	}
	return at
}

// launch enqueues the forward (after the conversions into scratch, for the
// tensor-core kernels) on stream.
func (f *fwdKernel) launch(p kernels.Params, buf fwdBuffers, stream cu.Stream) error {
	grid, err := gridFor(p, p.Nq, f.rows)
	if err != nil {
		return err
	}
	q, k, v := buf.q, buf.k, buf.v
	if f.toStorage != nil {
		at := carveScratch(buf.scratch, f.scratchParts(p))
		q, k, v = at[0], at[1], at[2]
		vectorWidth := 16 / f.elemBytes
		for _, c := range []struct {
			src, dst cu.DevicePtr
			rows     int
		}{{buf.q, q, p.Nq}, {buf.k, k, p.Nk}} {
			if err := launchToStorage(*f.toStorage, c.src, c.dst, p, c.rows, f.paddedDim, vectorWidth, stream); err != nil {
				return err
			}
		}
		if f.toVt != nil {
			err = launchToVt(*f.toVt, buf.v, v, p, f.paddedDim, stream)
		} else {
			err = launchToStorage(*f.toStorage, buf.v, v, p, p.Nk, f.paddedDim, vectorWidth, stream)
		}
		if err != nil {
			return err
		}
	}
	return f.fn.Launch(grid, 1, 1, f.threads, 1, 1, f.smem, stream, args(
		q, k, v, buf.o, buf.lse,
		int64(p.Nq), int64(p.Nk), int64(p.D), bool64(p.Causal), p.Scale))
}

// launchToStorage enqueues the conversion of the [B·H·rows, D] float32
// matrix at src into the [B·H·rows, dp] matrix at dst of the operand type
// (zero columns past D); each thread converts vectorWidth elements (16
// bytes of output).
func launchToStorage(fn cu.Function, src, dst cu.DevicePtr, p kernels.Params, rows, dp, vectorWidth int, stream cu.Stream) error {
	n := int64(p.B) * int64(p.H) * int64(rows)
	const threads, maxBlocks = 256, 8192
	chunks := n * int64(dp) / int64(vectorWidth)
	blocks := int(min((chunks+threads-1)/threads, maxBlocks))
	if blocks == 0 {
		return nil
	}
	return fn.Launch(blocks, 1, 1, threads, 1, 1, 0, stream, args(src, dst, n, int64(p.D), int64(dp)))
}

// launchToVt enqueues TF32's transposed copy of V (flash_to_tf32_vt: blocks
// of 32 × 8 threads striding over tiles of 32 keys × 32 columns).
func launchToVt(fn cu.Function, src, dst cu.DevicePtr, p kernels.Params, dp int, stream cu.Stream) error {
	bh := int64(p.B) * int64(p.H)
	tiles := bh * ((transposedKeys(p.Nk) + 31) / 32) * int64(dp/32)
	const maxBlocks = 16384
	blocks := int(min(tiles, maxBlocks))
	if blocks == 0 {
		return nil
	}
	return fn.Launch(blocks, 1, 1, 256, 1, 1, 0, stream, args(src, dst, bh, int64(p.Nk), int64(p.D), int64(dp)))
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

// The tensor-core forward's block shape (csrc/fwd_mma.cuh): kFwdThreads
// threads, fwd_bq query rows (mmaFwdRows), key tiles of fwd_bk (mmaFwdBK),
// and its shared-memory layout fwd_smem_bytes (mmaFwdSmem): Q and two K
// tiles with rows of dp elements padded by 16 bytes, and two V tiles, the
// same or, for TF32, transposed ([dp, BK] padded by 16 bytes).
const mmaThreads = 128

// mmaFwdRows is a forward block's query rows: two m16 tiles per warp up to
// dp = 128, one at 256 (fwd_mt).
func mmaFwdRows(dp int) int {
	if dp > 128 {
		return 64
	}
	return 128
}

// elemBytes is the size of one converted operand element in precision prec.
func elemBytes(prec Precision) int {
	if prec == TF32 {
		return 4
	}
	return 2
}

func mmaFwdBK(prec Precision, dp int) int {
	if elemBytes(prec) == 4 && dp > 64 {
		return 32
	}
	return 64
}

func mmaFwdSmem(prec Precision, dp int) int {
	eb, bk := elemBytes(prec), mmaFwdBK(prec, dp)
	pad := 16 / eb
	vTile := bk * (dp + pad)
	if prec == TF32 {
		vTile = dp * (bk + pad)
	}
	return ((mmaFwdRows(dp)+2*bk)*(dp+pad) + 2*vTile) * eb
}

// loadMmaForward looks up the tensor-core forward for precision prec (BF16,
// FP16 or TF32) and padded head dimension dp, with its conversion kernels.
// A kernel that does not fit the device's shared memory yields an error
// wrapping ErrUnsupported, returned by calls that need it.
func loadMmaForward(mod cu.Module, prec Precision, dp, maxSmem int) (*fwdKernel, error) {
	f := &fwdKernel{name: fmt.Sprintf("flash_fwd_mma_%v_d%d", prec, dp), rows: mmaFwdRows(dp), threads: mmaThreads,
		smem: mmaFwdSmem(prec, dp), elemBytes: elemBytes(prec), paddedDim: dp}
	convName := "flash_to_half_" + prec.String()
	if prec == TF32 {
		convName = "flash_to_tf32"
		vt, err := mod.Function("flash_to_tf32_vt")
		if err != nil {
			return nil, fmt.Errorf("cudakernels: kernel flash_to_tf32_vt: %w", err)
		}
		f.toVt = &vt
	}
	conv, err := mod.Function(convName)
	if err != nil {
		return nil, fmt.Errorf("cudakernels: kernel %s: %w", convName, err)
	}
	f.toStorage = &conv
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
