//go:build flashgpu

package cudakernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// hostPaths names the paths for tests and benchmarks.
var hostPaths = []struct {
	name string
	path hostPath
}{{"staging", viaStaging}, {"register-reused", registerReused}}

// TestHostPathsBitIdentical requires the bits of the staging path from the
// registering paths, whatever they manage to register: every slice (the
// registration's floor lowered to a byte, so that the small LSE and the
// slices sharing a page with it are tried too), in one chunk and in chunks
// of one pair, with and without the kept device state, float32 and
// float64.
func TestHostPathsBitIdentical(t *testing.T) {
	p := kernels.Params{B: 2, H: 4, Nq: 300, Nk: 260, D: 64, Scale: 0.125, Causal: true}
	rng := rand.New(rand.NewPCG(11, 12))
	q, k, v, do := randn[float32](rng, p.QLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.QLen())
	q64, k64, v64, do64 := widen(q), widen(k), widen(v), widen(do)
	for _, prec := range []Precision{FP32, BF16} {
		b := newTestBackend(t, WithPrecision(prec))
		b.xfer.path = viaStaging
		want := runCall(t, b, p, q, k, v, do, false)
		want64 := runCall(t, b, p, q64, k64, v64, do64, false)
		b.xfer.pins.min = 1
		for _, hp := range hostPaths[1:] {
			b.xfer.path = hp.path
			for _, hc := range []int{0, 1} {
				for _, keep := range []bool{false, true} {
					b.xfer.chunkOverride = hc
					what := fmt.Sprintf("%v %s chunks of %d keep=%v", prec, hp.name, hc, keep)
					sameBits(t, what, runCall(t, b, p, q, k, v, do, keep), want)
					sameBits(t, what+" float64", runCall(t, b, p, q64, k64, v64, do64, keep), want64)
				}
			}
			if hp.path == registerReused && !slices.ContainsFunc(b.xfer.pins.entries, func(e *pinEntry) bool { return e.p == unsafe.Pointer(&q[0]) }) {
				t.Errorf("%v %s: q is not among the registrations kept", prec, hp.name)
			}
		}
		if err := b.Trim(); err != nil {
			t.Fatal(err)
		}
		if n := len(b.xfer.pins.entries); n != 0 {
			t.Errorf("%v: %d registrations left after Trim", prec, n)
		}
	}
}

