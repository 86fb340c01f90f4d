//go:build flashgpu

package cudakernels

import (
	"errors"
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// Decoding on the GPU (csrc/decode.cuh): split-KV units, on tensor cores
// for keys stored in 16 bits and on CUDA cores for float32 and float64, for
// a forward with few query rows per key head, reading keys and values in
// place, dense or paged, in the caller's float32 or float64 or in a
// key/value cache's bf16 or fp16 (CacheStore). The backend's forward runs
// every paged problem this way; a device-resident cache runs all of its
// steps this way, the prefill included.

type decodeKey struct {
	s        storeKind
	dp, rows int
}

// decoder holds the decode module's kernels; it is used on the worker's
// thread.
type decoder struct {
	mod         cu.Module
	units       map[decodeKey]cu.Function // the unit kernels
	merge       [2]cu.Function            // float32, float64
	appendRows  [len(storeNames)]cu.Function
	readCeiling cu.Function
	sms         int
	smemPerSM   int // shared memory of a multiprocessor, in bytes
	// splitsOverride fixes the key splits when positive (tests of the
	// merge over split counts).
	splitsOverride int
}

// loadDecoder loads decode_sm80.ptx and looks up its kernels.
func loadDecoder(kernelDir string, dev Capability) (_ *decoder, err error) {
	// d is not the named result: a failing return sets that to nil, and the
	// deferred unload still needs d.
	d := &decoder{units: map[decodeKey]cu.Function{}, sms: dev.SMs, smemPerSM: dev.MaxSmem}
	if d.mod, err = loadModule(kernelDir, "decode_sm80.ptx"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.mod.Unload())
		}
	}()
	for s := range storeKind(len(storeNames)) {
		for _, dp := range decodeDims {
			for _, rows := range decodeTiles(s) {
				unitBytes, perBlock := decodeLayout(s, dp, rows)
				name := fmt.Sprintf("flash_decode_%v_d%d_r%d", s, dp, rows)
				if d.units[decodeKey{s, dp, rows}], err = lookup(d.mod, name, unitBytes*perBlock, dev.MaxSmem); err != nil {
					return nil, err
				}
			}
		}
		if d.appendRows[s], err = function(d.mod, "flash_cache_append_"+s.String()); err != nil {
			return nil, err
		}
	}
	for i, name := range []string{"f32", "f64"} {
		if d.merge[i], err = function(d.mod, "flash_decode_merge_"+name); err != nil {
			return nil, err
		}
	}
	if d.readCeiling, err = function(d.mod, "flash_read_ceiling"); err != nil {
		return nil, err
	}
	return d, nil
}

// decodePlan is one decode launch: its shape (decode.go's planDecode) and
// the unit kernel compiled for it.
type decodePlan struct {
	decodeShape
	unit cu.Function
}

// plan chooses the unit kernel and the key splits for p on keys stored
// as s (planDecode on this device).
func (d *decoder) plan(p kernels.Params, s storeKind) (decodePlan, error) {
	sh, err := planDecode(p, s, d.sms, d.smemPerSM, d.splitsOverride)
	if err != nil {
		return decodePlan{}, err
	}
	return decodePlan{decodeShape: sh, unit: d.units[decodeKey{s, sh.dp, sh.tile}]}, nil
}

// decodeArgs are the device addresses of one decode launch.
type decodeArgs struct {
	q, k, v, o, lse     cu.DevicePtr
	partO, partLSE      cu.DevicePtr
	table               cu.DevicePtr // int32 [B, tableStride], paged only
	tableStride         int64
	rowStride           int64 // elements between stored key rows
	qLens, kLens, alibi uint64
}

// setVars takes the lengths and slopes of a call's variantArgs.
func (a *decodeArgs) setVars(v variantArgs) { a.qLens, a.kLens, a.alibi = v.qLens, v.kLens, v.alibi }

