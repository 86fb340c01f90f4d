//go:build flashgpu

package cudakernels

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// KernelTime returns how long the kernels of one float32 call take alone,
// without copies, in milliseconds: the median of reps runs timed with CUDA
// events on device-resident random data (the forward's kernels, or the
// backward's when backward is set, conversions to the operand type
// included). The L2 cache is flushed before each run, so figures do not
// depend on the problem fitting in it. Compare it with a whole call's time to
// see what the copies cost. p may use the variants the backend's precision
// computes (see the package documentation); a bias gets random values on
// the device, and the backward writes dBias when p.Bias has a gradient
// (Grad32, whose host memory is not touched).
func (b *Backend) KernelTime(p kernels.Params, backward bool, reps int) (float64, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	if reps < 1 {
		return 0, fmt.Errorf("%w: reps = %d, want at least 1", kernels.ErrInvalidParams, reps)
	}
	if _, err := paddedDim(p.D); err != nil {
		return 0, err
	}
	// One block of random numbers, tiled over every input: generating tens
	// of millions of them per call would dominate a benchmark's wall time.
	const blockLen = 1 << 20
	rng := rand.New(rand.NewPCG(5, 6))
	block := make([]float32, blockLen)
	for i := range block {
		block[i] = float32(rng.NormFloat64())
	}
	var ms float64
	err := b.run(func() (err error) {
		f, err := b.reg.forward(4, p)
		if err != nil {
			return err
		}
		ks, _, err := b.reg.backward(4, p)
		if err != nil {
			return err
		}
		if err := errors.Join(f.computes(p), ks.computes(p)); err != nil {
			return err
		}
		bs := ks.scratchBytes(p)
		q4, k4, l4 := int64(p.QLen())*4, int64(p.KLen())*4, int64(p.LSELen())*4
		var buf bwdBuffers
		var fwdScratch, flush cu.DevicePtr
		var aux auxArgs
		var bias biasArgs[float32]
		parts := []part{{&buf.q, q4}, {&buf.k, k4}, {&buf.v, k4}, {&buf.o, q4}, {&buf.lse, l4}, {&buf.do, q4},
			{&buf.delta, l4}, {&buf.dq, q4}, {&buf.dk, k4}, {&buf.dv, k4}, {&fwdScratch, f.scratchBytes(p)},
			{&buf.scratch, bs}, {&flush, flushBytes}, aux.part(p)}
		a, err := newArena(append(parts, bias.parts(p)...)...)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, a.free()) }()
		if err := aux.upload(); err != nil {
			return err
		}
		// The whole call is one chunk: the launches see its B and H.
		buf.vars = aux.at(p, chunk{n: p.B * p.H}, 0)
		bias.set(&buf.vars)
		fbuf := fwdBuffers{q: buf.q, k: buf.k, v: buf.v, o: buf.o, lse: buf.lse, scratch: fwdScratch, vars: buf.vars}
		for _, c := range []struct {
			dst cu.DevicePtr
			n   int
		}{{buf.q, p.QLen()}, {buf.k, p.KLen()}, {buf.v, p.KLen()}, {buf.do, p.QLen()}, {bias.data, p.BiasLen()}} {
			for off := 0; off < c.n; off += blockLen {
				if err := upload(c.dst+cu.DevicePtr(4*off), block[:min(blockLen, c.n-off)]); err != nil {
					return err
				}
			}
		}
		// One untimed forward warms up and gives the backward its O and LSE.
		first := true
		ms, err = timeRuns(reps, flush, flushBytes, func() error {
			defer func() { first = false }()
			if backward && !first {
				return enqueueBackward[float32](b, p, buf, cu.Stream{})
			}
			return f.launch(p, fbuf, cu.Stream{})
		})
		return err
	})
	return ms, err
}

// flushBytes is the size of the buffer that the timers' callers give
// timeRuns to write before each run, emptying the L2 of what the last run
// left: several times the H200's 60 MB.
const flushBytes = 256 << 20

// timeRuns times run on the default stream with CUDA events: one untimed
// run to warm up, then reps timed ones, each after flushLen bytes of flush are
// written (so that no run finds its data in L2). It returns the median in
// milliseconds. It runs on the worker's thread.
func timeRuns(reps int, flush cu.DevicePtr, flushLen int64, run func() error) (float64, error) {
	start, err := cu.MakeEvent(cu.DefaultEvent)
	if err != nil {
		return 0, err
	}
	defer cu.DestroyEvent(&start)
	end, err := cu.MakeEvent(cu.DefaultEvent)
	if err != nil {
		return 0, err
	}
	defer cu.DestroyEvent(&end)
	var ms []float64
	for i := -1; i < reps; i++ {
		if err := cu.MemsetD8(flush, 1, flushLen); err != nil {
			return 0, err
		}
		if err := start.Record(cu.Stream{}); err != nil {
			return 0, err
		}
		if err := run(); err != nil {
			return 0, err
		}
		if err := end.Record(cu.Stream{}); err != nil {
			return 0, err
		}
		if err := end.Synchronize(); err != nil {
			return 0, err
		}
		t, err := start.Elapsed(end)
		if err != nil {
			return 0, err
		}
		if i >= 0 {
			ms = append(ms, float64(t))
		}
	}
	slices.Sort(ms)
	return ms[len(ms)/2], nil
}

// upload copies src to dst synchronously, for data placed on the device
// outside a call.
func upload[T kernels.Float](dst cu.DevicePtr, src []T) error { return uploadBytes(dst, bytesOfT(src)) }
