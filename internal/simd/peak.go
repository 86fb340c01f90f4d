package simd

import (
	"math"
	"sync/atomic"
)

// FMAPeak32 performs n rounds of independent float32 fused multiply-adds
// on the widest vector path this package takes on this CPU (AVX-512,
// AVX2 with FMA, or the portable loop) and returns the floating-point
// operations they count (two per lane and FMA), for the caller to time.
// Nothing in a round depends on memory or on another round's latency
// (twelve accumulators, more than an FMA's latency times its issue rate on
// any core this package targets), so flops ÷ time is the core's peak FMA
// rate: the ceiling that the CPU kernels' GFLOP/s are reported against.
// n < 1 does nothing and returns 0.
func FMAPeak32(n int) float64 {
	if n < 1 {
		return 0
	}
	return float64(n) * fmaPeakRound32(n)
}

// fmaPeakGeneric runs n rounds of twelve independent scalar multiply-adds
// and returns the flops of one round. The result is kept so that the loop
// is not removed.
func fmaPeakGeneric(n int) float64 {
	var a [12]float32
	for i := range a {
		a[i] = float32(i)
	}
	const m, c = 0.999, 0.001
	for range n {
		for i := range a {
			a[i] = a[i]*m + c
		}
	}
	peakSink.Store(math.Float32bits(a[0]))
	return 2 * float64(len(a))
}

// peakSink keeps fmaPeakGeneric's result observable; atomic, since
// callers run FMAPeak32 on several goroutines at once.
var peakSink atomic.Uint32
