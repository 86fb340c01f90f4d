package ring

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/kernels"
)

// BenchmarkRing runs the ring on the LocalRing transport, R ranks on one
// goroutine each sharing this machine's cores (each rank's backend gets
// GOMAXPROCS/R workers, so that the ring uses the cores the single device
// does), against the CPU backend on the whole sequence. It reports the
// throughput in GFLOP/s of the whole sequence, and for the ring the mean
// compute time of a step (over ranks and steps) and the bytes a rank sends
// per step: what a link between devices would have to move while a step
// computes.
func BenchmarkRing(b *testing.B) {
	const batch, heads, n, d = 1, 4, 2048, 64
	for _, causal := range []bool{false, true} {
		for _, backward := range []bool{false, true} {
			kp := kernels.Params{B: batch, H: heads, Nq: n, Nk: n, D: d, Scale: 0.125, Causal: causal}
			flops := kp.ForwardFLOPs()
			pass := "fwd"
			if backward {
				flops += kp.BackwardFLOPs()
				pass = "fwd+bwd"
			}
			name := fmt.Sprintf("causal=%v/%s", causal, pass)
			b.Run(name+"/single", func(b *testing.B) { benchSingle(b, kp, backward, flops) })
			for _, ranks := range []int{1, 2, 4} {
				b.Run(fmt.Sprintf("%s/R=%d", name, ranks), func(b *testing.B) { benchRing(b, kp, ranks, backward, flops) })
			}
		}
	}
}

// randoms returns n normal float32s.
func randoms(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func benchSingle(b *testing.B, p kernels.Params, backward bool, flops float64) {
	rng := rand.New(rand.NewPCG(1, 2))
	q, k, v, do := randoms(rng, p.QLen()), randoms(rng, p.KLen()), randoms(rng, p.KLen()), randoms(rng, p.QLen())
	o, lse := make([]float32, p.QLen()), make([]float32, p.LSELen())
	dq, dk, dv := make([]float32, p.QLen()), make([]float32, p.KLen()), make([]float32, p.KLen())
	be := cpukernels.Backend{}
	for b.Loop() {
		if err := be.Forward32(p, q, k, v, o, lse); err != nil {
			b.Fatal(err)
		}
		if backward {
			if err := be.Backward32(p, q, k, v, o, lse, do, nil, dq, dk, dv); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func benchRing(b *testing.B, kp kernels.Params, ranks int, backward bool, flops float64) {
	layout, err := ForMask(kp.Nq, ranks, kp.Causal)
	if err != nil {
		b.Fatal(err)
	}
	p := Problem{B: kp.B, H: kp.H, D: kp.D, Scale: kp.Scale, Causal: kp.Causal}
	in := newRankInputs(layout, kp.B*kp.H, kp.D, 1)
	stats := make([]Stats, ranks)
	workers := max(1, runtime.GOMAXPROCS(0)/ranks)
	for b.Loop() {
		ts, err := LocalRing(ranks)
		if err != nil {
			b.Fatal(err)
		}
		runRanks(b, ts, layout, func(int) kernels.Backend { return cpukernels.Backend{Workers: workers} }, p, in, backward, stats)
	}
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	reportSteps(b, stats, ranks)
}

// rankInputs are one rank's q, k, v and dO.
type rankInputs struct{ q, k, v, do []float32 }

// newRankInputs fills each rank's inputs, bh heads of layout.Len(r) rows
// of d, with normal numbers.
func newRankInputs(layout Layout, bh, d int, seed uint64) []rankInputs {
	rng := rand.New(rand.NewPCG(seed, 2))
	in := make([]rankInputs, layout.Ranks())
	for r := range in {
		m := bh * layout.Len(r) * d
		in[r] = rankInputs{randoms(rng, m), randoms(rng, m), randoms(rng, m), randoms(rng, m)}
	}
	return in
}

// runRanks runs Forward, then with backward Backward, on every rank of ts
// at once, rank r computing with backend(r) and recording into stats[r];
// a rank's error fails the benchmark.
func runRanks(b *testing.B, ts []Transport, layout Layout, backend func(r int) kernels.Backend, p Problem, in []rankInputs, backward bool, stats []Stats) {
	var wg sync.WaitGroup
	errs := make([]error, len(ts))
	for r := range ts {
		wg.Go(func() {
			rg := Ring{Transport: ts[r], Layout: layout, Backend: backend(r), Stats: &stats[r]}
			x := in[r]
			o, lse, err := Forward(context.Background(), rg, p, x.q, x.k, x.v)
			if err == nil && backward {
				_, _, _, err = Backward(context.Background(), rg, p, x.q, x.k, x.v, o, lse, x.do)
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// reportSteps reports, from the last call of each rank (the backward's
// with one), the mean compute time of a step (ms/step) and the mean bytes
// of a transfer (B/step), and returns them in seconds and bytes (0 bytes
// without a transfer).
func reportSteps(b *testing.B, stats []Stats, ranks int) (perStep, perTransfer float64) {
	var compute time.Duration
	var steps, bytes, transfers int
	for _, s := range stats {
		for i, c := range s.Compute {
			if i < ranks { // the backward's last entry is the dK, dV going home
				compute += c
				steps++
			}
			if s.Sent[i] > 0 {
				bytes += s.Sent[i]
				transfers++
			}
		}
	}
	perStep = compute.Seconds() / float64(steps)
	b.ReportMetric(perStep*1e3, "ms/step")
	if transfers > 0 {
		perTransfer = float64(bytes) / float64(transfers)
		b.ReportMetric(perTransfer, "B/step")
	}
	return perStep, perTransfer
}
