//go:build flashgpu

package cudakernels

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// The tensor-core backward's block shape (csrc/bwd_mma.cuh): 4 warps,
// kBwdBK = 64 keys per dK/dV block and kBwdBQ = 64 queries per dQ block,
// each looping over tiles of kBwdStep = 64 rows.
const (
	mmaBwdThreads = 128
	mmaBwdRows    = 64
	mmaBwdStep    = 64
)

// mmaBwdSmem is the larger of the two kernels' shared-memory layouts
// (bwd_dkdv_smem_bytes, bwd_dq_smem_bytes) in bytes: two fixed and four
// streamed tiles of 16-bit rows padded to dp + 8, plus the streamed LSE and
// D of the dK/dV kernel.
func mmaBwdSmem(dp int) int {
	return (2*mmaBwdRows+4*mmaBwdStep)*(dp+8)*2 + 4*mmaBwdStep*4
}

// mmaBwdKernels are the tensor-core backward kernels of one precision and
// padded head dimension.
type mmaBwdKernels struct {
	dkdv, dq  cu.Function
	toHalf    cu.Function
	smem      int
	paddedDim int
}

// mmaBwdMaxDim is the largest padded head dimension csrc/flash.cu builds the
// tensor-core backward for: at 256 its dK and dV accumulators would not fit
// the registers of this block shape, and the CUDA-core backward serves it.
const mmaBwdMaxDim = 128

// A backwardKernel enqueues the tensor-core backward (after D = rowsum(dO∘O)
// is in buf.delta) with the conversions its operands need; scratchBytes is
// the size of bwdBuffers.scratch it needs for p.
type backwardKernel interface {
	scratchBytes(p kernels.Params) int64
	launch(p kernels.Params, buf bwdBuffers, stream cu.Stream) error
}

// loadMmaBackward looks up the tensor-core backward of precision prec for
// every head dimension csrc/flash.cu builds it for that fits the device's
// shared memory.
func loadMmaBackward(mod cu.Module, prec Precision, maxSmem int) (map[int]backwardKernel, error) {
	name := "flash_to_half_" + prec.String()
	toHalf, err := mod.Function(name)
	if err != nil {
		return nil, fmt.Errorf("cudakernels: kernel %s: %w", name, err)
	}
	out := map[int]backwardKernel{}
	for _, dp := range headDims {
		smem := mmaBwdSmem(dp)
		if dp > mmaBwdMaxDim || smem > maxSmem {
			continue
		}
		ks := &mmaBwdKernels{toHalf: toHalf, smem: smem, paddedDim: dp}
		suffix := fmt.Sprintf("_mma_%v_d%d", prec, dp)
		if ks.dkdv, err = lookup(mod, "flash_bwd_dkdv"+suffix, smem, maxSmem); err != nil {
			return nil, err
		}
		if ks.dq, err = lookup(mod, "flash_bwd_dq"+suffix, smem, maxSmem); err != nil {
			return nil, err
		}
		out[dp] = ks
	}
	return out, nil
}

func (ks *mmaBwdKernels) scratchBytes(p kernels.Params) int64 { return scratchTotal(ks.halfParts(p)) }

// halfParts returns the byte sizes of the 16-bit copies of Q, K, V and dO.
func (ks *mmaBwdKernels) halfParts(p kernels.Params) []int64 {
	bh, dp := int64(p.B)*int64(p.H), int64(ks.paddedDim)
	qb, kb := bh*int64(p.Nq)*dp*2, bh*int64(p.Nk)*dp*2
	return []int64{qb, kb, kb, qb}
}

