//go:build flashgpu

package cudakernels

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// auxArgs are the device copies of a call's per-entry variant data, the
// lengths (int32, as the kernels read them) and the ALiBi slopes (float64),
// packed into one workspace part and uploaded once per call.
type auxArgs struct {
	base                cu.DevicePtr
	host                []byte
	qLens, kLens, alibi int // byte offsets into host, −1 where absent
}

// part lays out p's data and returns the workspace part that holds it (0
// bytes for a call without lengths or slopes).
func (a *auxArgs) part(p kernels.Params) part {
	a.qLens, a.kLens, a.alibi = -1, -1, -1
	a.host = a.host[:0]
	if p.ALiBi != nil {
		a.alibi = len(a.host)
		for _, s := range p.ALiBi {
			a.host = append(a.host, unsafe.Slice((*byte)(unsafe.Pointer(&s)), 8)...)
		}
	}
	for _, l := range []struct {
		lens []int
		at   *int
	}{{p.QLens, &a.qLens}, {p.KLens, &a.kLens}} {
		if l.lens == nil {
			continue
		}
		*l.at = len(a.host)
		for _, n := range l.lens {
			v := int32(n) // Validate bounds lengths by Nq and Nk, below 2³¹
			a.host = append(a.host, unsafe.Slice((*byte)(unsafe.Pointer(&v)), 4)...)
		}
	}
	return part{&a.base, int64(len(a.host))}
}

// upload copies the data to the device once the workspace is carved. The
// copy is from pageable memory, which may still be in flight when
// cuMemcpyHtoD returns; the context is synchronised so that no kernel on
// the pipeline's non-blocking streams can read the part before it lands.
func (a *auxArgs) upload() error {
	if len(a.host) == 0 {
		return nil
	}
	if err := cu.MemcpyHtoD(a.base, unsafe.Pointer(&a.host[0]), int64(len(a.host))); err != nil {
		return fmt.Errorf("cudakernels: copying lengths and slopes to the device: %w", err)
	}
	if err := cu.Synchronize(); err != nil {
		return fmt.Errorf("cudakernels: copying lengths and slopes to the device: %w", err)
	}
	return nil
}

// at returns the variantArgs of chunk c of call p, with dlse the device
// address of the chunk's LSE gradient (0: none).
func (a *auxArgs) at(p kernels.Params, c chunk, dlse cu.DevicePtr) variantArgs {
	v := variantArgs{pair0: int64(c.h0), heads: int64(p.H), dlse: uint64(dlse)}
	addr := func(off int) uint64 {
		if off < 0 {
			return 0
		}
		return uint64(a.base) + uint64(off)
	}
	v.qLens, v.kLens, v.alibi = addr(a.qLens), addr(a.kLens), addr(a.alibi)
	return v
}

// biasArgs are the device copies of a call's bias and, when the caller
// wants it, of its gradient, each a part of the workspace. The bias goes up
// whole, once per call: every chunk's pairs read their slices of it.
type biasArgs[T kernels.Float] struct {
	p          kernels.Params
	data, grad cu.DevicePtr
}

// parts returns the workspace parts of p's bias and gradient (none without
// a bias; no gradient part unless the call wants dBias).
func (a *biasArgs[T]) parts(p kernels.Params) []part {
	a.p = p
	if p.Bias == nil {
		return nil
	}
	n := int64(p.BiasLen()) * int64(elemSize[T]())
	parts := []part{{&a.data, n}}
	if a.wantsGrad() {
		parts = append(parts, part{&a.grad, n})
	}
	return parts
}

// wantsGrad reports whether the call writes dBias.
func (a *biasArgs[T]) wantsGrad() bool {
	return a.p.Bias != nil && kernels.BiasGrad[T](a.p.Bias) != nil
}

// upload copies the bias to the device; like auxArgs.upload, it waits for
// the pageable copy to land before any kernel may read it.
func (a *biasArgs[T]) upload() error {
	if a.p.Bias == nil {
		return nil
	}
	if err := upload(a.data, kernels.BiasData[T](a.p.Bias)); err != nil {
		return fmt.Errorf("cudakernels: copying the bias to the device: %w", err)
	}
	if err := cu.Synchronize(); err != nil {
		return fmt.Errorf("cudakernels: copying the bias to the device: %w", err)
	}
	return nil
}

// download copies dBias back to the caller once every kernel is done.
func (a *biasArgs[T]) download() error {
	if !a.wantsGrad() {
		return nil
	}
	g := kernels.BiasGrad[T](a.p.Bias)
	if err := cu.MemcpyDtoH(unsafe.Pointer(&g[0]), a.grad, int64(len(g))*int64(elemSize[T]())); err != nil {
		return fmt.Errorf("cudakernels: copying the bias gradient from the device: %w", err)
	}
	return nil
}

// set places the bias in v: its device addresses, and the strides of its
// batch and head dimensions in elements, 0 where broadcast.
func (a *biasArgs[T]) set(v *variantArgs) {
	b := a.p.Bias
	if b == nil {
		return
	}
	v.bias, v.biasSlices = uint64(a.data), int64(b.Bb)*int64(b.Hb)
	if a.wantsGrad() {
		v.dbias = uint64(a.grad)
	}
	v.biasBatchStride, v.biasHeadStride = biasStrides(a.p)
}
