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
func (f *wgmmaForward) imageParts(p kernels.Params) []int64 {
	bh, row := int64(p.B)*int64(p.H), int64(f.dp)*int64(f.elemSz)
	k := bh * roundUp(int64(p.Nk), int64(f.bk)) * row
	return []int64{bh * roundUp(int64(p.Nq), wgmmaRows) * row, k, k}
}

func (f *wgmmaForward) scratchBytes(p kernels.Params) int64 { return scratchTotal(f.imageParts(p)) }

// launch enqueues the three conversions into images in buf.scratch, then
// the forward, on stream.
func (f *wgmmaForward) launch(p kernels.Params, buf fwdBuffers, stream cu.Stream) error {
	grid, err := gridFor(p, p.Nq, wgmmaRows)
	if err != nil {
		return err
	}
	at := carveScratch(buf.scratch, f.imageParts(p))
	q, k, v := at[0], at[1], at[2]
	im := imaging{toRows: f.toRows, toVt: f.toVt, p: p, dp: f.dp, elemSz: f.elemSz, stream: stream}
	nqPad, nkPad := roundUp(int64(p.Nq), wgmmaRows), roundUp(int64(p.Nk), int64(f.bk))
	if err := im.rows(buf.q, q, p.Nq, nqPad, wgmmaQTileRows); err != nil {
		return err
	}
	if err := im.rows(buf.k, k, p.Nk, nkPad, f.bk); err != nil {
		return err
	}
	if err := im.transposed(buf.v, v, p.Nk, nkPad, f.bk); err != nil {
		return err
	}
	return f.fn.Launch(grid, 1, 1, wgmmaThreads, 1, 1, f.smem, stream, args(
		q, k, v, buf.o, buf.lse,
		int64(p.Nq), int64(p.Nk), int64(p.D), bool64(p.Causal), p.Scale))
}

// imaging enqueues the conversions of [B·H, n, D] float32 tensors into tile
// images (csrc/sm90.cuh) for one problem, precision and padded head
// dimension.
type imaging struct {
	toRows, toVt cu.Function
	p            kernels.Params
	dp, elemSz   int
	stream       cu.Stream
}

// rows converts src (n rows per head) into row images of tiles of `tile`
// rows at dst, padded with zero rows to nPad per head.
func (im imaging) rows(src, dst cu.DevicePtr, n int, nPad int64, tile int) error {
	bh, dp := int64(im.p.B)*int64(im.p.H), int64(im.dp)
	const threads, maxBlocks = 256, 8192
	blocks := int(min((bh*nPad*dp/int64(16/im.elemSz)+threads-1)/threads, maxBlocks))
	if blocks == 0 {
		return nil
	}
	return im.toRows.Launch(blocks, 1, 1, threads, 1, 1, 0, im.stream,
		args(src, dst, bh, int64(n), nPad, int64(im.p.D), dp, int64(tile)))
}

// transposed converts src (n rows per head) into transposed images, one
// [dp, tile] image per tile of rows, padded to nPad rows per head (a
// multiple of the tile and of wgmmaVtKeys).
func (im imaging) transposed(src, dst cu.DevicePtr, n int, nPad int64, tile int) error {
	bh, dp := int64(im.p.B)*int64(im.p.H), int64(im.dp)
	const maxBlocks = 16384
	blocks := int(min(bh*(nPad/wgmmaVtKeys)*(dp/wgmmaVtCols), maxBlocks))
	if blocks == 0 {
		return nil
	}
	return im.toVt.Launch(blocks, 1, 1, 256, 1, 1, 0, im.stream,
		args(src, dst, bh, int64(n), nPad, int64(im.p.D), dp, int64(tile)))
}

// The Hopper backward (csrc/bwd_wgmma.cuh): blocks of two warpgroups own
// wgmmaBwdBlock keys (dK, dV) or queries (dQ), 64 per warpgroup, and stream
// the other side in steps (wgmmaBwdShape). Its inputs are images in tiles
// of wgmmaBwdTile rows, padded to a multiple of wgmmaBwdPad rows: Q, K, V
// and dO by rows, Qᵀ, Kᵀ and dOᵀ transposed, and the LSE (log2 units) and D
// padded likewise.
const (
	wgmmaBwdThreads = 256
	wgmmaBwdTile    = 64
	wgmmaBwdBlock   = 128
	wgmmaBwdPad     = 128
)

// wgmmaBwdBuilt reports whether csrc/hopper.cu instantiates the backward
// for prec and dp: up to 128 columns, where K, V and two stages of four
// streamed operands still fit shared memory.
func wgmmaBwdBuilt(prec Precision, dp int) bool {
	switch prec {
	case BF16, FP16, TF32:
		return dp == 64 || dp == 128
	}
	return false
}

// wgmmaBwdShape mirrors bwd_step and bwd_tstages: for TF32 above 64
// columns, steps of 32 rows and one stage of Qᵀ and dOᵀ; else 64 and two.
func wgmmaBwdShape(prec Precision, dp int) (step, tstages int) {
	if elemBytes(prec) == 4 && dp > 64 {
		return 32, 1
	}
	return 64, 2
}