// launch converts Q, K, V and dO into 16-bit copies in buf.scratch, then
// enqueues the dK/dV and the dQ kernels. buf.delta must already hold D.
func (ks *mmaBwdKernels) launch(p kernels.Params, buf bwdBuffers, stream cu.Stream) error {
	gridK, err := gridFor(p, p.Nk, mmaBwdRows)
	if err != nil {
		return err
	}
	gridQ, err := gridFor(p, p.Nq, mmaBwdRows)
	if err != nil {
		return err
	}
	srcs := []cu.DevicePtr{buf.q, buf.k, buf.v, buf.do}
	rows := []int{p.Nq, p.Nk, p.Nk, p.Nq}
	half := carveScratch(buf.scratch, ks.halfParts(p))
	for i := range half {
		if err := launchToStorage(ks.toHalf, srcs[i], half[i], p, rows[i], ks.paddedDim, 8, stream); err != nil {
			return err
		}
	}
	shape := []any{int64(p.Nq), int64(p.Nk), int64(p.D), bool64(p.Causal), p.Scale}
	if err := ks.dkdv.Launch(gridK, 1, 1, mmaBwdThreads, 1, 1, ks.smem, stream, args(append([]any{
		half[0], half[1], half[2], half[3], buf.lse, buf.delta, buf.dk, buf.dv}, shape...)...)); err != nil {
		return err
	}
	return ks.dq.Launch(gridQ, 1, 1, mmaBwdThreads, 1, 1, ks.smem, stream, args(append([]any{
		half[0], half[1], half[2], half[3], buf.lse, buf.delta, buf.dq}, shape...)...))
}

// mmaBackwardFor returns the tensor-core backward serving element type T and
// head dimension d, or nil where the CUDA-core backward runs instead.
func mmaBackwardFor[T kernels.Float](b *Backend, d int) backwardKernel {
	var zero T
	if unsafe.Sizeof(zero) != 4 || b.mmaBwd == nil {
		return nil
	}
	dp, err := paddedDim(d)
	if err != nil {
		return nil
	}
	return b.mmaBwd[dp]
}

// backwardScratchBytes is the device memory, beyond bwdBuffers' tensors, that
// enqueueBackward needs for element type T and problem p.
func backwardScratchBytes[T kernels.Float](b *Backend, p kernels.Params) (int64, error) {
	ks := mmaBackwardFor[T](b, p.D)
	if ks == nil {
		return 0, nil
	}
	return ks.scratchBytes(p), nil
}

// enqueueBackward enqueues on stream the backward kernels for element type
// T: buf's q, k, v, o, lse and do must hold the inputs, and dq, dk and dv
// receive the gradients once the stream reaches that point; delta and
// scratch are work space. In TF32, BF16 and FP16 mode dO is rounded in
// place to the storage precision (so that D = rowsum(dO∘O) uses the dO the
// products see), and so are q, k and v where the CUDA-core backward serves
// the head dimension; rounding is idempotent, and the forward rounds the
// same way.
func enqueueBackward[T kernels.Float](b *Backend, p kernels.Params, buf bwdBuffers, stream cu.Stream) error {
	ks, elem, err := kernelsFor[T](b, p.D)
	if err != nil {
		return err
	}
	mma := mmaBackwardFor[T](b, p.D)
	if elem == 4 && b.roundFn != nil {
		// Gradients only for the head dimensions the forward serves.
		if dp, _ := paddedDim(p.D); b.mmaFwdErr[dp] != nil {
			return b.mmaFwdErr[dp]
		}
		type span struct {
			ptr cu.DevicePtr
			n   int
		}
		rounded := []span{{buf.do, p.QLen()}}
		if mma == nil {
			rounded = append(rounded, span{buf.q, p.QLen()}, span{buf.k, p.KLen()}, span{buf.v, p.KLen()})
		}
		for _, c := range rounded {
			if err := launchRound(*b.roundFn, c.ptr, c.n, stream); err != nil {
				return fmt.Errorf("cudakernels: rounding launch: %w", err)
			}
		}
	}
	if mma == nil {
		if err := ks.launchBackward(b.dotDoO[elem], p, buf, stream); err != nil {
			return fmt.Errorf("cudakernels: backward launch: %w", err)
		}
		return nil
	}
	if err := launchDotDoO(b.dotDoO[elem], p, buf, stream); err != nil {
		return fmt.Errorf("cudakernels: backward launch: %w", err)
	}
	if err := mma.launch(p, buf, stream); err != nil {
		return fmt.Errorf("cudakernels: backward launch: %w", err)
	}
	return nil
}
