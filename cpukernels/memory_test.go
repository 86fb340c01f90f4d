package cpukernels_test

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"

	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/kernels"
)

// TestMemoryProportionalToData measures the bytes forward+backward allocate
// (TotalAlloc, which counts every allocation whether or not it was collected)
// and requires at most twice the bytes of q, k, v, o, lse, do, dq, dk and dv
// plus 512 KiB per worker.
//
// The bound: the forward allocates Kᵀ (one K); the backward (scale·Q)ᵀ and
// dOᵀ with a row for −LSE and −D (two Q, (D+1)/D each) and one dQᵀ per key
// chunk (at most four Q). That is at most 7·Q·(D+1)/D + K against the data's
// 4·Q + 4·K, under twice the data. The tiles of one worker are under 300
// KiB at D = 64 in float32. Shapes with many short sequences used to pad
// every head to 128 keys and 64 rows: [65536,1,1,64] allocated 5.4 GB for
// 128 MiB of data.
func TestMemoryProportionalToData(t *testing.T) {
	const workers = 4
	for _, s := range [][4]int{{65536, 1, 1, 64}, {64, 4, 1, 64}, {1, 1, 4096, 64}, {3, 5, 70, 64}} {
		p := kernels.Params{B: s[0], H: s[1], Nq: s[2], Nk: s[2], D: s[3], Scale: 0.125, Causal: true}
		t.Run(fmt.Sprintf("%v", s), func(t *testing.T) {
			x := newTensors[float32](p, 3)
			b := cpukernels.Backend{Workers: workers}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			if err := b.Forward32(p, x.q, x.k, x.v, x.o, x.lse); err != nil {
				t.Fatal(err)
			}
			if err := b.Backward32(p, x.q, x.k, x.v, x.o, x.lse, x.do, nil, x.dq, x.dk, x.dv); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			data := 4 * (4*p.QLen() + 4*p.KLen() + p.LSELen())
			got := after.TotalAlloc - before.TotalAlloc
			bound := uint64(2*data + workers*512<<10)
			t.Logf("allocated %d bytes for %d bytes of data (bound %d)", got, data, bound)
			if got > bound {
				t.Errorf("allocated %d bytes, more than %d (twice the %d bytes of data plus 512 KiB per worker)", got, bound, data)
			}
		})
	}
}

// TestBiasAllocatesNoScores measures what forward+backward allocate with a
// bias broadcast over everything, on a shape where one Nq×Nk buffer (64
// MiB) is fifteen times the data (4.2 MiB): the bias and its gradient are
// the caller's, and the kernels must stay within
// TestMemoryProportionalToData's bound, which no Nq×Nk scratch fits in.
func TestBiasAllocatesNoScores(t *testing.T) {
	const workers = 4
	p := kernels.Params{B: 1, H: 1, Nq: 4096, Nk: 4096, D: 32, Scale: 0.2, Causal: true}
	x := newTensors[float32](p, 5)
	p.Bias = &kernels.Bias{Bb: 1, Hb: 1, Data32: make([]float32, p.Nq*p.Nk), Grad32: make([]float32, p.Nq*p.Nk)}
	b := cpukernels.Backend{Workers: workers}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := b.Forward32(p, x.q, x.k, x.v, x.o, x.lse); err != nil {
		t.Fatal(err)
	}
	if err := b.Backward32(p, x.q, x.k, x.v, x.o, x.lse, x.do, nil, x.dq, x.dk, x.dv); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	data := 4 * (4*p.QLen() + 4*p.KLen() + p.LSELen())
	got := after.TotalAlloc - before.TotalAlloc
	bound := uint64(2*data + workers*512<<10)
	t.Logf("allocated %d bytes for %d bytes of data and a %d-byte bias (bound %d)", got, data, 4*p.BiasLen(), bound)
	if got > bound {
		t.Errorf("allocated %d bytes, more than %d (twice the %d bytes of data plus 512 KiB per worker)", got, bound, data)
	}
}

// TestOutOfMemoryIsAnError lowers the Go memory limit below what a problem's
// scratch needs: Forward and Backward must return an error wrapping
// kernels.ErrOutOfMemory instead of allocating, and write nothing.
//
// Nq is past the decode path's 64 rows per key head: that path needs no
// scratch of K's size, and would rightly succeed.
func TestOutOfMemoryIsAnError(t *testing.T) {
	p := kernels.Params{B: 512, H: 2, Nq: 72, Nk: 72, D: 64, Scale: 0.125}
	x := newTensors[float32](p, 4)
	x.o[0], x.dq[0] = 42, 42
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	// The scratch of either pass is at least one K (16 MiB); leave 4 MiB
	// above what the runtime counts against its limit (mapped memory less
	// released heap), after releasing all it can so that no collection
	// triggered by the low limit frees much more.
	debug.FreeOSMemory()
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	debug.SetMemoryLimit(int64(s[0].Value.Uint64()-s[1].Value.Uint64()) + 4<<20)
	b := cpukernels.Backend{}
	if err := b.Forward32(p, x.q, x.k, x.v, x.o, x.lse); !errors.Is(err, kernels.ErrOutOfMemory) {
		t.Errorf("Forward32: got %v, want an error wrapping kernels.ErrOutOfMemory", err)
	}
	if err := b.Backward32(p, x.q, x.k, x.v, x.o, x.lse, x.do, nil, x.dq, x.dk, x.dv); !errors.Is(err, kernels.ErrOutOfMemory) {
		t.Errorf("Backward32: got %v, want an error wrapping kernels.ErrOutOfMemory", err)
	}
	if x.o[0] != 42 || x.dq[0] != 42 {
		t.Error("a call that failed for lack of memory wrote its outputs")
	}
	debug.SetMemoryLimit(math.MaxInt64)
	if err := b.Forward32(p, x.q, x.k, x.v, x.o, x.lse); err != nil {
		t.Errorf("Forward32 without a memory limit: %v", err)
	}
}
