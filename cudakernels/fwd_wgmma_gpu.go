//go:build flashgpu

package cudakernels

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// wgmmaForward is the Hopper forward (csrc/fwd_wgmma.cuh, module
// ptx/flash_sm90a.ptx) of one precision and padded head dimension. Its
// inputs are tile images of Q, K and Vᵀ that conversion kernels write into
// scratch first, padded with zeros to whole tiles: Q to a multiple of
// c.rows rows (tiles of wgmmaQTileRows), K and V to a multiple of the key
// tile c.step, one image per key head (grouped-query attention reads each
// for all the query heads of its group). The warp-specialized kernels take
// the caller's Q instead (wgmmaFwdKernel.readsQ), and those with two
// consumer warpgroups run on a persistent grid of at most sms blocks
// (wgmmaFwdKernel.persistent), where they also write the K and Vᵀ images
// themselves when wgmmaFwdOwnsKV and wgmmaFwdOwnKVPays allow. fn is the
// plain kernel, fnVar the one that computes the variants
// (csrc/sm90_variants.cuh); wgmmaForwardKernel
// chooses. A choice with c.full has the _full kernel (fnFull) alone: the
// bias and dropout, with every other variant, in a launch shape of its own;
// with c.drop too, the _drop kernel there: dropout without a bias, without
// the bias tiles. fn, the plain kernel, runs in the launch shape plain:
// the warp-specialized kernel's where wgmmaWSBuilt, else the choice's,
// which the others take; a choice whose plain kernel a tuning table chose
// (c.plain) has that one there instead: the _var kernel, which computes
// plain problems too, or the two-consumer warp-specialized kernel.
type wgmmaForward struct {
	fn, fnVar, fnFull, toRows, toVt, toRowsLen, toVtLen cu.Function
	c                                                   choice
	plain                                               launchShape
	sms                                                 int // the device's multiprocessors: a persistent grid's blocks
}

func loadWgmmaForward(mod cu.Module, c choice, maxSmem, sms int) (*wgmmaForward, error) {
	f := &wgmmaForward{c: c, plain: launchShape{c.rows, c.threads, c.smem}, sms: sms}
	var err error
	typ := wgmmaTypeName(c.prec)
	if f.toRows, err = function(mod, "flash_to_image_rows_"+typ); err != nil {
		return nil, err
	}
	if f.toVt, err = function(mod, "flash_to_image_vt_"+typ); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("flash_fwd_wgmma_%s_d%d", typ, c.dp)
	if wgmmaPlainOnly(c.prec) {
		// FP32's 3xTF32 kernel: plain problems alone, no lengths.
		if f.fn, err = lookup(mod, name, c.smem, maxSmem); err != nil {
			return nil, err
		}
		return f, nil
	}
	if f.toRowsLen, err = function(mod, "flash_to_image_rows_len_"+typ); err != nil {
		return nil, err
	}
	if f.toVtLen, err = function(mod, "flash_to_image_vt_len_"+typ); err != nil {
		return nil, err
	}
	if c.full {
		suffix := "_full"
		if c.drop {
			suffix = "_drop"
		}
		if f.fnFull, err = lookup(mod, name+suffix, c.smem, maxSmem); err != nil {
			return nil, err
		}
		return f, nil
	}
	if f.fnVar, err = lookup(mod, name+"_var", c.smem, maxSmem); err != nil {
		return nil, err
	}
	kind, plain := wgmmaPlainForward(c)
	f.plain = plain
	plainName := name
	switch kind {
	case wgmmaFwdVar:
		f.fn = f.fnVar
		return f, nil
	case wgmmaFwdWS2:
		plainName = name + "_ws2"
	}
	if f.fn, err = lookup(mod, plainName, f.plain.smem, maxSmem); err != nil {
		return nil, err
	}
	return f, nil
}

// wgmmaFwdScratch is where the images go, and the persistent kernels'
// counters (wgmmaFwdCounters).
type wgmmaFwdScratch struct{ q, k, vt, counter cu.DevicePtr }

