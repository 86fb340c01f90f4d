//go:build flashgpu

package cudakernels

import (
	"errors"
	"fmt"
	"sync"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

var _ kernels.CacheBackend = (*Backend)(nil)

// cacheStore is a key/value cache's keys and values in device memory, in
// the backend's storage format (storeFor): one buffer per tensor of rows
// rows of rowStride elements, laid out as kernels.Params.KeyRow says
// (dense [B, Hkv, capacity] rows, or pages [pages, Hkv, size] rows).
type cacheStore struct {
	b         *Backend
	spec      kernels.CacheSpec
	s         storeKind
	rowStride int64

	mu     sync.Mutex
	k, v   cu.DevicePtr
	rows   int64 // rows each buffer holds
	closed bool
	// up and down are the bytes the last Forward copied to and from the
	// device, which the tests hold to the formula of cacheForward.
	up, down int64
}

// NewCacheStore implements kernels.CacheBackend: the storage of a cache in
// this backend's device memory, its format the backend's precision's
// (bf16 for BF16, fp16 for FP16, float32 for FP32 and TF32; float64 for
// float64 tensors). A dense store is allocated here, whole; a paged one
// starts empty and grows with Grow.
func (b *Backend) NewCacheStore(spec kernels.CacheSpec) (kernels.CacheStore, error) {
	if spec.Batch < 1 || spec.KVHeads < 1 || spec.D < 1 || spec.Capacity < 1 || spec.PageSize < 0 {
		return nil, fmt.Errorf("%w: cache of %d sequences, %d key heads of %d, capacity %d, pages of %d", kernels.ErrInvalidParams,
			spec.Batch, spec.KVHeads, spec.D, spec.Capacity, spec.PageSize)
	}
	if _, err := decodeDim(spec.D); err != nil {
		return nil, err
	}
	c := &cacheStore{b: b, spec: spec, s: storeFor(b.prec, spec.Float64), rowStride: roundUp(int64(spec.D), cacheRowAlign)}
	if spec.PageSize == 0 {
		if err := c.resize(int64(spec.Batch) * int64(spec.KVHeads) * int64(spec.Capacity)); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// resize makes each buffer hold rows rows, keeping the rows it holds; new
// rows are zero.
func (c *cacheStore) resize(rows int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("%w: the cache's device memory is closed", kernels.ErrInvalidParams)
	}
	if rows <= c.rows {
		return nil
	}
	return c.b.run(func() error {
		bytes := rows * c.rowStride * int64(c.s.bytes())
		// One allocation for both tensors: k is its base, which Close and
		// the next resize free.
		var k, v cu.DevicePtr
		a, err := newArena(part{&k, bytes}, part{&v, bytes})
		if err != nil {
			return err
		}
		if err := errors.Join(cu.MemsetD8(k, 0, bytes), cu.MemsetD8(v, 0, bytes)); err != nil {
			return errors.Join(fmt.Errorf("cudakernels: clearing the cache: %w", err), a.free())
		}
		if c.rows > 0 {
			old := c.rows * c.rowStride * int64(c.s.bytes())
			if err := errors.Join(cu.MemcpyDtoD(k, c.k, old), cu.MemcpyDtoD(v, c.v, old)); err != nil {
				return errors.Join(fmt.Errorf("cudakernels: growing the cache: %w", err), a.free())
			}
			if err := cu.MemFree(c.k); err != nil {
				return errors.Join(err, a.free())
			}
		}
		c.k, c.v, c.rows = k, v, rows
		return nil
	})
}

// Grow implements kernels.CacheStore.
func (c *cacheStore) Grow(pages int) error {
	if c.spec.PageSize == 0 {
		return fmt.Errorf("%w: Grow on a dense cache", kernels.ErrInvalidParams)
	}
	return c.resize(int64(pages) * int64(c.spec.KVHeads) * int64(c.spec.PageSize))
}

// Bytes implements kernels.CacheStore: both tensors, padding included.
func (c *cacheStore) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return 2 * c.rows * c.rowStride * int64(c.s.bytes())
}

// Close implements kernels.CacheStore. A backend closed first has freed
// the memory with its context.
func (c *cacheStore) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.rows == 0 {
		return nil
	}
	err := c.b.run(func() error { return cu.MemFree(c.k) })
	if errors.Is(err, errClosed) {
		err = nil
	}
	c.k, c.v, c.rows = 0, 0, 0
	return err
}

// Forward32 implements kernels.CacheStore.
func (c *cacheStore) Forward32(p kernels.Params, dest []int64, q, k, v, o, lse []float32) error {
	return cacheForward(c, p, dest, q, k, v, o, lse)
}

// Forward64 implements kernels.CacheStore.
func (c *cacheStore) Forward64(p kernels.Params, dest []int64, q, k, v, o, lse []float64) error {
	return cacheForward(c, p, dest, q, k, v, o, lse)
}

