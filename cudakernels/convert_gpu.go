//go:build flashgpu

package cudakernels

import (
	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// The element-wise kernels that prepare the tensor-core kernels' operands
// (csrc/fwd_mma.cuh, sm90.cuh) and round the CUDA-core backward's operands
// (csrc/round.cuh). They see flat, dense row-major matrices, so they keep
// short argument lists (launchFlat) instead of Params.

// launchToStorage enqueues the conversion of the [B·H·rows, D] float32
// matrix at src into the [B·H·rows, dp] matrix at dst of the operand type
// (zero columns past D); each thread converts vectorWidth elements (16
// bytes of output).
func launchToStorage(fn cu.Function, src, dst cu.DevicePtr, p kernels.Params, rows, dp, vectorWidth int, stream cu.Stream) error {
	n := int64(p.B) * int64(p.H) * int64(rows)
	const threads, maxBlocks = 256, 8192
	chunks := n * int64(dp) / int64(vectorWidth)
	blocks := int(min((chunks+threads-1)/threads, maxBlocks))
	if blocks == 0 {
		return nil
	}
	return launchFlat(fn, blocks, threads, stream, src, dst, n, int64(p.D), int64(dp))
}

// launchToVt enqueues TF32's transposed copy of V (flash_to_tf32_vt: blocks
// of 32 × 8 threads striding over tiles of 32 keys × 32 columns).
func launchToVt(fn cu.Function, src, dst cu.DevicePtr, p kernels.Params, dp int, stream cu.Stream) error {
	bh := int64(p.B) * int64(p.H)
	tiles := bh * ((transposedKeys(p.Nk) + 31) / 32) * int64(dp/32)
	const maxBlocks = 16384
	blocks := int(min(tiles, maxBlocks))
	if blocks == 0 {
		return nil
	}
	return launchFlat(fn, blocks, 256, stream, src, dst, bh, int64(p.Nk), int64(p.D), int64(dp))
}

// launchRound enqueues the storage rounding of n float32 elements at x in
// place (a grid-stride loop, so any grid covers n).
func launchRound(fn cu.Function, x cu.DevicePtr, n int, stream cu.Stream) error {
	const threads, maxBlocks = 256, 4096
	blocks := min((n+threads-1)/threads, maxBlocks)
	if blocks == 0 {
		return nil
	}
	return launchFlat(fn, blocks, threads, stream, x, int64(n))
}

// imaging enqueues the conversions of [B·H, n, D] float32 tensors into the
// Hopper family's tile images (csrc/sm90.cuh) for one problem, precision
// and padded head dimension. With per-sequence lengths (lens ≠ 0: the
// call's int32 lengths on the device; head bh of the conversion in batch
// entry (first + bh) / per) the _len conversions write each head's rows up
// to its length rounded up to unit, zeros past the length, and skip the
// tiles after them, which no kernel reads (csrc/sm90.cuh, SeqRows).
type imaging struct {
	toRows, toVt       cu.Function
	toRowsLen, toVtLen cu.Function
	toRowsVt           cu.Function // rows and transposed in one pass; zero where not loaded
	p                  kernels.Params
	dp, elemSz         int
	stream             cu.Stream
	lens               cu.DevicePtr
	first, per         int64
}

// queries returns im for the query-like tensors (Q, dO) of a launch placed
// in its call by v: their lengths are v's qLens.
func (im imaging) queries(v variantArgs) imaging {
	im.lens, im.first, im.per = cu.DevicePtr(v.qLens), v.pair0, callHeads(v, im.p)
	return im
}

// keys returns im for the key-like tensors (K, V) of a launch placed in its
// call by v: p.KVHeads() heads per batch entry instead of p.H (imaging
// reads only B, H and D), and v's kLens. A launch starts on a group
// boundary, so key head bh of the launch is query pair (pair0 + bh·g) / g
// of the call's pairs divided by g.
func (im imaging) keys(v variantArgs) imaging {
	g := int64(im.p.H / im.p.KVHeads())
	im.lens, im.first, im.per = cu.DevicePtr(v.kLens), v.pair0/g, callHeads(v, im.p)/g
	im.p.H = im.p.KVHeads()
	return im
}

// callHeads is the query heads per batch entry of the call v places a
// launch in (its own H when v.heads is 0).
func callHeads(v variantArgs, p kernels.Params) int64 {
	if v.heads != 0 {
		return v.heads
	}
	return int64(p.H)
}

// rows converts src (n rows per head) into row images of tiles of `tile`
// rows at dst, padded with zero rows to nPad per head; with lengths, up to
// each head's length rounded up to unit (a multiple of tile).
func (im imaging) rows(src, dst cu.DevicePtr, n int, nPad int64, tile, unit int) error {
	bh, dp := int64(im.p.B)*int64(im.p.H), int64(im.dp)
	const threads, maxBlocks = 256, 8192
	if im.lens != 0 {
		// One tile per block: blocks past the lengths end at once.
		blocks := int(min(bh*(nPad/int64(tile)), 1<<16))
		if blocks == 0 {
			return nil
		}
		return launchFlat(im.toRowsLen, blocks, threads, im.stream, src, dst, bh, int64(n), nPad, int64(im.p.D), dp,
			int64(tile), im.lens, im.first, im.per, int64(unit))
	}
	blocks := int(min((bh*nPad*dp/int64(16/im.elemSz)+threads-1)/threads, maxBlocks))
	if blocks == 0 {
		return nil
	}
	return launchFlat(im.toRows, blocks, threads, im.stream, src, dst, bh, int64(n), nPad, int64(im.p.D), dp, int64(tile))
}

// transposed converts src (n rows per head) into transposed images, one
// [dp, tile] image per tile of rows, padded to nPad rows per head (a
// multiple of the tile and of wgmmaVtKeys); with lengths, up to each head's
// length rounded up to unit.
func (im imaging) transposed(src, dst cu.DevicePtr, n int, nPad int64, tile, unit int) error {
	bh, dp := int64(im.p.B)*int64(im.p.H), int64(im.dp)
	const maxBlocks = 16384
	blocks := int(min(bh*(nPad/wgmmaVtKeys)*(dp/wgmmaVtCols), maxBlocks))
	if blocks == 0 {
		return nil
	}
	if im.lens != 0 {
		return launchFlat(im.toVtLen, blocks, 256, im.stream, src, dst, bh, int64(n), nPad, int64(im.p.D), dp,
			int64(tile), im.lens, im.first, im.per, int64(unit))
	}
	return launchFlat(im.toVt, blocks, 256, im.stream, src, dst, bh, int64(n), nPad, int64(im.p.D), dp, int64(tile))
}

// both writes the row images (tiles of `tile` rows) and the transposed
// images of src, as rows and transposed do, in one pass over src where
// that conversion is loaded and the call has no lengths; else in two.
func (im imaging) both(src, rows, transposed cu.DevicePtr, n int, nPad int64, tile, unit int) error {
	if im.toRowsVt == (cu.Function{}) || im.lens != 0 {
		if err := im.rows(src, rows, n, nPad, tile, unit); err != nil {
			return err
		}
		return im.transposed(src, transposed, n, nPad, tile, unit)
	}
	bh, dp := int64(im.p.B)*int64(im.p.H), int64(im.dp)
	const maxBlocks = 16384
	blocks := int(min(bh*(nPad/wgmmaVtKeys)*(dp/wgmmaVtCols), maxBlocks))
	if blocks == 0 {
		return nil
	}
	return launchFlat(im.toRowsVt, blocks, 256, im.stream, src, transposed, rows, bh, int64(n), nPad, int64(im.p.D), dp,
		int64(tile))
}

// transposedKeys is the row length of TF32's transposed V: nk rounded up to
// the 8 keys its permutation works on.
func transposedKeys(nk int) int64 { return (int64(nk) + 7) / 8 * 8 }

// Blocks of flash_to_image_vt take 64 keys × 64 columns.
const wgmmaVtKeys, wgmmaVtCols = 64, 64