// enqueue launches the units of plan pl, then the merge when the keys are
// split, on stream.
func (d *decoder) enqueue(p kernels.Params, pl decodePlan, a decodeArgs, stream cu.Stream) error {
	kp := newParams(p, operands{q: dense(a.q, p.Nq, p.D), o: dense(a.o, p.Nq, p.D), lse: uint64(a.lse),
		k: tensorAt{ptr: uint64(a.k), rows: int64(p.Nk), ld: a.rowStride}, v: tensorAt{ptr: uint64(a.v), rows: int64(p.Nk), ld: a.rowStride},
		vars: variantArgs{heads: int64(p.H), qLens: a.qLens, kLens: a.kLens, alibi: a.alibi}})
	kp.Splits, kp.PartO, kp.PartLse = int64(pl.splits), uint64(a.partO), uint64(a.partLSE)
	if p.Pages != nil {
		kp.BlockTable, kp.TableStride, kp.PageSize = uint64(a.table), a.tableStride, int64(p.Pages.Size)
	}
	if err := launch(pl.unit, pl.grid, 32*pl.perBlock, pl.unitBytes*pl.perBlock, stream, &kp); err != nil {
		return fmt.Errorf("cudakernels: decode launch: %w", err)
	}
	if pl.splits == 1 {
		return nil
	}
	merge := d.merge[0]
	if pl.f64 {
		merge = d.merge[1]
	}
	blocks := pl.mergeBlocks(p)
	if blocks > 1<<31-1 {
		return fmt.Errorf("%w: %w: %d blocks to merge, more than a grid holds", kernels.ErrInvalidParams, ErrUnsupported, blocks)
	}
	if err := launch(merge, int(blocks), decodeMergeBlock(pl.splits), 0, stream, &kp); err != nil {
		return fmt.Errorf("cudakernels: decode merge launch: %w", err)
	}
	return nil
}

// bytesOf views a slice of integers as bytes.
func bytesOf[E int32 | int64](x []E) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*int(unsafe.Sizeof(x[0])))
}

// uploadBytes copies host bytes to dst (synchronously: pageable memory).
func uploadBytes(dst cu.DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if err := cu.MemcpyHtoD(dst, unsafe.Pointer(&src[0]), int64(len(src))); err != nil {
		return fmt.Errorf("cudakernels: copying to the device: %w", err)
	}
	return nil
}

// hostCopy is one host-to-device copy of a call.
type hostCopy struct {
	to   cu.DevicePtr
	from []byte
}

// uploadAll makes the copies in order and returns the bytes copied.
func uploadAll(copies ...hostCopy) (int64, error) {
	var n int64
	for _, c := range copies {
		if err := uploadBytes(c.to, c.from); err != nil {
			return n, err
		}
		n += int64(len(c.from))
	}
	return n, nil
}

// downloadBytes copies device bytes back into dst.
func downloadBytes(dst []byte, src cu.DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	if err := cu.MemcpyDtoH(unsafe.Pointer(&dst[0]), src, int64(len(dst))); err != nil {
		return fmt.Errorf("cudakernels: copying from the device: %w", err)
	}
	return nil
}

// decodeForward is the backend's forward of a paged problem: q, the pool's
// k and v, o and lse go up and down whole, through the workspace, and the
// units read the pool in the caller's element type.
func decodeForward[T kernels.Float](b *Backend, p kernels.Params, q, k, v, o, lse []T) error {
	s := storeFor(FP32, elemSize[T]() == 8) // the caller's element type
	return b.run(func() error {
		pl, err := b.reg.dec.plan(p, s)
		if err != nil {
			return err
		}
		var aux auxArgs
		var a decodeArgs
		elem := int64(elemSize[T]())
		table, stride := tableOf(p)
		po, pls := pl.partBytes(p, int(elem))
		if err := b.xfer.workspace(part{&a.q, int64(len(q)) * elem}, part{&a.k, int64(len(k)) * elem}, part{&a.v, int64(len(v)) * elem},
			part{&a.o, int64(len(o)) * elem}, part{&a.lse, int64(len(lse)) * elem}, part{&a.partO, po}, part{&a.partLSE, pls},
			part{&a.table, int64(len(table)) * 4}, aux.part(p)); err != nil {
			return err
		}
		if _, err := uploadAll(hostCopy{a.q, bytesOfT(q)}, hostCopy{a.k, bytesOfT(k)}, hostCopy{a.v, bytesOfT(v)},
			hostCopy{a.table, bytesOf(table)}); err != nil {
			return err
		}
		if err := aux.upload(); err != nil {
			return err
		}
		a.setVars(aux.at(p, chunk{}, 0))
		a.tableStride, a.rowStride = stride, int64(p.D)
		if err := b.reg.dec.enqueue(p, pl, a, cu.Stream{}); err != nil {
			return err
		}
		return errors.Join(downloadBytes(bytesOfT(o), a.o), downloadBytes(bytesOfT(lse), a.lse))
	})
}

// bytesOfT views a []T as bytes.
func bytesOfT[T kernels.Float](x []T) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*elemSize[T]())
}
