//go:build flashgpu

package cudakernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// benchShapes follow FlashAttention's benchmark: B·N = 16384 tokens and
// hidden size 2048 (H = 2048/D).
func benchShapes() []kernels.Params {
	var ps []kernels.Params
	for _, s := range []struct {
		d, n   int
		causal bool
	}{{128, 8192, false}, {128, 8192, true}, {64, 2048, false}} {
		ps = append(ps, kernels.Params{B: 16384 / s.n, H: 2048 / s.d, Nq: s.n, Nk: s.n, D: s.d,
			Scale: 1 / math.Sqrt(float64(s.d)), Causal: s.causal})
	}
	return ps
}

// BenchmarkForward and BenchmarkBackward time the float32 entry points'
// kernels on device-resident random data with CUDA events, flushing the L2
// cache before each launch, and report the median as TFLOP/s (FLOPs as in
// kernels.Params). For BF16 and FP16 the forward's time includes the
// conversion of Q, K and V to 16 bits, and the backward's includes the
// rounding or conversion of its operands.
func BenchmarkForward(b *testing.B) {
	for _, prec := range []Precision{FP32, TF32, BF16, FP16} {
		be := newTestBackend(b, WithPrecision(prec))
		for _, p := range benchShapes() {
			b.Run(fmt.Sprintf("%v/D%d_N%d_B%d_H%d_causal=%v", prec, p.D, p.Nq, p.B, p.H, p.Causal), func(b *testing.B) {
				benchKernels(b, be, p, false)
			})
		}
	}
}

func BenchmarkBackward(b *testing.B) {
	// TF32's backward is the FP32 one on rounded operands: not timed twice.
	for _, prec := range []Precision{FP32, BF16, FP16} {
		be := newTestBackend(b, WithPrecision(prec))
		for _, p := range benchShapes() {
			b.Run(fmt.Sprintf("%v/D%d_N%d_B%d_H%d_causal=%v", prec, p.D, p.Nq, p.B, p.H, p.Causal), func(b *testing.B) {
				benchKernels(b, be, p, true)
			})
		}
	}
}

func benchKernels(b *testing.B, be *Backend, p kernels.Params, backward bool) {
	var (
		a          *arena
		flush      cu.DevicePtr
		start, end cu.Event
		fwd        *fwdKernel
		buf        bwdBuffers
		fbuf       fwdBuffers
	)
	const flushBytes = 256 << 20 // several times the 60 MB L2
	setup := func() (err error) {
		if fwd, err = forwardFor[float32](be, p.D); err != nil {
			return err
		}
		bwdScratch, err := backwardScratchBytes[float32](be, p)
		if err != nil {
			return err
		}
		q4, k4, l4 := int64(p.QLen())*4, int64(p.KLen())*4, int64(p.LSELen())*4
		if a, err = newArena(q4, k4, k4, q4, l4, q4, l4, q4, k4, k4, flushBytes, fwd.scratchBytes(p), bwdScratch); err != nil {
			return err
		}
		buf = bwdBuffers{q: a.parts[0], k: a.parts[1], v: a.parts[2], o: a.parts[3], lse: a.parts[4],
			do: a.parts[5], delta: a.parts[6], dq: a.parts[7], dk: a.parts[8], dv: a.parts[9], scratch: a.parts[12]}
		flush = a.parts[10]
		fbuf = fwdBuffers{q: buf.q, k: buf.k, v: buf.v, o: buf.o, lse: buf.lse, scratch: a.parts[11]}
		rng := rand.New(rand.NewPCG(3, 4))
		for _, t := range []struct {
			dst cu.DevicePtr
			n   int
		}{{buf.q, p.QLen()}, {buf.k, p.KLen()}, {buf.v, p.KLen()}, {buf.do, p.QLen()}} {
			if err := upload(t.dst, randn[float32](rng, t.n)); err != nil {
				return err
			}
		}
		// The backward needs a real O and LSE.
		if err := fwd.launch(p, fbuf, cu.Stream{}); err != nil {
			return err
		}
		if start, err = cu.MakeEvent(cu.DefaultEvent); err != nil {
			return err
		}
		if end, err = cu.MakeEvent(cu.DefaultEvent); err != nil {
			return err
		}
		return cu.Synchronize()
	}
	if err := be.run(setup); err != nil {
		b.Fatal(err)
	}
	defer be.run(func() error {
		cu.DestroyEvent(&start)
		cu.DestroyEvent(&end)
		return a.free()
	})

	var ms []float64
	for b.Loop() {
		err := be.run(func() error {
			if err := cu.MemsetD8(flush, 1, flushBytes); err != nil {
				return err
			}
			if err := start.Record(cu.Stream{}); err != nil {
				return err
			}
			var err error
			if backward {
				err = enqueueBackward[float32](be, p, buf, cu.Stream{})
			} else {
				err = fwd.launch(p, fbuf, cu.Stream{})
			}
			if err != nil {
				return err
			}
			if err := end.Record(cu.Stream{}); err != nil {
				return err
			}
			if err := end.Synchronize(); err != nil {
				return err
			}
			t, err := start.Elapsed(end)
			ms = append(ms, t)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(ms)
	median := ms[len(ms)/2]
	flops := p.ForwardFLOPs()
	if backward {
		flops = p.BackwardFLOPs()
	}
	b.ReportMetric(median, "kernel-ms")
	b.ReportMetric(flops/(median*1e-3)/1e12, "TFLOP/s")
}