// cacheForward appends a step's rows and attends to the cache: q, the new
// k and v rows and their destinations go up, one kernel writes the rows
// into the store, the decode units (and merge) compute, and o and lse come
// down. Per step that is q, k, v, o and lse of the step and 8 bytes per new
// row (their destinations), 4 per sequence per length vector, and the block
// tables when paged (4 bytes per page of the longest sequence, per
// sequence); the cache itself never moves.
func cacheForward[T kernels.Float](c *cacheStore, p kernels.Params, dest []int64, q, k, v, o, lse []T) error {
	if (elemSize[T]() == 8) != c.spec.Float64 {
		return fmt.Errorf("%w: a call on %d-byte elements, a cache of the other element type (float64: %v)", kernels.ErrInvalidParams, elemSize[T](), c.spec.Float64)
	}
	hkv := p.KVHeads()
	newRows := p.B * hkv * p.Nq
	if p.D != c.spec.D || p.B != c.spec.Batch || hkv != c.spec.KVHeads || len(q) != p.B*p.H*p.Nq*p.D || len(k) != newRows*p.D ||
		len(v) != newRows*p.D || len(dest) != newRows || len(o) != len(q) || len(lse) != p.B*p.H*p.Nq || (p.Pages != nil) != (c.spec.PageSize > 0) {
		return fmt.Errorf("%w: cached forward of shape B=%d H=%d Hkv=%d Nq=%d D=%d (q %d, k %d, dest %d) on a cache of %d×%d×%d, pages of %d",
			kernels.ErrInvalidParams, p.B, p.H, hkv, p.Nq, p.D, len(q), len(k), len(dest), c.spec.Batch, c.spec.KVHeads, c.spec.D, c.spec.PageSize)
	}
	if p.Bias != nil || p.Dropout.On() {
		return fmt.Errorf("%w: a cached forward with a bias or dropout", ErrUnsupported)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("%w: the cache's device memory is closed", kernels.ErrInvalidParams)
	}
	rowsNeeded := int64(0)
	for _, d := range dest {
		rowsNeeded = max(rowsNeeded, d+1)
	}
	if rowsNeeded > c.rows {
		return fmt.Errorf("%w: a destination row %d past the cache's %d rows", kernels.ErrInvalidParams, rowsNeeded-1, c.rows)
	}
	s := c.s
	b := c.b
	return b.run(func() error {
		pl, err := b.reg.dec.plan(p, s)
		if err != nil {
			return err
		}
		elem := int64(elemSize[T]())
		destAt := make([]int64, len(dest))
		for i, d := range dest {
			destAt[i] = -1
			if d >= 0 {
				destAt[i] = d * c.rowStride
			}
		}
		var table []int32
		var stride int64
		if p.Pages != nil {
			table, stride = tableOf(p)
		}
		var aux auxArgs
		var a decodeArgs
		var kNew, vNew, destDev cu.DevicePtr
		po, pls := pl.partBytes(p, int(elem))
		if err := b.xfer.workspace(part{&a.q, int64(len(q)) * elem}, part{&kNew, int64(len(k)) * elem}, part{&vNew, int64(len(v)) * elem},
			part{&destDev, int64(len(destAt)) * 8}, part{&a.o, int64(len(o)) * elem}, part{&a.lse, int64(len(lse)) * elem},
			part{&a.partO, po}, part{&a.partLSE, pls}, part{&a.table, int64(len(table)) * 4}, aux.part(p)); err != nil {
			return err
		}
		up, err := uploadAll(hostCopy{a.q, bytesOfT(q)}, hostCopy{kNew, bytesOfT(k)}, hostCopy{vNew, bytesOfT(v)},
			hostCopy{destDev, bytesOf(destAt)}, hostCopy{a.table, bytesOf(table)})
		if err != nil {
			return err
		}
		c.up, c.down = up+int64(len(aux.host)), 0
		if err := aux.upload(); err != nil {
			return err
		}
		kp := newParams(p, operands{k: tensorAt{ptr: uint64(c.k)}, v: tensorAt{ptr: uint64(c.v)}})
		kp.KNew, kp.VNew, kp.DestRows = uint64(kNew), uint64(vNew), uint64(destDev)
		grid := int(min((int64(newRows)*int64(p.D)+255)/256, 4096))
		if err := launch(b.reg.dec.appendRows[s], grid, 256, 0, cu.Stream{}, &kp); err != nil {
			return fmt.Errorf("cudakernels: cache append launch: %w", err)
		}
		a.k, a.v, a.rowStride, a.tableStride = c.k, c.v, c.rowStride, stride
		a.setVars(aux.at(p, chunk{}, 0))
		if err := b.reg.dec.enqueue(p, pl, a, cu.Stream{}); err != nil {
			return err
		}
		c.down = int64(len(o)+len(lse)) * elem
		return errors.Join(downloadBytes(bytesOfT(o), a.o), downloadBytes(bytesOfT(lse), a.lse))
	})
}

