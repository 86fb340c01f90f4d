//go:build flashgpu

package op_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gorgonia.org/cu"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/gorgonia-flash/flashattention/cudakernels"
	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
)

// builtWithGPU says whether the tests were built with the flashgpu tag.
const builtWithGPU = true

// requireGPU skips the test when the device cannot be opened, and returns a
// backend of its own for reading the device's free memory.
func requireGPU(t *testing.T) *cudakernels.Backend {
	t.Helper()
	probe, err := cudakernels.NewBackend()
	if errors.Is(err, cudakernels.ErrNoDevice) {
		t.Skipf("no CUDA device: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := probe.Close(); err != nil {
			t.Error(err)
		}
	})
	return probe
}

// trainGraph is cost = sum(Attention(q, k, v) ∘ w) with its gradients, on a
// TapeMachine.
type trainGraph struct {
	g       *gorgonia.ExprGraph
	q, k, v *gorgonia.Node
	o       *gorgonia.Node
	m       gorgonia.VM
}

func newTrainGraph(t testing.TB, dt tensor.Dtype, shape []int, grad bool, opts ...op.Option) *trainGraph {
	t.Helper()
	g := gorgonia.NewGraph()
	rng := rand.New(rand.NewPCG(uint64(shape[2]), 1))
	node := func(name string) *gorgonia.Node {
		n := shape[0] * shape[1] * shape[2] * shape[3]
		var backing any
		if dt == tensor.Float32 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			backing = x
		} else {
			x := make([]float64, n)
			for i := range x {
				x[i] = rng.NormFloat64()
			}
			backing = x
		}
		val := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(backing))
		return gorgonia.NewTensor(g, dt, 4, gorgonia.WithShape(shape...), gorgonia.WithName(name), gorgonia.WithValue(val))
	}
	tg := &trainGraph{g: g, q: node("q"), k: node("k"), v: node("v")}
	w := node("w")
	var err error
	if tg.o, err = op.Attention(tg.q, tg.k, tg.v, append([]op.Option{op.WithCausal(true)}, opts...)...); err != nil {
		t.Fatal(err)
	}
	if grad {
		cost := gorgonia.Must(gorgonia.Sum(gorgonia.Must(gorgonia.HadamardProd(tg.o, w))))
		if _, err := gorgonia.Grad(cost, tg.q, tg.k, tg.v); err != nil {
			t.Fatal(err)
		}
	}
	tg.m = gorgonia.NewTapeMachine(g)
	t.Cleanup(func() { tg.m.Close() })
	return tg
}

// step runs the machine once and resets it for the next run.
func (tg *trainGraph) step() error {
	defer tg.m.Reset()
	return tg.m.RunAll()
}

func (tg *trainGraph) results(t *testing.T) [][]float64 {
	t.Helper()
	out := [][]float64{asFloat64s(t, tg.o.Value())}
	for _, n := range []*gorgonia.Node{tg.q, tg.k, tg.v} {
		gv, err := n.Grad()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, asFloat64s(t, gv))
	}
	return out
}

// TestGPUGraphMatchesCPU trains through op.WithDevice(op.GPU) (the forward
// keeps its device copies for the backward) and compares O and the
// gradients with the CPU backend: float32 within 1e-4 of the largest
// magnitude, float64 within 1e-10.
func TestGPUGraphMatchesCPU(t *testing.T) {
	requireGPU(t)
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		shape := []int{2, 3, 150, 64}
		gpu := newTrainGraph(t, dt, shape, true, op.WithDevice(op.GPU), op.WithPrecision(kernels.FP32))
		cpu := newTrainGraph(t, dt, shape, true, op.WithDevice(op.CPU))
		for _, tg := range []*trainGraph{gpu, cpu} {
			if err := tg.m.RunAll(); err != nil {
				t.Fatal(err)
			}
		}
		tol := 1e-10
		if dt == tensor.Float32 {
			tol = 1e-4
		}
		got, want := gpu.results(t), cpu.results(t)
		for i, name := range []string{"O", "dQ", "dK", "dV"} {
			scale := max(1, slices.Max(absAll(want[i])))
			for j := range want[i] {
				if d := math.Abs(got[i][j] - want[i][j]); !(d <= tol*scale) {
					t.Fatalf("%v %s[%d] = %v, want %v", dt, name, j, got[i][j], want[i][j])
				}
			}
		}
	}
}