// padded returns the rows per head of the Q and of the K and Vᵀ images
// that scratch holds: Q to whole blocks of the plain kernel or of the
// others, whichever is more (their blocks differ at dp = 64: 192 and 128
// rows), K and Vᵀ to whole key tiles. A call pads Q to its own kernel's.
func (f *wgmmaForward) padded(p kernels.Params) (nq, nk int64) {
	nq = max(roundUp(int64(p.Nq), int64(f.c.rows)), roundUp(int64(p.Nq), int64(f.plain.rows)))
	return nq, roundUp(int64(p.Nk), int64(f.c.step))
}

// carve lays out the scratch of p: no Q image where the kernel p gets
// reads the caller's Q itself (wgmmaFwdKernel.readsQ; plainParams decides
// as launch's isPlain does, TestPlainParamsAgrees).
func (f *wgmmaForward) carve(p kernels.Params, base cu.DevicePtr, s *wgmmaFwdScratch) int64 {
	bh, bkv, row := int64(p.B)*int64(p.H), int64(p.B)*int64(p.KVHeads()), int64(f.c.dp)*int64(elemBytes(f.c.prec))
	nq, nk := f.padded(p)
	qBytes := bh * nq * row
	if kind, _ := wgmmaForwardKernel(f.c, plainParams(p)); kind.readsQ() {
		qBytes = 0
	}
	// Room for the conversion's counters whether or not a call's tensors
	// are aligned for it (ownsKV).
	counters := wgmmaFwdCounters(f.c.prec, f.c.dp, p.B, p.H, p.Nk, true)
	return carve(base, part{&s.q, qBytes}, part{&s.k, bkv * nk * row}, part{&s.vt, bkv * nk * row},
		part{&s.counter, 4 * counters})
}

// computes accepts every variant (the _full kernel), or every one but
// dropout and the bias (the _var kernels), or for FP32's 3xTF32 kernel
// plain problems alone (wgmmaPlainOnly).
func (f *wgmmaForward) computes(p kernels.Params) error {
	if wgmmaPlainOnly(f.c.prec) {
		return refusePlainOnly(p)
	}
	if f.c.full {
		return refuseVariants(p, "the Hopper (wgmma) kernels", allVariants)
	}
	return refuseVariants(p, "the Hopper (wgmma) kernels", masksAndMods)
}

func (f *wgmmaForward) scratchBytes(p kernels.Params) int64 { return f.carve(p, 0, &wgmmaFwdScratch{}) }