// stepBytes is what cacheForward copies for a step of p on elements of
// elem bytes, as the package and op documentation state it: up, q and the
// new k and v rows, 8 bytes per new row for its destination, 4 per
// sequence for each length vector, 8 per query head for ALiBi's slopes,
// and when paged 4 bytes per page of the longest block table, per
// sequence; down, o and the LSE.
func stepBytes(p kernels.Params, elem int) (up, down int64) {
	hkv := p.KVHeads()
	rows := int64(p.B) * int64(hkv) * int64(p.Nq)
	up = (int64(p.B)*int64(p.H)*int64(p.Nq)+2*rows)*int64(p.D)*int64(elem) + 8*rows
	for _, l := range [][]int{p.QLens, p.KLens} {
		if l != nil {
			up += 4 * int64(len(l))
		}
	}
	up += 8 * int64(len(p.ALiBi))
	if p.Pages != nil {
		_, stride := tableOf(p)
		up += 4 * int64(p.B) * stride
	}
	down = int64(p.B) * int64(p.H) * int64(p.Nq) * int64(p.D+1) * int64(elem)
	return up, down
}

// ReadCeiling times reading bytes of device memory (a sum of float4s
// through flash_read_ceiling) and returns the median seconds of reps runs,
// the L2 flushed before each (through a buffer of its own, so that none of
// the bytes read is cached): the read bandwidth a memory-bound kernel can
// at best reach, which the decode benchmark measures against. Over a few
// GiB it is the device's sustained rate; at a decode step's own size it is
// the best time a step that reads those bytes once can take, launch and
// ramp included.
func (b *Backend) ReadCeiling(bytes int64, reps int) (float64, error) {
	if bytes < 16 || reps < 1 {
		return 0, fmt.Errorf("%w: ReadCeiling(%d bytes, %d runs)", kernels.ErrInvalidParams, bytes, reps)
	}
	var ms float64
	err := b.run(func() (err error) {
		n := bytes / 16
		var x, out, flush cu.DevicePtr
		a, err := newArena(part{&x, n * 16}, part{&out, 16}, part{&flush, flushBytes})
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, a.free()) }()
		grid := b.reg.dec.sms * 8
		ms, err = timeRuns(reps, flush, flushBytes, func() error {
			return launchFlat(b.reg.dec.readCeiling, grid, 256, cu.Stream{}, x, n, out)
		})
		return err
	})
	return ms / 1e3, err
}

// DecodeKernelTime times the decode of p (few query rows per key head; keys
// and values dense, [B, Hkv, Nk, D], in the format a cache of this backend
// stores, storeFor) on the device: the split-KV units and their merge, the
// L2 flushed before each of reps runs. It returns the median seconds and
// the bytes of keys and values a run reads.
func (b *Backend) DecodeKernelTime(p kernels.Params, reps int) (secs float64, bytes int64, err error) {
	if err := p.Validate(); err != nil {
		return 0, 0, err
	}
	if p.Pages != nil || p.Bias != nil || p.Dropout.On() || reps < 1 {
		return 0, 0, fmt.Errorf("%w: DecodeKernelTime takes dense keys, no bias or dropout, reps ≥ 1", kernels.ErrInvalidParams)
	}
	s := storeFor(b.prec, false)
	rowStride := roundUp(int64(p.D), cacheRowAlign)
	kvBytes := int64(p.B) * int64(p.KVHeads()) * int64(p.Nk) * rowStride * int64(s.bytes())
	var ms float64
	err = b.run(func() (err error) {
		pl, err := b.reg.dec.plan(p, s)
		if err != nil {
			return err
		}
		var aux auxArgs
		var a decodeArgs
		var flush cu.DevicePtr
		po, pls := pl.partBytes(p, 4)
		ar, err := newArena(part{&a.q, int64(p.QLen()) * 4}, part{&a.k, kvBytes}, part{&a.v, kvBytes}, part{&a.o, int64(p.QLen()) * 4},
			part{&a.lse, int64(p.LSELen()) * 4}, part{&a.partO, po}, part{&a.partLSE, pls}, part{&flush, flushBytes}, aux.part(p))
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, ar.free()) }()
		// 0x3c bytes are small finite numbers in every format.
		for _, x := range []struct {
			at    cu.DevicePtr
			bytes int64
		}{{a.q, int64(p.QLen()) * 4}, {a.k, kvBytes}, {a.v, kvBytes}} {
			if err := cu.MemsetD8(x.at, 0x3c, x.bytes); err != nil {
				return err
			}
		}
		if err := aux.upload(); err != nil {
			return err
		}
		a.setVars(aux.at(p, chunk{}, 0))
		a.rowStride = rowStride
		ms, err = timeRuns(reps, flush, flushBytes, func() error { return b.reg.dec.enqueue(p, pl, a, cu.Stream{}) })
		return err
	})
	return ms / 1e3, 2 * kvBytes, err
}