// wgmmaBwdSmem mirrors bwd_dkdv_smem_bytes and bwd_dq_smem_bytes.
func wgmmaBwdSmem(prec Precision, dp int) (dkdv, dq int) {
	step, tstages := wgmmaBwdShape(prec, dp)
	row := dp * elemBytes(prec)
	fixed, streamed := 2*wgmmaBwdBlock*row, step*row
	return 1024 + fixed + 2*(2+tstages)*streamed + 4*step*4 + 7*8, 1024 + fixed + 6*streamed + 5*8
}

// wgmmaBackward is the Hopper backward for one precision and padded head
// dimension, with the conversions it needs.
type wgmmaBackward struct {
	dkdv, dq, toRows, toVt, stats cu.Function
	dkdvSmem, dqSmem, dp, elemSz  int
}

// loadWgmmaBackward looks up the Hopper backward for prec and dp in mod.
func loadWgmmaBackward(mod cu.Module, prec Precision, dp, maxSmem int) (*wgmmaBackward, error) {
	w := &wgmmaBackward{dp: dp, elemSz: elemBytes(prec)}
	w.dkdvSmem, w.dqSmem = wgmmaBwdSmem(prec, dp)
	var err error
	suffix := fmt.Sprintf("_wgmma_%v_d%d", prec, dp)
	if w.dkdv, err = lookup(mod, "flash_bwd_dkdv"+suffix, w.dkdvSmem, maxSmem); err != nil {
		return nil, err
	}
	if w.dq, err = lookup(mod, "flash_bwd_dq"+suffix, w.dqSmem, maxSmem); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		fn   *cu.Function
		name string
	}{{&w.toRows, "flash_to_image_rows_" + prec.String()}, {&w.toVt, "flash_to_image_vt_" + prec.String()},
		{&w.stats, "flash_bwd_stats_sm90"}} {
		if *c.fn, err = mod.Function(c.name); err != nil {
			return nil, fmt.Errorf("cudakernels: kernel %s: %w", c.name, err)
		}
	}
	return w, nil
}

// parts returns the byte sizes of the images and padded statistics in
// scratch order: Q, Qᵀ, dO, dOᵀ, K, Kᵀ, V, LSE, D.
func (w *wgmmaBackward) parts(p kernels.Params) []int64 {
	bh, row := int64(p.B)*int64(p.H), int64(w.dp)*int64(w.elemSz)
	q := bh * roundUp(int64(p.Nq), wgmmaBwdPad) * row
	k := bh * roundUp(int64(p.Nk), wgmmaBwdPad) * row
	st := bh * roundUp(int64(p.Nq), wgmmaBwdPad) * 4
	return []int64{q, q, q, q, k, k, k, st, st}
}

func (w *wgmmaBackward) scratchBytes(p kernels.Params) int64 { return scratchTotal(w.parts(p)) }

// launch converts the inputs into images in buf.scratch, then enqueues the
// dK/dV and the dQ kernels. buf.delta must already hold D.
func (w *wgmmaBackward) launch(p kernels.Params, buf bwdBuffers, stream cu.Stream) error {
	gridK, err := gridFor(p, p.Nk, wgmmaBwdBlock)
	if err != nil {
		return err
	}
	gridQ, err := gridFor(p, p.Nq, wgmmaBwdBlock)
	if err != nil {
		return err
	}
	at := carveScratch(buf.scratch, w.parts(p)) // Q, Qᵀ, dO, dOᵀ, K, Kᵀ, V, LSE, D
	im := imaging{toRows: w.toRows, toVt: w.toVt, p: p, dp: w.dp, elemSz: w.elemSz, stream: stream}
	nqPad, nkPad := roundUp(int64(p.Nq), wgmmaBwdPad), roundUp(int64(p.Nk), wgmmaBwdPad)
	for _, c := range []struct {
		src, rows, transposed cu.DevicePtr
		n                     int
		pad                   int64
	}{{buf.q, at[0], at[1], p.Nq, nqPad}, {buf.do, at[2], at[3], p.Nq, nqPad}, {buf.k, at[4], at[5], p.Nk, nkPad}, {buf.v, at[6], 0, p.Nk, nkPad}} {
		if err := im.rows(c.src, c.rows, c.n, c.pad, wgmmaBwdTile); err != nil {
			return err
		}
		if c.transposed != 0 {
			if err := im.transposed(c.src, c.transposed, c.n, c.pad, wgmmaBwdTile); err != nil {
				return err
			}
		}
	}
	bh := int64(p.B) * int64(p.H)
	const statThreads, maxBlocks = 256, 4096
	if err := w.stats.Launch(int(min((bh*nqPad+statThreads-1)/statThreads, maxBlocks)), 1, 1, statThreads, 1, 1, 0, stream,
		args(buf.lse, buf.delta, at[7], at[8], bh, int64(p.Nq), nqPad)); err != nil {
		return err
	}
	shape := []any{int64(p.Nq), int64(p.Nk), int64(p.D), bool64(p.Causal), p.Scale}
	if err := w.dkdv.Launch(gridK, 1, 1, wgmmaBwdThreads, 1, 1, w.dkdvSmem, stream, args(append([]any{
		at[0], at[1], at[4], at[6], at[2], at[3], at[7], at[8], buf.dk, buf.dv}, shape...)...)); err != nil {
		return err
	}
	return w.dq.Launch(gridQ, 1, 1, wgmmaBwdThreads, 1, 1, w.dqSmem, stream, args(append([]any{
		at[0], at[4], at[5], at[6], at[2], at[7], at[8], buf.dq}, shape...)...))
}
