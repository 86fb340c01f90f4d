//go:build flashgpu

package cudakernels

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// backwardScratchBytes is the device memory, beyond bwdBuffers' tensors, that
// enqueueBackward needs for element type T and problem p.
func backwardScratchBytes[T kernels.Float](b *Backend, p kernels.Params) (int64, error) {
	return 0, nil
}

// enqueueBackward enqueues on stream the backward kernels for element type
// T: buf's q, k, v, o, lse and do must hold the inputs (in BF16 and FP16
// mode q, k, v and do are rounded in place to the storage precision), and
// dq, dk and dv receive the gradients once the stream reaches that point.
// delta and scratch are work space.
func enqueueBackward[T kernels.Float](b *Backend, p kernels.Params, buf bwdBuffers, stream cu.Stream) error {
	ks, elem, err := kernelsFor[T](b, p.D)
	if err != nil {
		return err
	}
	if elem == 4 && b.roundFn != nil {
		// Gradients only for the head dimensions the forward serves.
		if dp, _ := paddedDim(p.D); b.mmaFwdErr[dp] != nil {
			return b.mmaFwdErr[dp]
		}
		for _, c := range []struct {
			ptr cu.DevicePtr
			n   int
		}{{buf.q, p.QLen()}, {buf.k, p.KLen()}, {buf.v, p.KLen()}, {buf.do, p.QLen()}} {
			if err := launchRound(*b.roundFn, c.ptr, c.n, stream); err != nil {
				return fmt.Errorf("cudakernels: rounding launch: %w", err)
			}
		}
	}
	if err := ks.launchBackward(b.dotDoO[elem], p, buf, stream); err != nil {
		return fmt.Errorf("cudakernels: backward launch: %w", err)
	}
	return nil
}
