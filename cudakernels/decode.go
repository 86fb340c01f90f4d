package cudakernels

import (
	"fmt"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// What the host knows of the decoding kernels (csrc/decode.cuh, launched
// by decode_gpu.go), in plain Go so that CPU tests check it: the storage
// formats, the compiled shapes, each unit's shared memory, and the split
// choice.
//
// The GPU's key splits: kernels.SplitKV
// serves the CPU, where a unit is a goroutine's and 64 cores are plenty;
// on the GPU a unit is one warp, and one multiprocessor holds several,
// each of which waits on memory most of the time, so the device needs
// many more of them in flight than it has multiprocessors.
const (
	decodeMaxSplits    = 256 // splits per key head and row tile at most
	decodeMinSplitKeys = 64  // keys a split gets at least: four chunks
	decodeUnitsPerSM   = 16  // resident units per multiprocessor at most
	// decodeUnsplitPerSM is the units per multiprocessor from which two
	// splits cost more in their merge than they gain in parallelism. On
	// the H200 (bench/RESULTS.md, 2026-12-04): at 3.9 units per
	// multiprocessor (bf16, B = 64, Hkv = 8, 1k keys) two splits took
	// 96.5 and 97.5 µs, none 83.1 and 91.9; at 1.9 (fp32, B = 8, Hkv = 32)
	// two splits read 2.78–3.65 TB/s, none 2.35–2.59.
	decodeUnsplitPerSM = 3
)

// decodeResident is the number of units a device of sms multiprocessors,
// each with smemPerSM bytes of shared memory, holds at once when a unit
// takes unitBytes and a block perBlock units: whole blocks, as the
// hardware places them.
func decodeResident(sms, smemPerSM, unitBytes, perBlock int) int {
	return sms * max(1, min(decodeUnitsPerSM, smemPerSM/(unitBytes*perBlock)*perBlock))
}

// decodeSplits returns the key splits of a decode over units units (key
// heads times row tiles) of at most keys keys each, on a device of sms
// multiprocessors holding resident units: 1 when the units fill it
// already, else as many splits as fit it in one wave (rounded down: a few
// units past a full wave would run in a second one, and double the time),
// each of at least decodeMinSplitKeys keys, at most decodeMaxSplits; but
// not two when the units alone give every multiprocessor
// decodeUnsplitPerSM of them. It is a pure function of the problem and
// the device, never of timing, so a result never depends on how a run
// was scheduled.
func decodeSplits(units, keys, resident, sms int) int {
	if units >= resident {
		return 1
	}
	s := max(1, min(resident/units, keys/decodeMinSplitKeys, decodeMaxSplits))
	if s == 2 && units >= decodeUnsplitPerSM*sms {
		return 1
	}
	return s
}

// decodeMergeThreads is decode.cuh's kMergeThreads: the most threads of a
// merge block, which merges 32 columns of one row.
const decodeMergeThreads = 256

// decodeMergeBlock is the threads of a merge block for `splits` splits: a
// warp per split up to eight. The block's threads compute one weight
// each, so it needs at least `splits` of them (decodeMaxSplits ≤
// decodeMergeThreads); warps beyond the splits would only wait.
func decodeMergeBlock(splits int) int { return 32 * min(decodeMergeThreads/32, splits) }

// storeKind is the element format the decode units read keys and values
// in.
type storeKind int

const (
	storeF32 storeKind = iota
	storeBF16
	storeFP16
	storeF64
)

var storeNames = [...]string{"f32", "bf16", "fp16", "f64"}

func (s storeKind) String() string { return storeNames[s] }

// bytes is the size of one stored element; computeBytes that of the
// arithmetic (float, or double for float64).
func (s storeKind) bytes() int {
	switch s {
	case storeBF16, storeFP16:
		return 2
	case storeF64:
		return 8
	}
	return 4
}

func (s storeKind) computeBytes() int {
	if s == storeF64 {
		return 8
	}
	return 4
}

// storeFor is a cache's storage format on a backend of precision prec: the
// 16-bit formats for BF16 and FP16 (what those precisions round K and V
// to anyway, at half the bytes per step), float32 for FP32 and TF32, and
// float64 for float64 tensors.
func storeFor(prec Precision, f64 bool) storeKind {
	switch {
	case f64:
		return storeF64
	case prec == BF16:
		return storeBF16
	case prec == FP16:
		return storeFP16
	}
	return storeF32
}

// The compiled shapes of decode.cu: head dimensions (DP; a CUDA-core
// unit's columns per lane are DP/32) and rows per unit, by storage format:
// float32 and float64 on CUDA cores in units of one row, four or eight,
// bf16 and fp16 on tensor cores in units of decodeTensorRows.
var decodeDims = [...]int{64, 128, 256}

const decodeTensorRows = 16

// decodeTiles returns the rows per unit compiled for keys stored as s.
func decodeTiles(s storeKind) []int {
	if s == storeBF16 || s == storeFP16 {
		return []int{decodeTensorRows}
	}
	return []int{1, 4, 8}
}

// decodeTile returns the rows per unit for a key head's rows query rows
// on keys stored as s: the smallest compiled unit that holds them all,
// else the largest (a long group is cut into tiles of it). Rows a unit
// holds beyond the group's cost registers and products for nothing.
func decodeTile(s storeKind, rows int) int {
	tiles := decodeTiles(s)
	for _, t := range tiles {
		if t >= rows {
			return t
		}
	}
	return tiles[len(tiles)-1]
}

// decode.cuh's Layout constants.
const (
	decodeChunk      = 16
	decodePad        = 16
	decodeSmemBudget = 200 << 10
)

// decodeLayout mirrors decode.cuh's Layout: a unit's shared memory in
// bytes and the units (warps) per block. CUDA-core units double buffer
// their chunks and keep their rows' queries and probabilities in shared
// memory; the tensor-core unit keeps those in registers and takes three
// buffers. The kernel traps when launched with another shape
// (require_launch), so a drift fails every test.
func decodeLayout(s storeKind, dp, rows int) (unitBytes, perBlock int) {
	row := dp*s.bytes() + decodePad
	buf := 2 * decodeChunk * row
	if rows == decodeTensorRows {
		unitBytes = 3 * buf
	} else {
		unitBytes = 2*buf + rows*dp*s.computeBytes() + rows*decodeChunk*s.computeBytes()
	}
	switch {
	case 4*unitBytes <= decodeSmemBudget:
		return unitBytes, 4
	case 2*unitBytes <= decodeSmemBudget:
		return unitBytes, 2
	}
	return unitBytes, 1
}

// decodeDim returns the compiled head dimension that holds d columns.
func decodeDim(d int) (int, error) {
	for _, dp := range decodeDims {
		if d <= dp {
			return dp, nil
		}
	}
	return 0, fmt.Errorf("%w: head dimension %d: decoding compiles up to %d", ErrUnsupported, d, decodeDims[len(decodeDims)-1])
}

// decodeShape is the launch of a decode: the compiled head dimension and
// rows per unit (tile) that serve it, a unit's shared memory and the units
// per block (decodeLayout), the query rows per key head, the key splits,
// the units and the blocks.
type decodeShape struct {
	dp, tile, unitBytes, perBlock int
	rows                          int // query rows per key head: group × Nq
	splits                        int
	units                         int64
	grid                          int
	f64                           bool // float64 arithmetic
}

// planDecode returns the shape of a decode of p on keys stored as s, on a
// device of sms multiprocessors with smemPerSM bytes of shared memory
// each: decodeSplits for the units the device holds at once, so that one
// sequence's key heads fill the device, unless splitsOverride is positive.
func planDecode(p kernels.Params, s storeKind, sms, smemPerSM, splitsOverride int) (decodeShape, error) {
	dp, err := decodeDim(p.D)
	if err != nil {
		return decodeShape{}, err
	}
	sh := decodeShape{dp: dp, rows: p.H / p.KVHeads() * p.Nq, f64: s == storeF64}
	sh.tile = decodeTile(s, sh.rows)
	sh.unitBytes, sh.perBlock = decodeLayout(s, dp, sh.tile)
	tiles := int64((sh.rows + sh.tile - 1) / sh.tile)
	keys := p.Nk
	if p.KLens != nil {
		keys = 0
		for _, n := range p.KLens {
			keys = max(keys, n)
		}
	}
	units := int(int64(p.B) * int64(p.KVHeads()) * tiles)
	sh.splits = decodeSplits(units, keys, decodeResident(sms, smemPerSM, sh.unitBytes, sh.perBlock), sms)
	if splitsOverride > 0 {
		sh.splits = splitsOverride
	}
	if sh.splits > decodeMaxSplits {
		return sh, fmt.Errorf("%w: %d key splits, more than the merge takes (%d)", kernels.ErrInvalidParams, sh.splits, decodeMaxSplits)
	}
	sh.units = int64(p.B) * int64(p.KVHeads()) * tiles * int64(sh.splits)
	blocks := (sh.units + int64(sh.perBlock) - 1) / int64(sh.perBlock)
	if blocks > 1<<31-1 {
		return sh, fmt.Errorf("%w: %w: %d thread blocks, more than a grid holds", kernels.ErrInvalidParams, ErrUnsupported, blocks)
	}
	sh.grid = int(blocks)
	return sh, nil
}

// mergeBlocks is the blocks of the merge of a decode of p with shape sh:
// one per 32 columns of each row of each key head.
func (sh decodeShape) mergeBlocks(p kernels.Params) int64 {
	return int64(p.B) * int64(p.KVHeads()) * int64(sh.rows) * int64((p.D+31)/32)
}

// partBytes is the size of the partial results of a decode of shape sh on
// compute elements of elem bytes (0 with one split): outputs and (lse,
// seen).
func (sh decodeShape) partBytes(p kernels.Params, elem int) (o, lse int64) {
	if sh.splits == 1 {
		return 0, 0
	}
	n := int64(p.B) * int64(p.KVHeads()) * int64(sh.rows) * int64(sh.splits)
	return n * int64(p.D) * int64(elem), 2 * n * int64(elem)
}

// cacheRowAlign is the elements a stored key or value row is padded to: 8
// makes every row of every format a whole number of 16-byte pieces, which
// the decode units copy with cp.async. The padding stays zero.
const cacheRowAlign = 8

// roundUp returns n rounded up to a multiple of m.
func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }

// tableOf packs p's block tables as the units read them: int32 [B,
// stride], stride the longest table (at least 1).
func tableOf(p kernels.Params) ([]int32, int64) {
	stride := 1
	for _, t := range p.Pages.Table {
		stride = max(stride, len(t))
	}
	out := make([]int32, p.B*stride)
	for b, t := range p.Pages.Table {
		for i, page := range t {
			out[b*stride+i] = int32(page)
		}
	}
	return out, int64(stride)
}
