//go:build flashgpu

package cudakernels

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// The Hopper forward (csrc/fwd_wgmma.cuh, module ptx/flash_sm90a.ptx):
// blocks of two warpgroups own wgmmaRows query rows, 64 each, and walk key
// tiles of wgmmaFwdBK keys. Its inputs are tile images of Q, K and Vᵀ that
// two conversion kernels write into scratch memory first, padded with zeros
// to whole tiles: Q to a multiple of wgmmaRows rows (tiles of
// wgmmaQTileRows), K and V to a multiple of the key tile.
const (
	wgmmaThreads   = 256
	wgmmaRows      = 128
	wgmmaQTileRows = 64
	// Blocks of flash_to_image_vt take 64 keys × 32 columns.
	wgmmaVtKeys, wgmmaVtCols = 64, 32
)

// wgmmaBuilt reports whether csrc/hopper.cu instantiates the forward for
// precision prec and padded head dimension dp.
func wgmmaBuilt(prec Precision, dp int) bool {
	switch prec {
	case BF16, FP16:
		return dp == 64 || dp == 128 || dp == 256
	case TF32:
		return dp == 64 || dp == 128
	}
	return false
}

// wgmmaFwdBK mirrors fwd_bk: 64 keys for 32-bit operands or dp = 256, else
// 128.
func wgmmaFwdBK(prec Precision, dp int) int {
	if elemBytes(prec) == 4 || dp > 128 {
		return 64
	}
	return 128
}

// wgmmaFwdSmem mirrors fwd_smem_bytes: alignment slack, Q, two stages of K
// and Vᵀ, five mbarriers.
func wgmmaFwdSmem(prec Precision, dp int) int {
	eb := elemBytes(prec)
	return 1024 + wgmmaRows*dp*eb + 4*wgmmaFwdBK(prec, dp)*dp*eb + 5*8
}

// wgmmaForward is the Hopper forward for one precision and padded head
// dimension, with its conversion kernels.
type wgmmaForward struct {
	fn, toRows, toVt     cu.Function
	name                 string
	smem, bk, dp, elemSz int
}

// loadWgmmaForward looks up the Hopper forward for prec and dp in mod (the
// sm_90a module).
func loadWgmmaForward(mod cu.Module, prec Precision, dp, maxSmem int) (*wgmmaForward, error) {
	f := &wgmmaForward{name: fmt.Sprintf("flash_fwd_wgmma_%v_d%d", prec, dp), smem: wgmmaFwdSmem(prec, dp),
		bk: wgmmaFwdBK(prec, dp), dp: dp, elemSz: elemBytes(prec)}
	var err error
	for _, c := range []struct {
		fn   *cu.Function
		name string
	}{{&f.toRows, "flash_to_image_rows_" + prec.String()}, {&f.toVt, "flash_to_image_vt_" + prec.String()}} {
		if *c.fn, err = mod.Function(c.name); err != nil {
			return nil, fmt.Errorf("cudakernels: kernel %s: %w", c.name, err)
		}
	}
	f.fn, err = lookup(mod, f.name, f.smem, maxSmem)
	return f, err
}

func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }

// imageParts returns the byte sizes of the Q, K and Vᵀ images of p.
func (f *wgmmaForward) imageParts(p kernels.Params) (q, k, v int64) {
	bh, row := int64(p.B)*int64(p.H), int64(f.dp)*int64(f.elemSz)
	k = bh * roundUp(int64(p.Nk), int64(f.bk)) * row
	return bh * roundUp(int64(p.Nq), wgmmaRows) * row, k, k
}

func (f *wgmmaForward) scratchBytes(p kernels.Params) int64 {
	q, k, v := f.imageParts(p)
	return alignScratch(q) + alignScratch(k) + alignScratch(v)
}

// launch enqueues the three conversions into images in buf.scratch, then
// the forward, on stream.
func (f *wgmmaForward) launch(p kernels.Params, buf fwdBuffers, stream cu.Stream) error {
	grid, err := gridFor(p, p.Nq, wgmmaRows)
	if err != nil {
		return err
	}
	qb, kb, _ := f.imageParts(p)
	q := buf.scratch
	k := q + cu.DevicePtr(alignScratch(qb))
	v := k + cu.DevicePtr(alignScratch(kb))
	bh, dp := int64(p.B)*int64(p.H), int64(f.dp)
	nqPad, nkPad := roundUp(int64(p.Nq), wgmmaRows), roundUp(int64(p.Nk), int64(f.bk))
	vectorWidth := int64(16 / f.elemSz)
	for _, c := range []struct {
		src, dst    cu.DevicePtr
		n, pad, per int64
	}{{buf.q, q, int64(p.Nq), nqPad, wgmmaQTileRows}, {buf.k, k, int64(p.Nk), nkPad, int64(f.bk)}} {
		const threads, maxBlocks = 256, 8192
		blocks := int(min((bh*c.pad*dp/vectorWidth+threads-1)/threads, maxBlocks))
		if blocks == 0 {
			continue
		}
		if err := f.toRows.Launch(blocks, 1, 1, threads, 1, 1, 0, stream,
			args(c.src, c.dst, bh, c.n, c.pad, int64(p.D), dp, c.per)); err != nil {
			return err
		}
	}
	const maxVtBlocks = 16384
	if blocks := int(min(bh*(nkPad/wgmmaVtKeys)*(dp/wgmmaVtCols), maxVtBlocks)); blocks > 0 {
		if err := f.toVt.Launch(blocks, 1, 1, 256, 1, 1, 0, stream,
			args(buf.v, v, bh, int64(p.Nk), nkPad, int64(p.D), dp, int64(f.bk))); err != nil {
			return err
		}
	}
	return f.fn.Launch(grid, 1, 1, wgmmaThreads, 1, 1, f.smem, stream, args(
		q, k, v, buf.o, buf.lse,
		int64(p.Nq), int64(p.Nk), int64(p.D), bool64(p.Causal), p.Scale))
}
