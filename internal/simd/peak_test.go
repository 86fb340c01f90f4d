package simd

import "testing"

// TestFMAPeak32 checks the count: n rounds give n times the flops of one,
// and nothing for n < 1.
func TestFMAPeak32(t *testing.T) {
	if got := FMAPeak32(0); got != 0 {
		t.Errorf("FMAPeak32(0) = %v, want 0", got)
	}
	one := FMAPeak32(1)
	if one <= 0 {
		t.Fatalf("FMAPeak32(1) = %v, want > 0", one)
	}
	if got := FMAPeak32(1000); got != 1000*one {
		t.Errorf("FMAPeak32(1000) = %v, want %v", got, 1000*one)
	}
	if got := fmaPeakGeneric(10); got != 24 {
		t.Errorf("fmaPeakGeneric's round = %v flops, want 24", got)
	}
}

// BenchmarkFMAPeak32 reports the core's float32 FMA peak on the path the
// package takes.
func BenchmarkFMAPeak32(b *testing.B) {
	const rounds = 1 << 20
	var flops float64
	for b.Loop() {
		flops = FMAPeak32(rounds)
	}
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
