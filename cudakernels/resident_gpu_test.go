//go:build flashgpu

package cudakernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// runCall runs forward and backward on the host slices, through the kept
// device state when keep is set.
func runCall[T kernels.Float](t *testing.T, b *Backend, p kernels.Params, q, k, v, do []T, keep bool) outputs[T] {
	t.Helper()
	fwd, bwd := kernels.EntryPoints[T](b)
	if !keep {
		r, err := runBoth(p, q, k, v, do, fwd, bwd)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := outputs[T]{make([]T, p.QLen()), make([]T, p.LSELen()), make([]T, p.QLen()), make([]T, p.KLen()), make([]T, p.KLen())}
	var (
		st  kernels.DeviceState
		err error
	)
	switch any(q).(type) {
	case []float32:
		st, err = b.ForwardKeep32(p, any(q).([]float32), any(k).([]float32), any(v).([]float32), any(r.o).([]float32), any(r.lse).([]float32))
		if err == nil {
			err = b.BackwardKept32(st, p, any(do).([]float32), nil, any(r.dq).([]float32), any(r.dk).([]float32), any(r.dv).([]float32))
		}
	case []float64:
		st, err = b.ForwardKeep64(p, any(q).([]float64), any(k).([]float64), any(v).([]float64), any(r.o).([]float64), any(r.lse).([]float64))
		if err == nil {
			err = b.BackwardKept64(st, p, any(do).([]float64), nil, any(r.dq).([]float64), any(r.dk).([]float64), any(r.dv).([]float64))
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Release(); err != nil {
		t.Fatal(err)
	}
	return r
}

func sameBits[T kernels.Float](t *testing.T, what string, got, want outputs[T]) {
	t.Helper()
	for i, pair := range [][2][]T{{got.o, want.o}, {got.lse, want.lse}, {got.dq, want.dq}, {got.dk, want.dk}, {got.dv, want.dv}} {
		for j := range pair[0] {
			a, b := pair[0][j], pair[1][j]
			if a != b && !(math.IsNaN(float64(a)) && math.IsNaN(float64(b))) {
				t.Fatalf("%s: %s[%d] = %v, want %v bit for bit", what, []string{"o", "lse", "dq", "dk", "dv"}[i], j, a, b)
			}
		}
	}
}

// TestPipelineBitIdentical requires the same bits from one chunk, uneven
// chunks and one pair per chunk, with and without the kept device state:
// pairs are independent, so chunking must not change a result.
func TestPipelineBitIdentical(t *testing.T) {
	p := kernels.Params{B: 2, H: 5, Nq: 100, Nk: 130, D: 64, Scale: 0.125, Causal: true}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, prec := range []Precision{FP32, BF16} {
		b := newTestBackend(t, WithPrecision(prec))
		q, k, v, do := randn[float32](rng, p.QLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.QLen())
		q64, k64, v64, do64 := widen(q), widen(k), widen(v), widen(do)
		b.xfer.chunkOverride = p.B * p.H
		want := runCall(t, b, p, q, k, v, do, false)
		want64 := runCall(t, b, p, q64, k64, v64, do64, false)
		for _, hc := range []int{3, 1} {
			for _, keep := range []bool{false, true} {
				b.xfer.chunkOverride = hc
				what := fmt.Sprintf("%v chunks of %d keep=%v", prec, hc, keep)
				sameBits(t, what, runCall(t, b, p, q, k, v, do, keep), want)
				sameBits(t, what+" float64", runCall(t, b, p, q64, k64, v64, do64, keep), want64)
			}
		}
	}
}

// TestPipelineVariantsBitIdentical is TestPipelineBitIdentical for the
// variants the CUDA-core kernels compute: chunks hold whole key-head groups
// (a chunk of 3 or 1 pairs becomes 2 under Hkv = H/2), and the lengths and
// slopes, indexed by the call's batch entries and heads, must reach every
// chunk's pairs.
func TestPipelineVariantsBitIdentical(t *testing.T) {
	p := kernels.Params{B: 3, H: 4, Hkv: 2, Nq: 70, Nk: 90, D: 32, Scale: 0.2, Causal: true,
		Window: kernels.Window{On: true, Left: 40, Right: -1}, Softcap: 2, ALiBi: []float64{0.3, 0.1, 0.05, 0.01},
		QLens: []int{70, 1, 33}, KLens: []int{0, 90, 41}}
	rng := rand.New(rand.NewPCG(9, 10))
	b := newTestBackend(t)
	q, k, v, do := randn[float32](rng, p.QLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.QLen())
	q64, k64, v64, do64 := widen(q), widen(k), widen(v), widen(do)
	b.xfer.chunkOverride = p.B * p.H
	want := runCall(t, b, p, q, k, v, do, false)
	want64 := runCall(t, b, p, q64, k64, v64, do64, false)
	for _, hc := range []int{5, 3, 1} {
		for _, keep := range []bool{false, true} {
			b.xfer.chunkOverride = hc
			what := fmt.Sprintf("chunks of %d keep=%v", hc, keep)
			sameBits(t, what, runCall(t, b, p, q, k, v, do, keep), want)
			sameBits(t, what+" float64", runCall(t, b, p, q64, k64, v64, do64, keep), want64)
		}
	}
}

// TestManyShortSequences runs 65536 sequences of 2 tokens in BF16, whose
// Hopper tile images pad every head to whole blocks of rows: the device
// workspace must stay within the call's data (capScratch), and the first,
// a middle and the last heads must match, bit for bit, the same heads
// computed alone. At D = 128 the forward is the persistent
// warp-specialized kernel, whose blocks take about 500 items each from its
// counter (wgmmaForward.launch): an item handed out twice or skipped, or
// a stage's phase out of step, changes some head's bits.
func TestManyShortSequences(t *testing.T) {
	for _, d := range []int{64, 128} {
		t.Run(fmt.Sprintf("D%d", d), func(t *testing.T) {
			p := kernels.Params{B: 65536, H: 1, Nq: 2, Nk: 2, D: d, Scale: 0.125}
			rng := rand.New(rand.NewPCG(3, uint64(d)))
			b := newTestBackend(t, WithPrecision(BF16))
			q, k, v, do := randn[float32](rng, p.QLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.QLen())
			got := runCall(t, b, p, q, k, v, do, false)
			// q, k, v, o, do, dq, dk, dv and lse of the backward call.
			data := int64(4*p.QLen()+4*p.KLen()+p.LSELen()) * 4
			if b.xfer.workBytes > data {
				t.Errorf("device workspace %d bytes for %d bytes of data", b.xfer.workBytes, data)
			}
			const heads = 16
			part := p
			part.B = heads
			qn, kn := heads*p.Nq*p.D, heads*p.Nk*p.D
			for _, first := range []int{0, p.B/2 + 3, p.B - heads} {
				qo, ko := first*p.Nq*p.D, first*p.Nk*p.D
				alone := runCall(t, b, part, q[qo:qo+qn], k[ko:ko+kn], v[ko:ko+kn], do[qo:qo+qn], false)
				lo := first * p.Nq
				sameBits(t, fmt.Sprintf("heads %d…%d", first, first+heads-1), outputs[float32]{
					got.o[qo : qo+qn], got.lse[lo : lo+heads*p.Nq], got.dq[qo : qo+qn], got.dk[ko : ko+kn], got.dv[ko : ko+kn]}, alone)
			}
		})
	}
}

// TestKeptStateChecks rejects a state used with other parameters, another
// element type or after release, and keeps working afterwards.
func TestKeptStateChecks(t *testing.T) {
	b := newTestBackend(t)
	p := kernels.Params{B: 1, H: 2, Nq: 40, Nk: 40, D: 32, Scale: 0.2}
	rng := rand.New(rand.NewPCG(1, 1))
	q, k, v, do := randn[float32](rng, p.QLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.QLen())
	o, lse := make([]float32, p.QLen()), make([]float32, p.LSELen())
	st, err := b.ForwardKeep32(p, q, k, v, o, lse)
	if err != nil {
		t.Fatal(err)
	}
	dq, dk, dv := make([]float32, p.QLen()), make([]float32, p.KLen()), make([]float32, p.KLen())
	other := p
	other.Causal = true
	if err := b.BackwardKept32(st, other, do, nil, dq, dk, dv); !errors.Is(err, kernels.ErrInvalidParams) {
		t.Errorf("other params: error %v, want ErrInvalidParams", err)
	}
	if err := b.BackwardKept64(st, p, widen(do), nil, widen(dq), widen(dk), widen(dv)); !errors.Is(err, kernels.ErrInvalidParams) {
		t.Errorf("float64 on a float32 state: error %v, want ErrInvalidParams", err)
	}
	if err := st.Release(); err != nil {
		t.Fatal(err)
	}
	if err := st.Release(); err != nil {
		t.Errorf("second release: %v", err)
	}
	if err := b.BackwardKept32(st, p, do, nil, dq, dk, dv); !errors.Is(err, kernels.ErrInvalidParams) {
		t.Errorf("released state: error %v, want ErrInvalidParams", err)
	}
	if err := b.Backward32(p, q, k, v, o, lse, do, nil, dq, dk, dv); err != nil {
		t.Fatalf("a plain call after the errors: %v", err)
	}
}

// freeMem reports the device's free memory through probe, a backend of its
// own: the driver counts every context.
func freeMem(t *testing.T, probe *Backend) int64 {
	t.Helper()
	free, _, err := probe.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	return free
}

// TestDeviceMemoryStable runs 100 forward+backward iterations (kept state,
// and plain calls) and requires free device memory to end where it stood
// after the first; Close must then give back everything the backend took,
// including a state never released. A leak of one buffer per iteration
// would show as 100 × 4 MiB.
func TestDeviceMemoryStable(t *testing.T) {
	probe := newTestBackend(t)
	p := kernels.Params{B: 2, H: 8, Nq: 1024, Nk: 1024, D: 64, Scale: 0.125, Causal: true} // 4 MiB per tensor
	rng := rand.New(rand.NewPCG(2, 3))
	q, k, v, do := randn[float32](rng, p.QLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.QLen())
	const slack = 4 << 20 // the driver's allocation granularity, 2 MiB, twice
	before := freeMem(t, probe)
	b, err := NewBackend(testOptions(WithPrecision(BF16))...)
	if err != nil {
		t.Fatal(err)
	}
	step := func() {
		runCall(t, b, p, q, k, v, do, true)
		runCall(t, b, p, q, k, v, do, false)
	}
	step()
	warm := freeMem(t, probe)
	for range 100 {
		step()
	}
	after := freeMem(t, probe)
	t.Logf("free device memory: %d MiB before the backend, %d after one step, %d after 100 more",
		before>>20, warm>>20, after>>20)
	if d := warm - after; d > slack || d < -slack {
		t.Errorf("free device memory moved by %d bytes over 100 iterations", d)
	}
	if err := b.Trim(); err != nil {
		t.Fatal(err)
	}
	if trimmed := freeMem(t, probe); trimmed <= after {
		t.Errorf("Trim freed nothing: %d bytes free before, %d after", after, trimmed)
	}
	o, lse := make([]float32, p.QLen()), make([]float32, p.LSELen())
	st, err := b.ForwardKeep32(p, q, k, v, o, lse) // never released: Close must free it
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Release(); err != nil {
		t.Errorf("release after Close: %v", err)
	}
	closed := freeMem(t, probe)
	t.Logf("after Close: %d MiB", closed>>20)
	if d := before - closed; d > slack {
		t.Errorf("Close left %d bytes of device memory taken", d)
	}
	if err := b.Forward32(p, q, k, v, o, lse); err == nil {
		t.Error("a call after Close succeeded")
	}
}

// hog takes device memory through its own backend until less than leave
// bytes are free, and returns a function that frees it.
func hog(t *testing.T, h *Backend, leave int64) func() {
	t.Helper()
	var ptrs []cu.DevicePtr
	err := h.run(func() error {
		for _, piece := range []int64{1 << 30, 64 << 20, 4 << 20} {
			for {
				free, _, err := cu.MemInfo()
				if err != nil {
					return err
				}
				if free < leave || free-piece < leave/2 {
					break
				}
				p, err := cu.MemAlloc(piece)
				if err != nil {
					break // fragmentation; try smaller pieces
				}
				ptrs = append(ptrs, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := h.run(func() error {
			var errs []error
			for _, p := range ptrs {
				errs = append(errs, cu.MemFree(p))
			}
			return errors.Join(errs...)
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestErrorsOnDevice: bad input returns an error and the backend keeps
// working: an unsupported D, sizes past kernels.MaxElements, the device out
// of memory, and a device that does not exist.
func TestErrorsOnDevice(t *testing.T) {
	b := newTestBackend(t)
	p := kernels.Params{B: 1, H: 2, Nq: 64, Nk: 64, D: 32, Scale: 0.2}
	rng := rand.New(rand.NewPCG(4, 5))
	q, k, v, do := randn[float32](rng, p.QLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.QLen())
	want, err := runBoth(p, q, k, v, do, b.Forward32, b.Backward32)
	if err != nil {
		t.Fatal(err)
	}
	stillWorks := func(after string) {
		t.Helper()
		got, err := runBoth(p, q, k, v, do, b.Forward32, b.Backward32)
		if err != nil {
			t.Fatalf("after %s: %v", after, err)
		}
		sameBits(t, "after "+after, got, want)
	}

	bigD := kernels.Params{B: 1, H: 1, Nq: 4, Nk: 4, D: 300, Scale: 1}
	x := make([]float32, bigD.QLen())
	_, err = b.ForwardKeep32(bigD, x, x, x, make([]float32, bigD.QLen()), make([]float32, bigD.LSELen()))
	if !errors.Is(err, ErrUnsupported) || !errors.Is(err, kernels.ErrInvalidParams) {
		t.Errorf("D = 300: error %v, want ErrUnsupported and ErrInvalidParams", err)
	}
	stillWorks("D = 300")

	huge := kernels.Params{B: 1 << 10, H: 1 << 10, Nq: 1 << 10, Nk: 1 << 10, D: 64, Scale: 1}
	if err := b.Forward32(huge, nil, nil, nil, nil, nil); !errors.Is(err, kernels.ErrInvalidParams) {
		t.Errorf("2^36 elements: error %v, want ErrInvalidParams", err)
	}
	stillWorks("a problem past MaxElements")

	// 256 MiB per tensor against less than 128 MiB free.
	big := kernels.Params{B: 1, H: 16, Nq: 32768, Nk: 32768, D: 128, Scale: 1}
	bq := make([]float32, big.QLen())
	release := hog(t, newTestBackend(t), 128<<20)
	_, err = b.ForwardKeep32(big, bq, bq, bq, make([]float32, big.QLen()), make([]float32, big.LSELen()))
	if !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("out of memory: error %v, want ErrOutOfMemory", err)
	}
	t.Log(err)
	release()
	stillWorks("running out of memory")

	if _, err := NewBackend(WithDevice(1 << 20)); !errors.Is(err, ErrNoDevice) {
		t.Errorf("device 2^20: error %v, want ErrNoDevice", err)
	}
	stillWorks("asking for a missing device")
}

// BenchmarkCopyPipeline times whole BF16 forward calls from host slices
// through staging (viaStaging) at N = 16384, D = 128 (B = 1, H = 16) for
// several chunk sizes and numbers of copying cores, beside the kernels
// alone, to choose the staging's defaults. BenchmarkHostPaths compares
// staging with registering.
func BenchmarkCopyPipeline(b *testing.B) {
	be := newTestBackend(b, WithPrecision(BF16))
	be.xfer.path = viaStaging
	p := kernels.Params{B: 1, H: 16, Nq: 16384, Nk: 16384, D: 128, Scale: 1 / math.Sqrt(128)}
	kms, err := be.KernelTime(p, false, 5)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	q, k, v := randn[float32](rng, p.QLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.KLen())
	o, lse := make([]float32, p.QLen()), make([]float32, p.LSELen())
	for _, heads := range []int{16, 4, 2, 1} {
		for _, cores := range []int{4, 8, 16} {
			b.Run(fmt.Sprintf("heads=%d/cores=%d", heads, cores), func(b *testing.B) {
				be.xfer.chunkOverride, be.xfer.coresOverride = heads, cores
				if err := be.Forward32(p, q, k, v, o, lse); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if err := be.Forward32(p, q, k, v, o, lse); err != nil {
						b.Fatal(err)
					}
				}
				ms := float64(b.Elapsed().Microseconds()) / 1e3 / float64(b.N)
				b.ReportMetric(ms, "ms")
				b.ReportMetric(kms, "kernel_ms")
				b.ReportMetric(ms/kms, "x_kernel")
			})
		}
	}
}
