//go:build flashgpu

package ring

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-flash/flashattention/cudakernels"
	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/kernels/conformance"
	"gorgonia.org/tensor"
)

// gpuBackends returns one GPU backend of precision prec per rank (each has
// its own worker thread, as each rank would have its own device), closed
// with the test; it skips without a device.
func gpuBackends(t testing.TB, ranks int, prec cudakernels.Precision) []kernels.Backend {
	t.Helper()
	bs := make([]kernels.Backend, ranks)
	for r := range bs {
		b, err := cudakernels.NewBackend(cudakernels.WithPrecision(prec))
		if errors.Is(err, cudakernels.ErrNoDevice) {
			t.Skipf("no CUDA device: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Error(err)
			}
		})
		bs[r] = b
	}
	return bs
}

// deviceRing returns a DeviceRing of ranks on device 0, closed with the
// test.
func deviceRing(t testing.TB, ranks int) []Transport {
	t.Helper()
	ts, err := DeviceRing(ranks, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tr := range ts {
			if err := tr.(*DeviceTransport).Close(); err != nil {
				t.Error(err)
			}
		}
	})
	return ts
}

// TestDeviceRing runs the ring on R ∈ {1, 2, 3, 4} ranks sharing one GPU
// through the device transport, the GPU backend computing every block,
// against attention on the whole sequence: float64 (the backend's exact
// path) within 1e-10 relative of the naive float64 computation, and
// float32 in BF16, FP16 and TF32 within the conformance suite's bounds
// (conformance.CheckPass: twice the naive error at that precision), every
// output. Causal (zig-zag) and not, grouped heads, odd lengths per rank.
func TestDeviceRing(t *testing.T) {
	for _, ranks := range []int{1, 2, 3, 4} {
		for _, causal := range []bool{false, true} {
			p := Problem{B: 2, H: 4, Hkv: 2, D: 32, Scale: 0.2, Causal: causal}
			l, err := ForMask(37*ranks, ranks, causal)
			if err != nil {
				t.Fatal(err)
			}
			c := ringCase{fmt.Sprintf("R=%d/causal=%v", ranks, causal), p, l}
			t.Run(c.name+"/float64", func(t *testing.T) {
				bs := gpuBackends(t, ranks, cudakernels.FP32)
				g := randomGlobal[float64](c, 11)
				checkRan(t, runRingOn(deviceRing(t, ranks), c, g, func(r int) kernels.Backend { return bs[r] }))
				g.checkReference(t, 1e-10)
			})
			for _, prec := range []cudakernels.Precision{cudakernels.BF16, cudakernels.FP16, cudakernels.TF32} {
				t.Run(fmt.Sprintf("%s/%v", c.name, prec), func(t *testing.T) {
					bs := gpuBackends(t, ranks, prec)
					g := randomGlobal[float32](c, 12)
					checkRan(t, runRingOn(deviceRing(t, ranks), c, g, func(r int) kernels.Backend { return bs[r] }))
					conformance.CheckPass(t, g.params, prec, g.q, g.k, g.v, g.do, g.o, g.lse, g.dq, g.dk, g.dv)
				})
			}
		}
	}
}

// TestDeviceRingGraph runs the ring in Gorgonia graphs, a graph per rank
// on the device transport, each rank's node computing on its own GPU
// backend (the exact float64 path, and float32 in FP32), on TapeMachines
// and LispMachines: output and gradients against op.Attention on the whole
// sequence on the CPU.
func TestDeviceRingGraph(t *testing.T) {
	zz := func(n, r int) Layout { l, _ := ZigZag(n, r); return l }
	for _, c := range []graphCase{
		{zz(15, 3), 4, 2, true, tensor.Float64, false, 0},
		{zz(12, 2), 2, 2, false, tensor.Float64, true, 2},
		{zz(14, 2), 4, 1, true, tensor.Float32, false, 0},
	} {
		t.Run(c.String(), func(t *testing.T) {
			bs := gpuBackends(t, c.l.Ranks(), cudakernels.FP32)
			checkGraphRing(t, c, deviceRing(t, c.l.Ranks()), func(r int) kernels.Backend { return bs[r] })
		})
	}
}

// TestDeviceRingMismatch checks that ranks disagreeing on a message's size
// get an error, not a hang, and that the ring stays failed.
func TestDeviceRingMismatch(t *testing.T) {
	ts := deviceRing(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			send := [][]byte{make([]byte, 8+r)} // rank 1 sends one byte more
			recv := [][]byte{make([]byte, 8)}
			errs[r] = ts[r].SendRecv(ctx, send, recv)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d: a size mismatch passed", r)
		}
	}
	if err := ts[0].SendRecv(ctx, [][]byte{make([]byte, 8)}, [][]byte{make([]byte, 8)}); !errors.Is(err, ErrAborted) {
		t.Errorf("a failed ring's next transfer: got %v, want ErrAborted", err)
	}
}

