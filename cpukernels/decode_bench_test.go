package cpukernels_test

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/internal/simd"
	"github.com/gorgonia-flash/flashattention/kernels"
)

// BenchmarkDecode32 is issue 11's CPU decode step: one new token (Nq = 1)
// of B = 1 sequence, H = 32 query heads on Hkv = 8 key heads, D = 128,
// float32, against Nk cached keys, dense and in pages of 16, 256 and 1024
// keys. The step is memory bound: it reads the whole K and V cache once.
// It reports the cache's bytes over the step's time (GB/s) beside a read
// ceiling measured in the same iteration, a parallel vectorised pass over
// a 1 GiB buffer (read-GB/s), and their ratio (%read).
func BenchmarkDecode32(b *testing.B) {
	ceiling := newReadCeiling(1 << 28) // 1 GiB of float32
	for _, nk := range []int{1 << 10, 1 << 12, 1 << 14, 1 << 16} {
		for _, page := range []int{0, 16, 256, 1024} {
			if page > 0 && nk < 1<<16 {
				continue // pages cost most where the cache is longest
			}
			name := fmt.Sprintf("Nk%d", nk)
			if page > 0 {
				name += fmt.Sprintf("_page%d", page)
			}
			b.Run(name, func(b *testing.B) {
				p := kernels.Params{B: 1, H: 32, Hkv: 8, Nq: 1, Nk: nk, D: 128, Scale: 1 / math.Sqrt(128), Causal: true}
				x := newTensors[float32](p, 7)
				k, v := x.k, x.v
				if page > 0 {
					p, k, v = pagedCopy(p, page, x.k, x.v)
				}
				be := cpukernels.Backend{}
				if err := be.Forward32(p, x.q, k, v, x.o, x.lse); err != nil {
					b.Fatal(err)
				}
				var step, read time.Duration
				for b.Loop() {
					t0 := time.Now()
					if err := be.Forward32(p, x.q, k, v, x.o, x.lse); err != nil {
						b.Fatal(err)
					}
					step += time.Since(t0)
					read += ceiling.time()
				}
				bytes := float64(2 * 4 * p.B * p.KVHeads() * nk * p.D)
				gbs := bytes * float64(b.N) / step.Seconds() / 1e9
				ceil := ceiling.bytes() * float64(b.N) / read.Seconds() / 1e9
				b.ReportMetric(gbs, "GB/s")
				b.ReportMetric(ceil, "read-GB/s")
				b.ReportMetric(100*gbs/ceil, "%read")
				b.ReportMetric(float64(step.Microseconds())/float64(b.N), "µs/step")
			})
		}
	}
}

// pagedCopy moves dense k and v of p (B = 1) into pages of size keys,
// handed out in reverse order so that no two consecutive pages of the
// sequence are neighbours in the pool.
func pagedCopy(p kernels.Params, size int, k, v []float32) (kernels.Params, []float32, []float32) {
	pages := (p.Nk + size - 1) / size
	pp := p
	pp.Pages = &kernels.Pages{Size: size, Count: pages, Table: [][]int{make([]int, pages)}}
	for i := range pages {
		pp.Pages.Table[0][i] = pages - 1 - i
	}
	pk, pv := make([]float32, pp.KLen()), make([]float32, pp.KLen())
	for kvh := range p.KVHeads() {
		for j := range p.Nk {
			copy(pk[pp.KeyRow(kvh, j):][:p.D], k[p.KeyRow(kvh, j):][:p.D])
			copy(pv[pp.KeyRow(kvh, j):][:p.D], v[p.KeyRow(kvh, j):][:p.D])
		}
	}
	return pp, pk, pv
}

// readCeiling times a read of a large buffer on every core: the memory
// bandwidth a decode step could reach on this machine at this moment.
type readCeiling struct {
	buf   []float32
	sinks []float32
}

func newReadCeiling(n int) *readCeiling {
	buf := make([]float32, n)
	for i := range buf {
		buf[i] = float32(i & 1023)
	}
	return &readCeiling{buf: buf, sinks: make([]float32, runtime.GOMAXPROCS(0))}
}

func (r *readCeiling) bytes() float64 { return float64(4 * len(r.buf)) }

// time reads the buffer once, split evenly over GOMAXPROCS goroutines,
// each taking the maximum of its part with the vectorised simd.Max32 (a
// load and a max per vector, nothing else), and returns how long that
// took.
func (r *readCeiling) time() time.Duration {
	workers := len(r.sinks)
	per := (len(r.buf) + workers - 1) / workers
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		part := r.buf[min(len(r.buf), w*per):min(len(r.buf), (w+1)*per)]
		wg.Go(func() { r.sinks[w] = simd.Max32(part) })
	}
	wg.Wait()
	return time.Since(t0)
}