// TestGPUFiniteDifferences checks the gradients computed on the GPU in
// float64 (CUDA-core kernels) against central finite differences through
// whole graphs, on both machines.
func TestGPUFiniteDifferences(t *testing.T) {
	requireGPU(t)
	t.Cleanup(func() {
		if err := op.CloseGPU(); err != nil {
			t.Error(err)
		}
	})
	checkFiniteDifferences(t, op.WithDevice(op.GPU))
}

// TestGPUTrainingLeavesNoMemory: 100 training steps through the op's own
// GPU backend leave free device memory where the first step left it, and
// CloseGPU gives back everything. One leaked state per step would show as
// 100 × 5 × 2 MiB.
func TestGPUTrainingLeavesNoMemory(t *testing.T) {
	probe := requireGPU(t)
	if err := op.CloseGPU(); err != nil {
		t.Fatal(err)
	}
	free := func() int64 {
		f, _, err := probe.MemInfo()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	const slack = 4 << 20
	before := free()
	tg := newTrainGraph(t, tensor.Float32, []int{2, 4, 1024, 64}, true, op.WithDevice(op.GPU), op.WithPrecision(kernels.BF16))
	if err := tg.step(); err != nil {
		t.Fatal(err)
	}
	warm := free()
	for range 100 {
		if err := tg.step(); err != nil {
			t.Fatal(err)
		}
	}
	after := free()
	if err := op.CloseGPU(); err != nil {
		t.Fatal(err)
	}
	closed := free()
	t.Logf("free device memory (MiB): %d before, %d after one step, %d after 100 more, %d after CloseGPU",
		before>>20, warm>>20, after>>20, closed>>20)
	if d := warm - after; d > slack || d < -slack {
		t.Errorf("100 training steps moved free device memory by %d bytes", d)
	}
	if d := before - closed; d > slack {
		t.Errorf("CloseGPU left %d bytes taken", d)
	}
	if err := tg.step(); err == nil {
		t.Error("a graph built before CloseGPU still ran")
	}
}

// TestGPUErrors: on the GPU, an unsupported head dimension, a problem too
// large to index and the device out of memory each give an error, and the
// process goes on computing correctly afterwards.
func TestGPUErrors(t *testing.T) {
	requireGPU(t)
	gpu := []op.Option{op.WithDevice(op.GPU), op.WithPrecision(kernels.FP32)}
	small := newTrainGraph(t, tensor.Float32, []int{1, 2, 40, 32}, true, gpu...)
	if err := small.step(); err != nil {
		t.Fatal(err)
	}
	want := small.results(t)
	stillWorks := func(after string) {
		t.Helper()
		if err := small.step(); err != nil {
			t.Fatalf("after %s: %v", after, err)
		}
		got := small.results(t)
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Fatalf("after %s: result %d changed", after, i)
			}
		}
	}

	bigD := newTrainGraph(t, tensor.Float32, []int{1, 1, 4, 300}, false, gpu...)
	if err := bigD.step(); !machineErrorIs(err, cudakernels.ErrUnsupported) {
		t.Errorf("D = 300: error %v, want ErrUnsupported", err)
	}
	stillWorks("D = 300")

	g := gorgonia.NewGraph()
	huge := func(name string) *gorgonia.Node {
		return gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(1024, 1024, 1024, 64), gorgonia.WithName(name))
	}
	if _, err := op.Attention(huge("q"), huge("k"), huge("v"), gpu...); !errors.Is(err, op.ErrInvalidInput) {
		t.Errorf("2^36 elements: error %v, want ErrInvalidInput", err)
	}

	// 256 MiB per tensor, with less than 128 MiB of the device left free
	// by a context of our own.
	big := newTrainGraph(t, tensor.Float32, []int{1, 16, 32768, 128}, false, gpu...)
	release := hogDevice(t, 128<<20)
	err := big.step()
	release()
	if !machineErrorIs(err, cudakernels.ErrOutOfMemory) {
		t.Errorf("out of memory: error %v, want ErrOutOfMemory", err)
	}
	t.Log(err)
	stillWorks("running out of device memory")
}

// machineErrorIs reports whether err, from a machine's RunAll, carries
// target, looking through Gorgonia's wrapper with op.Cause.
func machineErrorIs(err, target error) bool {
	return errors.Is(op.Cause(err), target)
}

// hogDevice allocates device memory in a context of its own until less
// than leave bytes are free, and returns a function that frees it all.
func hogDevice(t *testing.T, leave int64) func() {
	t.Helper()
	ctx := cu.NewContext(cu.Device(0), cu.SchedAuto)
	for _, piece := range []int64{1 << 30, 64 << 20, 4 << 20} {
		for {
			free, _, err := ctx.MemInfo()
			if err != nil {
				t.Fatal(err)
			}
			if free < leave || free-piece < leave/2 {
				break
			}
			if _, err := ctx.MemAlloc(piece); err != nil {
				break // fragmentation; try smaller pieces
			}
		}
	}
	return func() {
		// Destroying the context frees what it allocated.
		if err := ctx.Close(); err != nil {
			t.Fatal(fmt.Errorf("freeing the hog: %w", err))
		}
	}
}