// TestDeviceRingTimeout checks that a rank whose neighbour never sends
// returns ErrTimeout at its deadline.
func TestDeviceRingTimeout(t *testing.T) {
	ts := deviceRing(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := ts[0].SendRecv(ctx, [][]byte{make([]byte, 8)}, [][]byte{make([]byte, 8)})
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("got %v, want ErrTimeout", err)
	}
}

// BenchmarkDeviceRing times the ring of R = 2 ranks sharing one GPU
// (BF16, D = 128, H = 16, B = 1) at 16k and 32k tokens per rank and of
// R = 4 at 16k,
// causal (zig-zag) and not, forward and forward+backward, against the
// same backend on the whole sequence. The ranks share the device, so the
// ring's wall time is not a multi-GPU figure; what it gives is each step's
// compute time (ms/step, from Stats: a step of a rank, its block against
// another, with R ranks' kernels on the device at once) and the bytes a
// step sends, hence the link bandwidth that would hide a step's transfer
// behind its compute (link-GB/s = B/step ÷ ms/step) and the step's work
// on a device of its own (alone-ms/step: one block pair, timed alone).
func BenchmarkDeviceRing(b *testing.B) {
	const heads, d = 16, 128
	for _, perRank := range []int{16 << 10, 32 << 10} {
		for _, ranks := range []int{2, 4} {
			if ranks*perRank > 64<<10 {
				continue // two minutes of host copies for the four cases
			}
			for _, causal := range []bool{false, true} {
				for _, backward := range []bool{false, true} {
					pass := "fwd"
					if backward {
						pass = "fwd+bwd"
					}
					name := fmt.Sprintf("T%dk/R=%d/causal=%v/%s", perRank>>10, ranks, causal, pass)
					b.Run(name, func(b *testing.B) { benchDeviceRing(b, perRank, ranks, heads, d, causal, backward) })
				}
			}
		}
	}
}

func benchDeviceRing(b *testing.B, perRank, ranks, heads, d int, causal, backward bool) {
	n := perRank * ranks
	layout, err := ForMask(n, ranks, causal)
	if err != nil {
		b.Fatal(err)
	}
	p := Problem{B: 1, H: heads, D: d, Scale: 1 / 11.3137, Causal: causal}
	bs := gpuBackends(b, ranks, cudakernels.BF16)
	kp := kernels.Params{B: 1, H: heads, Nq: n, Nk: n, D: d, Scale: p.Scale, Causal: causal}
	flops := kp.ForwardFLOPs()
	if backward {
		flops += kp.BackwardFLOPs()
	}
	in := newRankInputs(layout, heads, d, 3)
	stats := make([]Stats, ranks)
	for b.Loop() {
		runRanks(b, deviceRing(b, ranks), layout, func(r int) kernels.Backend { return bs[r] }, p, in, backward, stats)
	}
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
	if perStep, perTransfer := reportSteps(b, stats, ranks); perTransfer > 0 {
		b.ReportMetric(perTransfer/perStep/1e9, "link-GB/s")
	}
	b.ReportMetric(aloneStep(b, bs[0], kp, perRank, backward)*1e3, "alone-ms/step")
}

// aloneStep times one full block pair of a ring step (perRank queries
// against perRank keys, unmasked: the steps off the diagonal) on backend be
// alone, forward and, with backward, the backward too; the median of 3
// after one warm-up, host copies included as in a ring step.
func aloneStep(b *testing.B, be kernels.Backend, kp kernels.Params, perRank int, backward bool) float64 {
	sp := kp
	sp.Nq, sp.Nk, sp.Causal = perRank, perRank, false
	rng := rand.New(rand.NewPCG(4, 2))
	q, k, v, do := randoms(rng, sp.QLen()), randoms(rng, sp.KLen()), randoms(rng, sp.KLen()), randoms(rng, sp.QLen())
	o, lse := make([]float32, sp.QLen()), make([]float32, sp.LSELen())
	dq, dk, dv := make([]float32, sp.QLen()), make([]float32, sp.KLen()), make([]float32, sp.KLen())
	var times []float64
	for i := range 4 {
		t0 := time.Now()
		if err := be.Forward32(sp, q, k, v, o, lse); err != nil {
			b.Fatal(err)
		}
		if backward {
			if err := be.Backward32(sp, q, k, v, o, lse, do, nil, dq, dk, dv); err != nil {
				b.Fatal(err)
			}
		}
		if i > 0 {
			times = append(times, time.Since(t0).Seconds())
		}
	}
	slices.Sort(times)
	return times[len(times)/2]
}
