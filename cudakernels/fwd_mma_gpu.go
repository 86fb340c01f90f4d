//go:build flashgpu

package cudakernels

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// mmaForward is the mma.sync forward (csrc/fwd_mma.cuh) of one precision and
// padded head dimension. Conversion kernels first write Q, K and V into
// scratch copies of the operand type with rows padded to c.dp (V transposed
// with permuted keys for TF32: csrc/mma.cuh), K and V one copy per key head;
// the forward reads those. fn is the plain kernel, fnVar the one that
// computes the variants of csrc/tc_variants.cuh but the bias and dropout,
// fnFull every variant; pickMmaVariant chooses.
type mmaForward struct {
	fn, fnVar, fnFull, toStorage cu.Function
	toVt                         cu.Function // TF32 only
	c                            choice
}

func loadMmaForward(mod cu.Module, c choice, maxSmem int) (*mmaForward, error) {
	f := &mmaForward{c: c}
	conv := "flash_to_half_" + c.prec.String()
	var err error
	if c.prec == TF32 {
		conv = "flash_to_tf32"
		if f.toVt, err = function(mod, "flash_to_tf32_vt"); err != nil {
			return nil, err
		}
	}
	if f.toStorage, err = function(mod, conv); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("flash_fwd_mma_%v_d%d", c.prec, c.dp)
	if f.fn, err = lookup(mod, name, c.smem, maxSmem); err != nil {
		return nil, err
	}
	if f.fnVar, err = lookup(mod, name+"_var", c.smem, maxSmem); err != nil {
		return nil, err
	}
	if f.fnFull, err = lookup(mod, name+"_full", c.smem, maxSmem); err != nil {
		return nil, err
	}
	return f, nil
}

// mmaFwdScratch is where the converted copies go.
type mmaFwdScratch struct{ q, k, v cu.DevicePtr }

// carve lays out the copies for p from base and returns their total size.
func (f *mmaForward) carve(p kernels.Params, base cu.DevicePtr, s *mmaFwdScratch) int64 {
	bh, bkv, dp, eb := int64(p.B)*int64(p.H), int64(p.B)*int64(p.KVHeads()), int64(f.c.dp), int64(elemBytes(f.c.prec))
	kBytes := bkv * int64(p.Nk) * dp * eb
	vBytes := kBytes
	if f.c.prec == TF32 {
		vBytes = bkv * dp * transposedKeys(p.Nk) * eb
	}
	return carve(base, part{&s.q, bh * int64(p.Nq) * dp * eb}, part{&s.k, kBytes}, part{&s.v, vBytes})
}

// computes accepts every variant (the _var and _full kernels) but paged
// keys.
func (f *mmaForward) computes(p kernels.Params) error {
	return refuseVariants(p, "the mma.sync kernels", allVariants)
}

func (f *mmaForward) scratchBytes(p kernels.Params) int64 { return f.carve(p, 0, &mmaFwdScratch{}) }

// launch enqueues the conversions into buf.scratch (K and V of the
// B·KVHeads() key heads only), then the forward.
func (f *mmaForward) launch(p kernels.Params, buf fwdBuffers, stream cu.Stream) error {
	grid, err := gridFor(p, p.Nq, f.c.rows)
	if err != nil {
		return err
	}
	var s mmaFwdScratch
	f.carve(p, buf.scratch, &s)
	vw := 16 / elemBytes(f.c.prec)
	if err := launchToStorage(f.toStorage, buf.q, s.q, p, p.Nq, f.c.dp, vw, stream); err != nil {
		return err
	}
	kv := keyHeads(p)
	if err := launchToStorage(f.toStorage, buf.k, s.k, kv, p.Nk, f.c.dp, vw, stream); err != nil {
		return err
	}
	v := dense(s.v, p.Nk, f.c.dp)
	if f.c.prec == TF32 {
		err = launchToVt(f.toVt, buf.v, s.v, kv, f.c.dp, stream)
		v = tensorAt{ptr: uint64(s.v), rows: int64(f.c.dp), ld: transposedKeys(p.Nk)}
	} else {
		err = launchToStorage(f.toStorage, buf.v, s.v, kv, p.Nk, f.c.dp, vw, stream)
	}
	if err != nil {
		return err
	}
	kp := newParams(p, operands{q: dense(s.q, p.Nq, f.c.dp), k: dense(s.k, p.Nk, f.c.dp), v: v,
		o: dense(buf.o, p.Nq, p.D), lse: uint64(buf.lse), vars: buf.vars})
	fn := pickMmaVariant(&kp, f.fn, f.fnVar, f.fnFull)
	if (fn == f.fnFull) != f.c.full {
		// The _full kernel has launch shape of its own (mmaFwdRows,
		// mmaFwdSmem): requestFor and pickMmaVariant must agree on it.
		return fmt.Errorf("cudakernels: internal error: the mma.sync forward of launch shape %d rows, %d bytes got the wrong kernel for its bias and dropout",
			f.c.rows, f.c.smem)
	}
	return launch(fn, grid, f.c.threads, f.c.smem, stream, &kp)
}

// keyHeads returns p with its key heads as its heads, for the conversions
// of key-like tensors (K, V), which read only B, H and D: one copy per key
// head, which every query head of its group reads.
func keyHeads(p kernels.Params) kernels.Params {
	p.H = p.KVHeads()
	return p
}
