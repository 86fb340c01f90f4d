//go:build flashgpu

package cudakernels

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// mmaBackward is the mma.sync backward (csrc/bwd_mma.cuh, BF16 and FP16) of
// one padded head dimension: 16-bit copies of Q, K, V and dO in scratch (K
// and V one per key head), then dK and dV per c.rows keys of each key head
// and dQ per c.rows queries. The _var kernels compute the variants but the
// bias and dropout, the _full ones those too (pickMmaVariant chooses);
// dbias writes the bias gradient, a tile of each slice per block. The
// _full kernels step over tiles of their own height, with shared memory of
// their own (smemFull, smemDQFull: mmaBwdFullSmem).
type mmaBackward struct {
	dkdv, dq, dkdvVar, dqVar, dkdvFull, dqFull, dbias, toHalf cu.Function
	c                                                         choice
	smemFull, smemDQFull                                      int
}

func loadMmaBackward(mod cu.Module, c choice, maxSmem int) (*mmaBackward, error) {
	b := &mmaBackward{c: c}
	b.smemFull, b.smemDQFull = mmaBwdFullSmem(c.dp)
	var err error
	if b.toHalf, err = function(mod, "flash_to_half_"+c.prec.String()); err != nil {
		return nil, err
	}
	suffix := fmt.Sprintf("_mma_%v_d%d", c.prec, c.dp)
	if b.dkdv, err = lookup(mod, "flash_bwd_dkdv"+suffix, c.smem, maxSmem); err != nil {
		return nil, err
	}
	if b.dq, err = lookup(mod, "flash_bwd_dq"+suffix, c.smemDQ, maxSmem); err != nil {
		return nil, err
	}
	if b.dkdvVar, err = lookup(mod, "flash_bwd_dkdv"+suffix+"_var", c.smem, maxSmem); err != nil {
		return nil, err
	}
	if b.dqVar, err = lookup(mod, "flash_bwd_dq"+suffix+"_var", c.smemDQ, maxSmem); err != nil {
		return nil, err
	}
	if b.dkdvFull, err = lookup(mod, "flash_bwd_dkdv"+suffix+"_full", b.smemFull, maxSmem); err != nil {
		return nil, err
	}
	if b.dqFull, err = lookup(mod, "flash_bwd_dq"+suffix+"_full", b.smemDQFull, maxSmem); err != nil {
		return nil, err
	}
	if b.dbias, err = lookup(mod, "flash_bwd_dbias"+suffix, mmaDbiasSmem(c.dp), maxSmem); err != nil {
		return nil, err
	}
	return b, nil
}

// mmaBwdScratch is where the 16-bit copies go.
type mmaBwdScratch struct{ q, k, v, dout cu.DevicePtr }

func (b *mmaBackward) carve(p kernels.Params, base cu.DevicePtr, s *mmaBwdScratch) int64 {
	bh, bkv, dp := int64(p.B)*int64(p.H), int64(p.B)*int64(p.KVHeads()), int64(b.c.dp)
	qBytes, kBytes := bh*int64(p.Nq)*dp*2, bkv*int64(p.Nk)*dp*2
	return carve(base, part{&s.q, qBytes}, part{&s.k, kBytes}, part{&s.v, kBytes}, part{&s.dout, qBytes})
}

// computes accepts every variant (the _var and _full kernels).
func (b *mmaBackward) computes(p kernels.Params) error {
	return refuseVariants(p, "the mma.sync kernels", allVariants)
}

func (b *mmaBackward) scratchBytes(p kernels.Params) int64 { return b.carve(p, 0, &mmaBwdScratch{}) }

// launch converts Q, K, V and dO into buf.scratch, then enqueues the dK/dV
// and the dQ kernels. buf.delta must already hold D.
func (b *mmaBackward) launch(p kernels.Params, buf bwdBuffers, stream cu.Stream) error {
	gridK, gridQ, err := backwardGrids(p, b.c.rows)
	if err != nil {
		return err
	}
	var s mmaBwdScratch
	b.carve(p, buf.scratch, &s)
	kv := keyHeads(p)
	for _, c := range []struct {
		src, dst cu.DevicePtr
		heads    kernels.Params // the heads to convert: query or key heads
		rows     int
	}{{buf.q, s.q, p, p.Nq}, {buf.k, s.k, kv, p.Nk}, {buf.v, s.v, kv, p.Nk}, {buf.do, s.dout, p, p.Nq}} {
		if err := launchToStorage(b.toHalf, c.src, c.dst, c.heads, c.rows, b.c.dp, 8, stream); err != nil {
			return err
		}
	}
	ops := callerOperands(p, buf)
	ops.q, ops.k, ops.v, ops.dout = dense(s.q, p.Nq, b.c.dp), dense(s.k, p.Nk, b.c.dp), dense(s.v, p.Nk, b.c.dp), dense(s.dout, p.Nq, b.c.dp)
	kp := newParams(p, ops)
	dkdv, dq := pickMmaVariant(&kp, b.dkdv, b.dkdvVar, b.dkdvFull), pickMmaVariant(&kp, b.dq, b.dqVar, b.dqFull)
	smem, smemDQ := b.c.smem, b.c.smemDQ
	if dkdv == b.dkdvFull {
		smem, smemDQ = b.smemFull, b.smemDQFull
	}
	if err := launch(dkdv, gridK, b.c.threads, smem, stream, &kp); err != nil {
		return err
	}
	if err := launch(dq, gridQ, b.c.threads, smemDQ, stream, &kp); err != nil {
		return err
	}
	if kp.Dbias == 0 {
		return nil
	}
	// A block per tile of mmaBwdStep rows and keys of each bias slice.
	tiles := int64((p.Nq + mmaBwdStep - 1) / mmaBwdStep)
	gridB, err := gridOver(buf.vars.biasSlices*tiles, p.Nk, mmaBwdStep)
	if err != nil {
		return err
	}
	return launch(b.dbias, gridB, b.c.threads, mmaDbiasSmem(b.c.dp), stream, &kp)
}
