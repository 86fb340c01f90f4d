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