// TestGPUAttentionLSE runs AttentionLSE on the GPU in float64 beside the
// CPU: O, the LSE and the gradients agree, both when the loss gives the LSE
// a zero gradient and when it gives it a random one (folded into D on both
// machines).
func TestGPUAttentionLSE(t *testing.T) {
	requireGPU(t)
	c := graphCase{2, 2, 70, 90, 64, true}
	p := c.params()
	in := randomInputs(p, 41)
	for _, u := range [][]float64{make([]float64, p.LSELen()), normals(rand.New(rand.NewPCG(42, 3)), p.LSELen())} {
		in.u = u
		var res [2][][]float64
		for i, dev := range []op.Device{op.GPU, op.CPU} {
			vc := variantCase{c: c, opts: []op.Option{op.WithDevice(dev)}}
			gr := vc.build(t, tensor.Float64, in)
			out := gr.run(t, false)
			res[i] = append(out[:], asFloat64s(t, gr.lse.Value()))
		}
		for j, name := range []string{"O", "dQ", "dK", "dV", "LSE"} {
			for e, want := range res[1][j] {
				if got := res[0][j][e]; !(math.Abs(got-want) <= 1e-10*max(1, math.Abs(want))) && got != want {
					t.Fatalf("%s[%d] = %v on the GPU, %v on the CPU", name, e, got, want)
				}
			}
		}
	}
}

// TestGPUVariantGraphsMatchCPU runs the variant graphs of
// TestVariantGraphsMatchReference on the GPU (FP32 and float64 on CUDA
// cores) beside the CPU, Tape and Lisp machines: GQA, windows, softcap,
// ALiBi, lengths and dropout (the same mask on both machines), alone and
// together, and the bias with its gradient.
func TestGPUVariantGraphsMatchCPU(t *testing.T) {
	requireGPU(t)
	for i, vc := range variantCases() {
		p := vc.params()
		in := randomInputs(p, uint64(500+i))
		for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
			tol := 1e-10
			if dt == tensor.Float32 {
				tol = 1e-5
			}
			for _, lisp := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%v/lisp=%v", vc.name, dt, lisp), func(t *testing.T) {
					var res [2][][]float64
					for d, dev := range []op.Device{op.GPU, op.CPU} {
						on := vc
						on.opts = append(slices.Clone(vc.opts), op.WithDevice(dev))
						res[d] = on.build(t, dt, in).run(t, lisp)
					}
					for j, name := range []string{"O", "dQ", "dK", "dV", "dBias"}[:len(res[1])] {
						scale := max(1, slices.Max(absAll(res[1][j])))
						for e, want := range res[1][j] {
							if d := math.Abs(res[0][j][e] - want); !(d <= tol*scale) {
								t.Fatalf("%s[%d] = %v on the GPU, %v on the CPU (diff %.3g)", name, e, res[0][j][e], want, d)
							}
						}
					}
				})
			}
		}
	}
}

// TestGPUBiasOnTensorCores: a graph with a bias in BF16 on the GPU runs
// the tensor-core kernels of the bias (kernel-level precision is the
// conformance suite's), and the bias reaches them: O is nearer the CPU's O
// with the bias than the CPU's without it, by a factor the bias's size
// makes large (scores moved by N(0, 3²) against bf16 rounding), and dBias
// comes back with the CPU's within a quarter of its norm, where a missing
// or misplaced gradient is off by all of it.
func TestGPUBiasOnTensorCores(t *testing.T) {
	requireGPU(t)
	vc := variantCase{c: graphCase{1, 2, 80, 80, 64, true}, bias: [2]int{1, 2}}
	in := randomInputs(vc.params(), 1)
	for i := range in.bias {
		in.bias[i] *= 3
	}
	gpu := vc
	gpu.opts = []op.Option{op.WithDevice(op.GPU), op.WithPrecision(kernels.BF16)}
	got := gpu.build(t, tensor.Float32, in).run(t, false)
	want := vc.build(t, tensor.Float32, in).run(t, false)
	plain := variantCase{c: vc.c}
	noBias := in
	noBias.bias, noBias.biasShape = nil, nil
	without := plain.build(t, tensor.Float32, noBias).run(t, false)
	dist := func(a, b []float64) float64 {
		var s float64
		for i := range a {
			s += (a[i] - b[i]) * (a[i] - b[i])
		}
		return math.Sqrt(s)
	}
	if dw, dn := dist(got[0], want[0]), dist(got[0], without[0]); !(dw*10 < dn) {
		t.Errorf("O: %.3g from the CPU's with the bias, %.3g from its without: the bias did not reach the kernels", dw, dn)
	}
	dbias, norm := got[4], dist(want[4], make([]float64, len(want[4])))
	if d := dist(dbias, want[4]); !(d < norm/4) {
		t.Errorf("dBias: %.3g from the CPU's, whose norm is %.3g", d, norm)
	}
}

