//go:build flashgpu

package cudakernels

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// simtBackward is the CUDA-core backward (csrc/bwd_simt.cuh, or
// bwd_simt_blocked.cuh where c.blocked) of one element type and padded head
// dimension: dK and dV per tile of keys, then dQ per tile of queries, on the
// caller's tensors (rounded first where c.rounded: enqueueBackward).
//
// With a bias gradient wanted it then runs dbias (bwd_simt.cuh's, whatever
// c.blocked, in the row-block launch shape dbiasShape): one block
// per tile of rows and keys of each bias slice, summing dS over the pairs
// that share the slice (the launch then holds the whole call: backward).
type simtBackward struct {
	dkdv, dq, dbias cu.Function
	c               choice
	dbiasShape      launchShape
}

func loadSimtBackward(mod cu.Module, c choice, maxSmem int) (*simtBackward, error) {
	suffix := fmt.Sprintf("_simt_%s_d%d", typeName(c.elem), c.dp)
	blocked := suffix
	if c.blocked {
		blocked = fmt.Sprintf("_simt_blocked_%s_d%d", typeName(c.elem), c.dp)
	}
	b := &simtBackward{c: c, dbiasShape: simtRowBlockShape(backwardDir, c.elem, c.dp)}
	var err error
	if b.dkdv, err = lookup(mod, "flash_bwd_dkdv"+blocked, c.smem, maxSmem); err != nil {
		return nil, err
	}
	if b.dq, err = lookup(mod, "flash_bwd_dq"+blocked, c.smemDQ, maxSmem); err != nil {
		return nil, err
	}
	if b.dbias, err = lookup(mod, "flash_bwd_dbias"+suffix, b.dbiasShape.smem, maxSmem); err != nil {
		return nil, err
	}
	return b, nil
}

// computes accepts every variant, the bias included, but paged keys (a
// backward never takes them: kernels.CheckBackward refuses them first).
func (b *simtBackward) computes(p kernels.Params) error {
	return refuseVariants(p, "the CUDA-core kernels", allVariants)
}

func (b *simtBackward) scratchBytes(kernels.Params) int64 { return 0 }

func (b *simtBackward) launch(p kernels.Params, buf bwdBuffers, stream cu.Stream) error {
	gridK, gridQ, err := backwardGrids(p, b.c.rows)
	if err != nil {
		return err
	}
	kp := newParams(p, callerOperands(p, buf))
	if err := launch(b.dkdv, gridK, b.c.threads, b.c.smem, stream, &kp); err != nil {
		return err
	}
	if err := launch(b.dq, gridQ, b.c.threads, b.c.smemDQ, stream, &kp); err != nil {
		return err
	}
	if kp.Dbias == 0 {
		return nil
	}
	s := b.dbiasShape
	gridB, err := gridOver(buf.vars.biasSlices*int64((p.Nq+s.rows-1)/s.rows), p.Nk, s.rows)
	if err != nil {
		return err
	}
	return launch(b.dbias, gridB, s.threads, s.smem, stream, &kp)
}

// callerOperands are the caller's dense tensors of a backward call.
func callerOperands(p kernels.Params, buf bwdBuffers) operands {
	return operands{
		q: dense(buf.q, p.Nq, p.D), k: dense(buf.k, p.Nk, p.D), v: dense(buf.v, p.Nk, p.D), o: dense(buf.o, p.Nq, p.D),
		dout: dense(buf.do, p.Nq, p.D), dq: dense(buf.dq, p.Nq, p.D), dk: dense(buf.dk, p.Nk, p.D), dv: dense(buf.dv, p.Nk, p.D),
		lse: uint64(buf.lse), delta: uint64(buf.delta), vars: buf.vars,
	}
}

// launchDotDoORound enqueues flash_bwd_dot_do_o_round_*: dO rounded in
// place and D = rowsum(dO∘O) into buf.delta in one pass, a warp per query
// row.
func launchDotDoORound(fn cu.Function, p kernels.Params, buf bwdBuffers, stream cu.Stream) error {
	rows := int64(p.B) * int64(p.H) * int64(p.Nq)
	const threads, rowsPerBlock = 256, 256 / 32
	kp := newParams(p, callerOperands(p, buf))
	return launch(fn, int((rows+rowsPerBlock-1)/rowsPerBlock), threads, 0, stream, &kp)
}

// launchDotDoO enqueues D = rowsum(dO∘O) into buf.delta (flash_bwd_dot_do_o:
// one thread per query row), which every family's backward reads.
func launchDotDoO(fn cu.Function, p kernels.Params, buf bwdBuffers, stream cu.Stream) error {
	rows := int64(p.B) * int64(p.H) * int64(p.Nq)
	const rowsPerBlock = 256
	kp := newParams(p, callerOperands(p, buf))
	return launch(fn, int((rows+rowsPerBlock-1)/rowsPerBlock), rowsPerBlock, 0, stream, &kp)
}