// launch picks the kernel (plain where the problem allows, else _var, or
// _full with a bias or dropout), enqueues the conversions into images in
// buf.scratch (Q padded to the kernel's blocks, unless the kernel reads
// the caller's Q itself: wgmmaFwdKernel.readsQ; K and Vᵀ of the
// B·KVHeads() key heads only, unless the persistent kernel converts them
// itself (ownsKV); with lengths, the tiles the forward reads
// only: up to each batch entry's rows rounded up to a block, keys to a key
// tile), then the forward.
func (f *wgmmaForward) launch(p kernels.Params, buf fwdBuffers, stream cu.Stream) error {
	// What the kernel choice reads of the argument does not depend on
	// where the images go.
	probe := newParams(p, operands{vars: buf.vars})
	kind, shape := wgmmaForwardKernel(f.c, isPlain(&probe))
	if sized, _ := wgmmaForwardKernel(f.c, plainParams(p)); sized.readsQ() != kind.readsQ() {
		// carve left out the Q image, or sized it for nothing: a kernel
		// that images Q into a region of 0 bytes would write past it.
		return fmt.Errorf("cudakernels: internal error: the Hopper forward's scratch was laid out for kernel %d, the launch takes %d",
			sized, kind)
	}
	fn := f.fnVar
	if kind != wgmmaFwdVar {
		fn = f.fn
	}
	if wgmmaPlainOnly(f.c.prec) && kind != wgmmaFwdRowBlock {
		return fmt.Errorf("cudakernels: internal error: the FP32 Hopper forward (plain problems only) got a problem of kernel %d", kind)
	}
	rows := shape.rows
	if full := probe.Bias != 0 || probe.DropoutThreshold != 0; full != f.c.full {
		// requestFor and the kernel's argument must agree on the bias and
		// dropout: the launch shapes differ.
		return fmt.Errorf("cudakernels: internal error: the Hopper forward of the bias and dropout (%v) got a problem with them (%v)",
			f.c.full, full)
	} else if full {
		if f.c.drop && probe.Bias != 0 {
			return fmt.Errorf("cudakernels: internal error: the Hopper forward of dropout without a bias got a problem with a bias")
		}
		fn = f.fnFull
	}
	grid, err := gridFor(p, p.Nq, rows)
	if err != nil {
		return err
	}
	var s wgmmaFwdScratch
	f.carve(p, buf.scratch, &s)
	persistent := kind.persistent(f.c.dp)
	// The persistent kernels make the K and Vᵀ images themselves where bulk
	// copies can read the rows (wgmmaFwdOwnsKV) and that measured faster
	// than the passes (wgmmaFwdOwnKVPays).
	// (A tuning table's candidate may ask for the passes: f.c.passes.)
	ownsKV := !f.c.passes && wgmmaFwdOwnsKV(kind, f.c.prec, f.c.dp, p.B, p.H, p.Nk, p.D) &&
		wgmmaFwdOwnKVPays(f.c.prec, f.c.dp, p.Nk, p.Causal) && buf.k%16 == 0 && buf.v%16 == 0
	if persistent {
		// Blocks after the grid's first items take theirs from the counter.
		grid = min(grid, f.sms)
		n := wgmmaFwdCounters(f.c.prec, f.c.dp, p.B, p.H, p.Nk, ownsKV)
		if err := cu.MemsetD32Async(s.counter, 0, n, stream); err != nil {
			return fmt.Errorf("cudakernels: zeroing the forward's counters: %w", err)
		}
	}
	im := imaging{toRows: f.toRows, toVt: f.toVt, toRowsLen: f.toRowsLen, toVtLen: f.toVtLen, p: p, dp: f.c.dp,
		elemSz: elemBytes(f.c.prec), stream: stream}
	nqPad, nkPad := roundUp(int64(p.Nq), int64(rows)), roundUp(int64(p.Nk), int64(f.c.step))
	dp := wgmmaImageCols(f.c.prec, f.c.dp)
	q := tensorAt{uint64(s.q), nqPad, dp}
	if kind.readsQ() {
		q = dense(buf.q, p.Nq, p.D)
	} else if err := im.queries(buf.vars).rows(buf.q, s.q, p.Nq, nqPad, wgmmaQTileRows, rows); err != nil {
		return err
	}
	if !ownsKV {
		kim := im.keys(buf.vars)
		if err := kim.rows(buf.k, s.k, p.Nk, nkPad, f.c.step, f.c.step); err != nil {
			return err
		}
		if err := kim.transposed(buf.v, s.vt, p.Nk, nkPad, f.c.step, f.c.step); err != nil {
			return err
		}
	}
	kp := newParams(p, operands{q: q, k: tensorAt{uint64(s.k), nkPad, dp},
		v: tensorAt{uint64(s.vt), nkPad, dp}, o: dense(buf.o, p.Nq, p.D), lse: uint64(buf.lse), vars: buf.vars})
	if persistent {
		kp.WorkCounter = uint64(s.counter)
	}
	smem := shape.smem
	if ownsKV {
		kp.KSrc, kp.VSrc = uint64(buf.k), uint64(buf.v)
	} else if persistent {
		// Without the conversion, its staging areas (the last of the
		// layout) are left out: that shared memory is L1 cache then.
		// (Persistent kernels have two consumer warpgroups.)
		smem = wgmmaWSBaseSmem(f.c.prec, f.c.dp, 2)
	}
	return launch(fn, grid, shape.threads, smem, stream, &kp)
}