// TestGPUKVCacheMatchesFullAttention generates through a cache in GPU
// memory, dense and paged, as TestKVCacheMatchesFullAttention does on the
// CPU: every row of the prefill (prompts of different lengths in one
// batch) and of every step must be full causal attention's over the
// sequence so far, within the float64 and FP32 bounds of the CPU test.
// Then the cache refuses an op on another backend.
func TestGPUKVCacheMatchesFullAttention(t *testing.T) {
	requireGPU(t)
	for _, v := range []struct {
		name string
		pr   func() *kvProblem
	}{
		{"GQA", func() *kvProblem { return newKVProblem(4, 2, 16, []int{150, 1, 37}, 6, 1) }},
		{"window+softcap+ALiBi", func() *kvProblem {
			pr := newKVProblem(4, 1, 64, []int{70, 9}, 6, 3)
			pr.opts = []op.Option{op.WithWindow(24, -1), op.WithSoftcap(3), op.WithALiBi(slopes4)}
			pr.set = func(p *kernels.Params) {
				p.Window, p.Softcap, p.ALiBi = kernels.Window{On: true, Left: 24, Right: -1}, 3, slopes4
			}
			return pr
		}},
	} {
		for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
			for _, page := range []int{0, 16} {
				t.Run(fmt.Sprintf("%s/%v/page=%d", v.name, dt, page), func(t *testing.T) {
					pr := v.pr()
					pr.opts = append(pr.opts, op.WithDevice(op.GPU), op.WithPrecision(kernels.FP32))
					opts := []op.CacheOption{op.CacheDevice(op.GPU)}
					if page > 0 {
						opts = append(opts, op.CachePageSize(page))
					}
					cache, err := op.NewKVCache(len(pr.prompts), pr.hkv, pr.d, 200, dt, opts...)
					if err != nil {
						t.Fatal(err)
					}
					defer cache.Close()
					generate(t, pr, dt, cache).check(t, "prefill and steps on the GPU")
					if cache.Bytes() == 0 {
						t.Error("a GPU cache that ran reports 0 bytes")
					}
					other := *pr
					other.opts = append(slices.Clone(v.pr().opts), op.WithDevice(op.GPU), op.WithPrecision(kernels.BF16))
					g, err := buildCached(t, &other, dt, cache, 1, false)
					if err == nil {
						_, err = g.run(&other, dt, make([]int, len(pr.prompts)), slices.Repeat([]int{1}, len(pr.prompts)))
					}
					if dt == tensor.Float32 && !errors.Is(err, op.ErrInvalidInput) {
						t.Errorf("the cache on an op of another precision: got %v, want an error wrapping ErrInvalidInput", err)
					}
				})
			}
		}
	}
	// A GPU cache with a CPU op, and a CPU cache with a GPU op.
	pr := newKVProblem(2, 2, 8, []int{3}, 1, 4)
	gpuCache, err := op.NewKVCache(1, 2, 8, 16, tensor.Float32, op.CacheDevice(op.GPU))
	if err != nil {
		t.Fatal(err)
	}
	defer gpuCache.Close()
	if _, err := buildCached(t, pr, tensor.Float32, gpuCache, 1, false, op.WithDevice(op.CPU)); !errors.Is(err, op.ErrInvalidInput) {
		t.Errorf("a GPU cache on a CPU op: got %v, want ErrInvalidInput", err)
	}
	cpuCache, err := op.NewKVCache(1, 2, 8, 16, tensor.Float32)
	if err != nil {
		t.Fatal(err)
	}
	defer cpuCache.Close()
	if _, err := buildCached(t, pr, tensor.Float32, cpuCache, 1, false, op.WithDevice(op.GPU)); !errors.Is(err, op.ErrInvalidInput) {
		t.Errorf("a CPU cache on a GPU op: got %v, want ErrInvalidInput", err)
	}
}