// TestHostPathFallsBack registers q's memory behind the backend's back:
// the driver then refuses the backend's registration, and the call must
// stage q and give the same bits.
func TestHostPathFallsBack(t *testing.T) {
	p := kernels.Params{B: 1, H: 8, Nq: 512, Nk: 512, D: 64, Scale: 0.125} // 1 MiB a tensor
	rng := rand.New(rand.NewPCG(13, 14))
	q, k, v, do := randn[float32](rng, p.QLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.QLen())
	b := newTestBackend(t, WithPrecision(BF16))
	b.xfer.path = viaStaging
	want := runCall(t, b, p, q, k, v, do, false)
	qp, qn := unsafe.Pointer(&q[0]), int64(len(q))*4
	var pin runtime.Pinner // the driver holds q's pages
	pin.Pin(qp)
	defer pin.Unpin()
	if err := b.run(func() error { return registerHost(qp, qn) }); err != nil {
		t.Fatal(err)
	}
	b.xfer.path, b.xfer.pins.sighting = registerReused, 1
	sameBits(t, "q registered elsewhere", runCall(t, b, p, q, k, v, do, false), want)
	for _, e := range b.xfer.pins.entries {
		if e.p == qp {
			t.Error("the backend reports q registered by itself")
		}
	}
	if len(b.xfer.pins.entries) == 0 {
		t.Error("nothing registered: the other slices should have been")
	}
	if err := b.run(func() error { return unregisterHost(qp) }); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkHostPaths times whole BF16 calls from host slices, copies
// included, for each way of moving the caller's memory (hostPaths, with
// chunk counts and copying cores as variants) at D = 128, B·N = 16384, H =
// 16 (134 MB a tensor, as in BenchmarkOpGPU), and the references they are
// judged against:
//
//   - bus/*: one synchronous cuMemcpy of a tensor each way, from and to
//     memory of cuMemAllocHost and registered Go memory: the bus rate;
//   - register: cuMemHostRegister and cuMemHostUnregister of a tensor;
//   - host/*: the host's copy of a tensor into page-locked memory on 8 and
//     16 cores (what staging costs), and its rounding to BF16 on 16 cores,
//     which halves what crosses the bus but is a pass over the host's
//     memory like the copy: worth building only if it runs faster than
//     the bus moves float32 (GB/s here count float32 bytes read).
//
// A call's metrics: ms; GB/s, the bytes it moves both ways over its time;
// kernel_ms (KernelTime); floor_ms, for each call max(kernels, bytes up
// over the bus rate up, bytes down over the rate down), summed over the
// forward and the backward; x_floor, ms over floor_ms (the target:
// 1.3 at N ≥ 4k).
func BenchmarkHostPaths(b *testing.B) {
	be := newTestBackend(b, WithPrecision(BF16))
	const tokens, d, h = 16384, 128, 16
	n := tokens * d * h
	tensor := int64(n) * 4
	rng := rand.New(rand.NewPCG(21, 22))
	q, k, v, do := randn[float32](rng, n), randn[float32](rng, n), randn[float32](rng, n), randn[float32](rng, n)
	o, dq, dk, dv := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)

	var dev cu.DevicePtr
	var pinned unsafe.Pointer
	if err := be.run(func() (err error) {
		if dev, err = cu.MemAlloc(tensor); err != nil {
			return err
		}
		pinned, err = allocHost(tensor)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := be.run(func() error { return errors.Join(cu.MemFree(dev), cu.MemFreeHost(pinned)) }); err != nil {
			b.Error(err)
		}
	})
	scratch := unsafe.Slice((*float32)(pinned), n)
	copy(scratch, q)
	reg := make([]float32, n)
	copy(reg, q)
	var pin runtime.Pinner // the driver holds reg's pages while registered
	pin.Pin(&reg[0])
	defer pin.Unpin()
	up := func(src unsafe.Pointer) func() error {
		return func() error { return cu.MemcpyHtoD(dev, src, tensor) }
	}
	down := func(dst unsafe.Pointer) func() error {
		return func() error { return cu.MemcpyDtoH(dst, dev, tensor) }
	}
	// rate times fn on the device thread: the best of 5, in GB/s.
	rate := func(fn func() error) float64 {
		best := math.Inf(1)
		for range 5 {
			start := time.Now()
			if err := be.run(fn); err != nil {
				b.Fatal(err)
			}
			best = min(best, time.Since(start).Seconds())
		}
		return float64(tensor) / best / 1e9
	}
	h2d, d2h := rate(up(pinned)), rate(down(pinned))
	loop := func(b *testing.B, fn func() error) {
		for b.Loop() {
			if err := be.run(fn); err != nil {
				b.Fatal(err)
			}
		}
		ms := float64(b.Elapsed().Microseconds()) / 1e3 / float64(b.N)
		b.ReportMetric(ms, "ms")
		b.ReportMetric(float64(tensor)/ms/1e6, "GB/s")
	}
	b.Run("bus/htod-pinned", func(b *testing.B) { loop(b, up(pinned)) })
	b.Run("bus/dtoh-pinned", func(b *testing.B) { loop(b, down(pinned)) })
	regPtr := unsafe.Pointer(&reg[0])
	b.Run("bus/htod-registered", func(b *testing.B) {
		if err := be.run(func() error { return registerHost(regPtr, tensor) }); err != nil {
			b.Fatal(err)
		}
		defer func() {
			if err := be.run(func() error { return unregisterHost(regPtr) }); err != nil {
				b.Fatal(err)
			}
		}()
		loop(b, up(regPtr))
	})
	b.Run("bus/dtoh-registered", func(b *testing.B) {
		if err := be.run(func() error { return registerHost(regPtr, tensor) }); err != nil {
			b.Fatal(err)
		}
		defer func() {
			if err := be.run(func() error { return unregisterHost(regPtr) }); err != nil {
				b.Fatal(err)
			}
		}()
		loop(b, down(regPtr))
	})
	b.Run("register", func(b *testing.B) {
		var in, out time.Duration
		for b.Loop() {
			if err := be.run(func() error {
				start := time.Now()
				if err := registerHost(regPtr, tensor); err != nil {
					return err
				}
				mid := time.Now()
				err := unregisterHost(regPtr)
				in, out = in+mid.Sub(start), out+time.Since(mid)
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(in.Microseconds())/1e3/float64(b.N), "register_ms")
		b.ReportMetric(float64(out.Microseconds())/1e3/float64(b.N), "unregister_ms")
	})
	for _, cores := range []int{8, 16} {
		b.Run(fmt.Sprintf("host/copy-%dcores", cores), func(b *testing.B) {
			loop(b, func() error { parallelCopy(scratch, q, cores); return nil })
		})
	}
	half := unsafe.Slice((*uint16)(pinned), n)
	b.Run("host/bf16-16cores", func(b *testing.B) {
		loop(b, func() error {
			parallelFor(n, 16, func(lo, hi int) { toBF16(half[lo:hi], q[lo:hi]) })
			return nil
		})
	})

	type variant struct {
		name          string
		path          hostPath
		chunks, cores int // 0: the default
	}
	variants := []variant{
		{"staging", viaStaging, 0, 0}, {"staging-8cores", viaStaging, 0, 8},
		{"register-reused", registerReused, 0, 0},
		{"register-reused-4chunks", registerReused, 4, 0}, {"register-reused-16chunks", registerReused, 16, 0},
	}
	for _, nq := range []int{16384, 4096, 1024} {
		p := kernels.Params{B: tokens / nq, H: h, Nq: nq, Nk: nq, D: d, Scale: 1 / math.Sqrt(d)}
		fwdK, err := be.KernelTime(p, false, 5)
		if err != nil {
			b.Fatal(err)
		}
		bwdK, err := be.KernelTime(p, true, 3)
		if err != nil {
			b.Fatal(err)
		}
		lse := make([]float32, p.LSELen())
		qb, kb, lb := float64(p.QLen()*4), float64(p.KLen()*4), float64(p.LSELen()*4)
		floor := func(kms, upBytes, downBytes float64) float64 {
			return max(kms, upBytes/h2d/1e6, downBytes/d2h/1e6)
		}
		fwdFloor := floor(fwdK, qb+2*kb, qb+lb)
		fwdBytes := 2*qb + 2*kb + lb
		bwdFloor := floor(bwdK, qb, qb+2*kb) // the kept state's backward: dO up, dQ, dK, dV down
		bwdBytes := 2*qb + 2*kb
		fwd := func(b *testing.B) {
			if err := be.Forward32(p, q, k, v, o, lse); err != nil {
				b.Fatal(err)
			}
		}
		fwdbwd := func(b *testing.B) {
			st, err := be.ForwardKeep32(p, q, k, v, o, lse)
			if err != nil {
				b.Fatal(err)
			}
			if err := errors.Join(be.BackwardKept32(st, p, do, nil, dq, dk, dv), st.Release()); err != nil {
				b.Fatal(err)
			}
		}
		for _, pass := range []struct {
			name                 string
			call                 func(*testing.B)
			kms, floorMs, nbytes float64
		}{{"fwd", fwd, fwdK, fwdFloor, fwdBytes}, {"fwdbwd", fwdbwd, fwdK + bwdK, fwdFloor + bwdFloor, fwdBytes + bwdBytes}} {
			for _, vr := range variants {
				b.Run(fmt.Sprintf("D%d_N%d/%s/%s", d, nq, pass.name, vr.name), func(b *testing.B) {
					// Nothing of the last variant stays: registrations,
					// staging and workspace are made anew, before the
					// timed loop, by its first call.
					if err := be.Trim(); err != nil {
						b.Fatal(err)
					}
					be.xfer.path, be.xfer.coresOverride, be.xfer.chunkOverride = vr.path, vr.cores, 0
					if vr.chunks > 0 {
						be.xfer.chunkOverride = max(1, p.B*p.H/vr.chunks)
					}
					defer func() { be.xfer.path, be.xfer.coresOverride, be.xfer.chunkOverride = registerReused, 0, 0 }()
					pass.call(b)
					for b.Loop() {
						pass.call(b)
					}
					ms := float64(b.Elapsed().Microseconds()) / 1e3 / float64(b.N)
					b.ReportMetric(ms, "ms")
					b.ReportMetric(pass.nbytes/ms/1e6, "GB/s")
					b.ReportMetric(pass.kms, "kernel_ms")
					b.ReportMetric(pass.floorMs, "floor_ms")
					b.ReportMetric(ms/pass.floorMs, "x_floor")
				})
			}
		}
	}
}

// toBF16 rounds src to bfloat16 into dst, to nearest with ties to even,
// NaNs kept NaN (quieted): what staging would do on the host for the bus
// to carry BF16.
func toBF16(dst []uint16, src []float32) {
	for i, f := range src {
		u := math.Float32bits(f)
		if u&0x7fffffff > 0x7f800000 {
			dst[i] = uint16(u>>16) | 0x40
			continue
		}
		dst[i] = uint16((u + 0x7fff + (u>>16)&1) >> 16)
	}
}
