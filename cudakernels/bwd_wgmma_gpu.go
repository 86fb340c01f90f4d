//go:build flashgpu

package cudakernels

import (
	"fmt"
	"math"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// wgmmaBackward is the Hopper backward (csrc/bwd_wgmma.cuh) of one precision
// and padded head dimension: blocks of two warpgroups own c.rows keys
// (dK, dV) or queries (dQ) and stream the other side in steps of c.step.
// Its inputs are images in tiles of wgmmaBwdTile rows padded to a multiple
// of wgmmaBwdPad rows: Q, K, V and dO by rows, for TF32 Qᵀ, Kᵀ and dOᵀ
// transposed too (wgmmaBwdTImages), and the LSE (log2 units) and D padded
// likewise (flash_bwd_stats_sm90); K, V and Kᵀ one image per key head.
// dkdvVar and dqVar compute the variants (wgmmaBackwardKernel picks). A
// choice with c.full has the _full kernels alone
// (in dkdvVar and dqVar: the bias and dropout with every other variant),
// and dbias, which writes the bias gradient from the same images; with
// c.drop the _drop kernels there (dropout without a bias) and no dbias.
// dkdvDQ, loaded when the backend allows it (WithDeterministic(false)) and
// built (wgmmaBwdFusedBuilt), replaces dkdv and dq on plain problems: it
// also adds dQ's part of its keys into a zeroed accumulator in the
// scratch by bulk reductions, from which dqFromAccum writes dq.
// toRowsVt, where the kernels read transposed images (wgmmaBwdTImages),
// writes a tensor's row and transposed images in one pass (calls without
// lengths). Where wgmmaBwdSplit3 (FP32 at dp = 128), dv and dk take the
// place of dkdv, each computing one gradient in blocks of c.rows keys,
// and dq is dQ's kernel of the same kind (one warpgroup a block).
// dotImage, for the 16-bit types, computes D in the pass that writes dO's
// row image (fusesDelta).
type wgmmaBackward struct {
	dkdv, dq, dkdvVar, dqVar, stats, statsVar, dbias cu.Function
	dkdvDQ, dqFromAccum, dv, dk                      cu.Function
	toRows, toVt, toRowsLen, toVtLen, toRowsVt       cu.Function
	dotImage                                         cu.Function
	c                                                choice
}

func loadWgmmaBackward(mod cu.Module, c choice, maxSmem int, reduceDQ bool) (*wgmmaBackward, error) {
	b := &wgmmaBackward{c: c}
	typ := wgmmaTypeName(c.prec)
	suffix := fmt.Sprintf("_wgmma_%s_d%d", typ, c.dp)
	var err error
	if c.full {
		kind := "_full"
		if c.drop {
			kind = "_drop"
		}
		if b.dkdvVar, err = lookup(mod, "flash_bwd_dkdv"+suffix+kind, c.smem, maxSmem); err != nil {
			return nil, err
		}
		if b.dqVar, err = lookup(mod, "flash_bwd_dq"+suffix+kind, c.smemDQ, maxSmem); err != nil {
			return nil, err
		}
		if !c.drop {
			if b.dbias, err = lookup(mod, "flash_bwd_dbias"+suffix, wgmmaDbiasSmem(c.prec, c.dp), maxSmem); err != nil {
				return nil, err
			}
		}
	} else {
		if wgmmaBwdSplit3(c.prec, c.dp) {
			if b.dv, err = lookup(mod, "flash_bwd_dv"+suffix, wgmmaBwdDVSmem(c.dp), maxSmem); err != nil {
				return nil, err
			}
			if b.dk, err = lookup(mod, "flash_bwd_dk"+suffix, wgmmaBwdDKSmem(c.dp), maxSmem); err != nil {
				return nil, err
			}
		} else if b.dkdv, err = lookup(mod, "flash_bwd_dkdv"+suffix, c.smem, maxSmem); err != nil {
			return nil, err
		}
		if b.dq, err = lookup(mod, "flash_bwd_dq"+suffix, c.smemDQ, maxSmem); err != nil {
			return nil, err
		}
	}
	// FP32's 3xTF32 kernels are the plain pair alone, without lengths, and
	// take the statistics in natural units (their scores are).
	plainOnly := wgmmaPlainOnly(c.prec)
	if !c.full && !plainOnly {
		if b.dkdvVar, err = lookup(mod, "flash_bwd_dkdv"+suffix+"_var", c.smem, maxSmem); err != nil {
			return nil, err
		}
		if b.dqVar, err = lookup(mod, "flash_bwd_dq"+suffix+"_var", c.smemDQ, maxSmem); err != nil {
			return nil, err
		}
		if reduceDQ && wgmmaBwdFusedBuilt(c.prec, c.dp) {
			if b.dkdvDQ, err = lookup(mod, "flash_bwd_dkdv_dq"+suffix, wgmmaBwdFusedSmem(c.prec, c.dp), maxSmem); err != nil {
				return nil, err
			}
			if b.dqFromAccum, err = function(mod, fmt.Sprintf("flash_bwd_dq_from_accum_d%d", c.dp)); err != nil {
				return nil, err
			}
		}
	}
	type named struct {
		fn   *cu.Function
		name string
	}
	functions := []named{{&b.toRows, "flash_to_image_rows_" + typ}, {&b.toVt, "flash_to_image_vt_" + typ}}
	if wgmmaBwdTImages(c.prec) {
		functions = append(functions, named{&b.toRowsVt, "flash_to_image_rows_vt_" + typ})
	} else if c.dp%64 == 0 {
		// dot_do_o_image writes whole 64-column panels.
		functions = append(functions, named{&b.dotImage, "flash_bwd_dot_do_o_image_" + typ})
	}
	if plainOnly {
		functions = append(functions, named{&b.stats, "flash_bwd_stats_sm90_natural"})
	} else {
		functions = append(functions, named{&b.toRowsLen, "flash_to_image_rows_len_" + typ},
			named{&b.toVtLen, "flash_to_image_vt_len_" + typ}, named{&b.stats, "flash_bwd_stats_sm90"},
			named{&b.statsVar, "flash_bwd_stats_sm90_var"})
	}
	for _, f := range functions {
		if *f.fn, err = function(mod, f.name); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// wgmmaBwdScratch is where the images and padded statistics go; qT, doutT
// and kT are 0 where the kernels read no transposed images.
type wgmmaBwdScratch struct {
	q, qT, dout, doutT, k, kT, v cu.DevicePtr
	lseLog2, deltaPad            cu.DevicePtr
	dqAccum                      cu.DevicePtr // the fused kernel's dQ sums, where mayFuse
}

func (b *wgmmaBackward) padded(p kernels.Params) (nq, nk int64) {
	return roundUp(int64(p.Nq), wgmmaBwdPad), roundUp(int64(p.Nk), wgmmaBwdPad)
}

func (b *wgmmaBackward) carve(p kernels.Params, base cu.DevicePtr, s *wgmmaBwdScratch) int64 {
	bh, bkv, row := int64(p.B)*int64(p.H), int64(p.B)*int64(p.KVHeads()), int64(b.c.dp)*int64(elemBytes(b.c.prec))
	nq, nk := b.padded(p)
	qb, kb, st := bh*nq*row, bkv*nk*row, bh*nq*4
	parts := []part{{&s.q, qb}, {&s.dout, qb}, {&s.k, kb}, {&s.v, kb}, {&s.lseLog2, st}, {&s.deltaPad, st}}
	if wgmmaBwdTImages(b.c.prec) {
		parts = append(parts, part{&s.qT, qb}, part{&s.doutT, qb}, part{&s.kT, kb})
	}
	if b.mayFuse(p) {
		parts = append(parts, part{&s.dqAccum, bh * nq * int64(b.c.dp) * 4})
	}
	return carve(base, parts...)
}

// mayFuse reports whether launch takes the fused kernel for p, and the
// scratch holds dQ's accumulator: the kernel is loaded (never with
// c.full's bias and dropout kernels) and p is plain as isPlain asks of
// its parameters (one key head per query head, no lengths, softcap,
// ALiBi or window's left bound).
func (b *wgmmaBackward) mayFuse(p kernels.Params) bool {
	return b.dkdvDQ != (cu.Function{}) && p.KVHeads() == p.H && p.QLens == nil && p.KLens == nil && p.Softcap == 0 &&
		p.ALiBi == nil && (!p.Window.On || p.Window.Left < 0)
}

// computes accepts every variant but dropout and the bias (the _var
// kernels), or with c.full every one (the _full kernels), or for FP32's
// 3xTF32 kernels plain problems alone (wgmmaPlainOnly).
func (b *wgmmaBackward) computes(p kernels.Params) error {
	if wgmmaPlainOnly(b.c.prec) {
		return refusePlainOnly(p)
	}
	if b.c.full {
		return refuseVariants(p, "the Hopper (wgmma) kernels", allVariants)
	}
	return refuseVariants(p, "the Hopper (wgmma) kernels", masksAndMods)
}

func (b *wgmmaBackward) scratchBytes(p kernels.Params) int64 {
	return b.carve(p, 0, &wgmmaBwdScratch{})
}

// fusesDelta reports whether launch computes D itself, in the pass that
// writes dO's row image (flash_bwd_dot_do_o_image_*, which reads dO once
// for both): for the 16-bit types on calls without lengths, whose images
// hold every row. enqueueBackward then launches no D pass of its own.
func (b *wgmmaBackward) fusesDelta(p kernels.Params, buf bwdBuffers) bool {
	return b.dotImage != (cu.Function{}) && buf.vars.qLens == 0
}

// dotImageArgs is the parameter buffer of flash_bwd_dot_do_o_image_*:
// the backward's Params, then the float32 dO and the image's rows a head
// (8-byte fields after a struct of 8-byte fields: no padding).
type dotImageArgs struct {
	kernelParams
	dout uint64
	nPad int64
}

// launch converts the inputs into images in buf.scratch (K and V of the
// B·KVHeads() key heads only; with lengths, up to each batch entry's
// length rounded up to a block; not K and V where wgmmaBwdOwnsKV: the
// dK/dV kernel converts its own block and writes their images), then enqueues the statistics, the dK/dV
// kernel (a block per 128 keys of a key head: backwardGrids), or the dV
// and the dK kernels (a block per 64 keys: wgmmaBwdSplit3), and the dQ
// kernel, and for a bias gradient the dBias kernel (a block per
// wgmmaBwdBlock queries × wgmmaBwdTile keys of each bias slice). buf.delta
// must already hold D, but where fusesDelta: then the pass that writes
// dO's image writes it first.
func (b *wgmmaBackward) launch(p kernels.Params, buf bwdBuffers, stream cu.Stream) error {
	gridK, gridQ, err := backwardGrids(p, b.c.rows)
	if err != nil {
		return err
	}
	var s wgmmaBwdScratch
	b.carve(p, buf.scratch, &s)
	im := imaging{toRows: b.toRows, toVt: b.toVt, toRowsLen: b.toRowsLen, toVtLen: b.toVtLen, toRowsVt: b.toRowsVt,
		p: p, dp: b.c.dp, elemSz: elemBytes(b.c.prec), stream: stream}
	qim, kim := im.queries(buf.vars), im.keys(buf.vars)
	nqPad, nkPad := b.padded(p)
	type conversion struct {
		im                    imaging
		src, rows, transposed cu.DevicePtr
		n                     int
		pad                   int64
	}
	dp := wgmmaImageCols(b.c.prec, b.c.dp)
	ops := callerOperands(p, buf)
	ops.q, ops.k, ops.v, ops.dout = tensorAt{uint64(s.q), nqPad, dp}, tensorAt{uint64(s.k), nkPad, dp},
		tensorAt{uint64(s.v), nkPad, dp}, tensorAt{uint64(s.dout), nqPad, dp}
	ops.qT, ops.kT, ops.doutT = uint64(s.qT), uint64(s.kT), uint64(s.doutT)
	ops.lseLog2, ops.deltaPad = uint64(s.lseLog2), uint64(s.deltaPad)
	kp := newParams(p, ops)
	kind := wgmmaBackwardKernel(b.c, &kp, b.mayFuse(p))
	convs := []conversion{{qim, buf.q, s.q, s.qT, p.Nq, nqPad}}
	fused := b.fusesDelta(p, buf)
	if !fused { // else below, with D
		convs = append(convs, conversion{qim, buf.do, s.dout, s.doutT, p.Nq, nqPad})
	}
	if wgmmaBwdOwnsKV(b.c.prec, kind) {
		kp.KSrc, kp.VSrc = uint64(buf.k), uint64(buf.v) // the dK/dV kernel writes their images
	} else {
		convs = append(convs, conversion{kim, buf.k, s.k, s.kT, p.Nk, nkPad}, conversion{kim, buf.v, s.v, 0, p.Nk, nkPad})
	}
	for _, c := range convs {
		if c.transposed != 0 {
			if err := c.im.both(c.src, c.rows, c.transposed, c.n, c.pad, wgmmaBwdTile, wgmmaBwdPad); err != nil {
				return err
			}
			continue
		}
		if err := c.im.rows(c.src, c.rows, c.n, c.pad, wgmmaBwdTile, wgmmaBwdPad); err != nil {
			return err
		}
	}
	bh := int64(p.B) * int64(p.H)
	if fused {
		// A warp per image row (half a warp at dp = 64), padding rows
		// included; before the statistics, which read D.
		const threads = 256
		rowsPerBlock := int64(threads / 32)
		if b.c.dp <= 64 {
			rowsPerBlock *= 2
		}
		blocks := (bh*nqPad + rowsPerBlock - 1) / rowsPerBlock
		if blocks > math.MaxInt32 {
			return fmt.Errorf("cudakernels: %d query rows exceed the grid of dO's image", bh*nqPad)
		}
		args := dotImageArgs{kp, uint64(buf.do), nqPad}
		if err := launchWith(b.dotImage, int(blocks), threads, 0, stream, &args); err != nil {
			return err
		}
	}
	// requestFor and the kernels' argument must agree on the bias and
	// dropout: the launch shapes differ.
	switch full := kp.Bias != 0 || kp.DropoutThreshold != 0; {
	case full != b.c.full:
		return fmt.Errorf("cudakernels: internal error: Hopper backward kernels of full = %v launched on a problem of full = %v",
			b.c.full, full)
	case b.c.drop && kp.Bias != 0:
		return fmt.Errorf("cudakernels: internal error: the Hopper backward of dropout without a bias got a problem with a bias")
	}
	if wgmmaPlainOnly(b.c.prec) && kind != wgmmaFwdRowBlock {
		return fmt.Errorf("cudakernels: internal error: the FP32 Hopper backward (plain problems only) got a problem of kernel %d", kind)
	}
	stats, dkdv, dq := b.statsVar, b.dkdvVar, b.dqVar // with c.full, the _full or _drop kernels
	if kind == wgmmaFwdRowBlock || kind == wgmmaBwdFused {
		stats, dkdv, dq = b.stats, b.dkdv, b.dq
	}
	const statThreads, maxBlocks = 256, 4096
	if err := launch(stats, int(min((bh*nqPad+statThreads-1)/statThreads, maxBlocks)), statThreads, 0, stream, &kp); err != nil {
		return err
	}
	if kind == wgmmaBwdFused {
		// One kernel: dQ's sums go into the accumulator by reductions, from
		// zero; then dq from them, a block per 64 queries of a head.
		if err := cu.MemsetD32Async(s.dqAccum, 0, bh*nqPad*int64(b.c.dp), stream); err != nil {
			return fmt.Errorf("cudakernels: clearing dQ's accumulator: %w", err)
		}
		kp.DQAccum = uint64(s.dqAccum)
		if err := launch(b.dkdvDQ, gridK, b.c.threads, wgmmaBwdFusedSmem(b.c.prec, b.c.dp), stream, &kp); err != nil {
			return err
		}
		steps := bh * nqPad / wgmmaBwdTile
		if steps > math.MaxInt32 {
			return fmt.Errorf("cudakernels: %d query steps exceed the grid of dQ's conversion", steps)
		}
		if err := launch(b.dqFromAccum, int(steps), wgmmaDQAccumThreads, 0, stream, &kp); err != nil {
			return err
		}
	} else {
		// dK/dV then dQ, or dV, dK and dQ in turn where wgmmaBwdSplit3.
		type kernelLaunch struct {
			fn                  cu.Function
			grid, threads, smem int
		}
		steps := []kernelLaunch{{dkdv, gridK, b.c.threads, b.c.smem}, {dq, gridQ, b.c.threads, b.c.smemDQ}}
		if b.dv != (cu.Function{}) {
			steps = []kernelLaunch{{b.dv, gridK, wgmmaBwdDVThreads, wgmmaBwdDVSmem(b.c.dp)},
				{b.dk, gridK, b.c.threads, wgmmaBwdDKSmem(b.c.dp)}, {dq, gridQ, b.c.threads, b.c.smemDQ}}
		}
		for _, l := range steps {
			if err := launch(l.fn, l.grid, l.threads, l.smem, stream, &kp); err != nil {
				return err
			}
		}
	}
	if kp.Dbias == 0 {
		return nil
	}
	gridB, err := gridOver(buf.vars.biasSlices*int64((p.Nq+wgmmaBwdBlock-1)/wgmmaBwdBlock), p.Nk, wgmmaBwdTile)
	if err != nil {
		return err
	}
	return launch(b.dbias, gridB, b.c.threads, wgmmaDbiasSmem(b.c.prec, b.c.dp), stream, &kp)
}
