//go:build flashgpu

package cudakernels

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// simtForward is the CUDA-core forward (csrc/fwd_simt.cuh, or
// fwd_simt_blocked.cuh where c.blocked) of one element type and padded
// head dimension: one block of c.threads threads per c.rows query rows, on
// the caller's tensors.
type simtForward struct {
	fn cu.Function
	c  choice
}

// typeName is the kernel-name suffix of an element size.
func typeName(elemSize int) string {
	if elemSize == 8 {
		return "f64"
	}
	return "f32"
}

func loadSimtForward(mod cu.Module, c choice, maxSmem int) (*simtForward, error) {
	name := fmt.Sprintf("flash_fwd_simt_%s_d%d", typeName(c.elem), c.dp)
	if c.blocked {
		name = fmt.Sprintf("flash_fwd_simt_blocked_%s_d%d", typeName(c.elem), c.dp)
	}
	fn, err := lookup(mod, name, c.smem, maxSmem)
	if err != nil {
		return nil, err
	}
	return &simtForward{fn: fn, c: c}, nil
}

// computes accepts every variant but paged keys, which no GPU kernel
// reads yet.
func (f *simtForward) computes(p kernels.Params) error {
	return refuseVariants(p, "the CUDA-core kernels", allVariants)
}

func (f *simtForward) scratchBytes(kernels.Params) int64 { return 0 }

func (f *simtForward) launch(p kernels.Params, buf fwdBuffers, stream cu.Stream) error {
	grid, err := gridFor(p, p.Nq, f.c.rows)
	if err != nil {
		return err
	}
	kp := newParams(p, operands{q: dense(buf.q, p.Nq, p.D), k: dense(buf.k, p.Nk, p.D), v: dense(buf.v, p.Nk, p.D),
		o: dense(buf.o, p.Nq, p.D), lse: uint64(buf.lse), vars: buf.vars})
	return launch(f.fn, grid, f.c.threads, f.c.smem, stream, &kp)
}
