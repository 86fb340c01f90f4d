package op_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// kvProblem is a batch of sequences to generate through a cache: sequence
// b has a prompt of prompts[b] tokens and then steps more, one per run.
// The tokens' q, k and v are drawn up front for the whole sequences, as
// float32 values so that the float32 and float64 runs and references see
// the same numbers.
type kvProblem struct {
	h, hkv, d int
	prompts   []int
	steps     int
	opts      []op.Option           // the variant options, beside causal and the cache
	set       func(*kernels.Params) // the same options, for the reference
	q, k, v   [][]float32           // per sequence: [H, L, D] and [Hkv, L, D], L its final length
}

func newKVProblem(h, hkv, d int, prompts []int, steps int, seed uint64) *kvProblem {
	pr := &kvProblem{h: h, hkv: hkv, d: d, prompts: prompts, steps: steps}
	rng := rand.New(rand.NewPCG(seed, 0xca))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	for _, p := range prompts {
		l := p + steps
		pr.q, pr.k, pr.v = append(pr.q, fill(h*l*d)), append(pr.k, fill(hkv*l*d)), append(pr.v, fill(hkv*l*d))
	}
	return pr
}

func (pr *kvProblem) length(b int) int { return pr.prompts[b] + pr.steps }

// kvReference is sequence b's full causal attention over its final length,
// in the precision of T: row t of it is what the cached run that computes
// token t must give, causal rows seeing only the keys before them.
func kvReference[T kernels.Float](pr *kvProblem, b int) []T {
	l := pr.length(b)
	p := kernels.Params{B: 1, H: pr.h, Hkv: pr.hkv, Nq: l, Nk: l, D: pr.d, Scale: 1 / math.Sqrt(float64(pr.d)), Causal: true}
	if pr.set != nil {
		pr.set(&p)
	}
	conv := func(x []float32) []T {
		y := make([]T, len(x))
		for i, xi := range x {
			y[i] = T(xi)
		}
		return y
	}
	o, lse := make([]T, p.QLen()), make([]T, p.LSELen())
	if err := kernels.NaiveForward(p, conv(pr.q[b]), conv(pr.k[b]), conv(pr.v[b]), o, lse); err != nil {
		panic(err)
	}
	return o
}

// cachedGraph is one attention node on a cache, for runs of t new tokens.
type cachedGraph struct {
	g       *gorgonia.ExprGraph
	q, k, v *gorgonia.Node
	lens    *gorgonia.Node // nil: every sequence appends t tokens
	out     *gorgonia.Node
	m       gorgonia.VM
	t       int
}

func buildCached(t testing.TB, pr *kvProblem, dt tensor.Dtype, cache *op.KVCache, tokens int, lengths bool, extra ...op.Option) (*cachedGraph, error) {
	t.Helper()
	b := len(pr.prompts)
	g := gorgonia.NewGraph()
	cg := &cachedGraph{g: g, t: tokens,
		q: gorgonia.NewTensor(g, dt, 4, gorgonia.WithShape(b, pr.h, tokens, pr.d), gorgonia.WithName("q")),
		k: gorgonia.NewTensor(g, dt, 4, gorgonia.WithShape(b, pr.hkv, tokens, pr.d), gorgonia.WithName("k")),
		v: gorgonia.NewTensor(g, dt, 4, gorgonia.WithShape(b, pr.hkv, tokens, pr.d), gorgonia.WithName("v")),
	}
	opts := append([]op.Option{op.WithCausal(true), op.WithKVCache(cache)}, pr.opts...)
	if lengths {
		cg.lens = gorgonia.NewVector(g, tensor.Int, gorgonia.WithShape(b), gorgonia.WithName("qlens"))
		opts = append(opts, op.WithLengths(cg.lens, nil))
	}
	out, err := op.Attention(cg.q, cg.k, cg.v, append(opts, extra...)...)
	if err != nil {
		return nil, err
	}
	cg.out = out
	cg.m = gorgonia.NewTapeMachine(g)
	t.Cleanup(func() { cg.m.Close() })
	return cg, nil
}

// run feeds, for each sequence b, its tokens [from[b], from[b]+n[b]) into
// the graph's first n[b] rows (the other rows hold NaN, which must reach
// nothing) and returns the output [B, H, t, D] as float64.
func (cg *cachedGraph) run(pr *kvProblem, dt tensor.Dtype, from, n []int) ([]float64, error) {
	b, t := len(pr.prompts), cg.t
	q, k, v := nanSlice(b*pr.h*t*pr.d), nanSlice(b*pr.hkv*t*pr.d), nanSlice(b*pr.hkv*t*pr.d)
	for s := range b {
		l := pr.length(s)
		for i := range n[s] {
			for h := range pr.h {
				copy(q[((s*pr.h+h)*t+i)*pr.d:][:pr.d], pr.q[s][(h*l+from[s]+i)*pr.d:][:pr.d])
			}
			for h := range pr.hkv {
				copy(k[((s*pr.hkv+h)*t+i)*pr.d:][:pr.d], pr.k[s][(h*l+from[s]+i)*pr.d:][:pr.d])
				copy(v[((s*pr.hkv+h)*t+i)*pr.d:][:pr.d], pr.v[s][(h*l+from[s]+i)*pr.d:][:pr.d])
			}
		}
	}
	for _, x := range []struct {
		n    *gorgonia.Node
		data []float32
	}{{cg.q, q}, {cg.k, k}, {cg.v, v}} {
		if err := gorgonia.Let(x.n, denseOf(dt, x.n.Shape(), x.data)); err != nil {
			return nil, err
		}
	}
	if cg.lens != nil {
		if err := gorgonia.Let(cg.lens, tensor.New(tensor.WithShape(b), tensor.WithBacking(slices.Clone(n)))); err != nil {
			return nil, err
		}
	}
	defer cg.m.Reset()
	if err := cg.m.RunAll(); err != nil {
		return nil, op.Cause(err)
	}
	switch x := cg.out.Value().Data().(type) {
	case []float32:
		out := make([]float64, len(x))
		for i, xi := range x {
			out[i] = float64(xi)
		}
		return out, nil
	default:
		return slices.Clone(x.([]float64)), nil
	}
}

func nanSlice(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(math.NaN())
	}
	return x
}

func denseOf(dt tensor.Dtype, s tensor.Shape, x []float32) *tensor.Dense {
	if dt == tensor.Float32 {
		return tensor.New(tensor.WithShape(s...), tensor.WithBacking(slices.Clone(x)))
	}
	y := make([]float64, len(x))
	for i, xi := range x {
		y[i] = float64(xi)
	}
	return tensor.New(tensor.WithShape(s...), tensor.WithBacking(y))
}

// checker compares the rows of cached runs with the references: float64
// within 1e-10 of the largest reference magnitude, float32 within twice
// the naive float32 computation's error plus two rounding units, both
// measured against float64.
type checker struct {
	pr             *kvProblem
	dt             tensor.Dtype
	ref64, ref32   [][]float64
	worst, naive32 float64 // the largest errors seen, run and naive float32
	scale          float64 // the largest reference magnitude
}

func newChecker(pr *kvProblem, dt tensor.Dtype) *checker {
	c := &checker{pr: pr, dt: dt}
	for b := range pr.prompts {
		r64 := kvReference[float64](pr, b)
		c.ref64 = append(c.ref64, r64)
		for _, x := range r64 {
			c.scale = max(c.scale, math.Abs(x))
		}
		if dt == tensor.Float32 {
			r32 := kvReference[float32](pr, b)
			w := make([]float64, len(r32))
			for i, x := range r32 {
				w[i] = float64(x)
			}
			c.ref32 = append(c.ref32, w)
		}
	}
	return c
}

// add records the errors of output rows [0, n[b]) of a run (out [B, H, t,
// D]) that computed tokens [from[b], from[b]+n[b]) of each sequence, and
// requires the padding rows to be 0.
func (c *checker) add(t *testing.T, out []float64, tokens int, from, n []int) {
	t.Helper()
	pr := c.pr
	for b := range pr.prompts {
		l := pr.length(b)
		for h := range pr.h {
			for i := range tokens {
				row := out[((b*pr.h+h)*tokens+i)*pr.d:][:pr.d]
				if i >= n[b] {
					for _, x := range row {
						if x != 0 {
							t.Fatalf("sequence %d head %d padding row %d: %v, want 0", b, h, i, row)
						}
					}
					continue
				}
				at := (h*l + from[b] + i) * pr.d
				for d, x := range row {
					want := c.ref64[b][at+d]
					c.worst = max(c.worst, math.Abs(x-want))
					if math.IsNaN(x) {
						c.worst = math.Inf(1)
					}
					if c.ref32 != nil {
						c.naive32 = max(c.naive32, math.Abs(c.ref32[b][at+d]-want))
					}
				}
			}
		}
	}
}

func (c *checker) check(t *testing.T, what string) {
	t.Helper()
	bound := 1e-10 * c.scale
	if c.dt == tensor.Float32 {
		bound = 2*c.naive32 + 2*c.scale/(1<<24)
	}
	if !(c.worst <= bound) {
		t.Errorf("%s: largest error %.3g > bound %.3g (naive float32 error %.3g)", what, c.worst, bound, c.naive32)
	}
}

// generate runs pr's prefill and steps through cache and checks every
// run's rows: the prompts through one graph of max(prompts) tokens with
// per-sequence lengths, then each step through a one-token graph.
func generate(t *testing.T, pr *kvProblem, dt tensor.Dtype, cache *op.KVCache) *checker {
	t.Helper()
	c := newChecker(pr, dt)
	b := len(pr.prompts)
	prefill, err := buildCached(t, pr, dt, cache, slices.Max(pr.prompts), true)
	if err != nil {
		t.Fatal(err)
	}
	step, err := buildCached(t, pr, dt, cache, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	zeros := make([]int, b)
	out, err := prefill.run(pr, dt, zeros, pr.prompts)
	if err != nil {
		t.Fatal(err)
	}
	c.add(t, out, prefill.t, zeros, pr.prompts)
	ones := slices.Repeat([]int{1}, b)
	for s := range pr.steps {
		from := make([]int, b)
		for i, p := range pr.prompts {
			from[i] = p + s
		}
		out, err := step.run(pr, dt, from, ones)
		if err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
		c.add(t, out, 1, from, ones)
	}
	for i := range b {
		if got := cache.Len(i); got != pr.length(i) {
			t.Errorf("sequence %d: Len %d, want %d", i, got, pr.length(i))
		}
	}
	return c
}

// TestKVCacheMatchesFullAttention generates with a cache, dense and paged
// (pages of 4 and of 64 tokens), in both dtypes, and requires every row of
// the prefill and of every step to be full causal attention's over the
// sequence so far: GQA, prompts of 1 to 150 tokens in one batch, and a
// window with softcap and ALiBi.
func TestKVCacheMatchesFullAttention(t *testing.T) {
	steps := 9
	if testing.Short() {
		steps = 4
	}
	for _, v := range []struct {
		name string
		pr   func() *kvProblem
	}{
		{"GQA", func() *kvProblem { return newKVProblem(4, 2, 16, []int{150, 1, 37}, steps, 1) }},
		{"MHA", func() *kvProblem { return newKVProblem(2, 2, 8, []int{3, 20}, steps, 2) }},
		{"window+softcap+ALiBi", func() *kvProblem {
			pr := newKVProblem(4, 1, 16, []int{70, 9}, steps, 3)
			pr.opts = []op.Option{op.WithWindow(24, -1), op.WithSoftcap(3), op.WithALiBi(slopes4)}
			pr.set = func(p *kernels.Params) {
				p.Window, p.Softcap, p.ALiBi = kernels.Window{On: true, Left: 24, Right: -1}, 3, slopes4
			}
			return pr
		}},
	} {
		for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
			for _, page := range []int{0, 4, 64} {
				t.Run(fmt.Sprintf("%s/%v/page=%d", v.name, dt, page), func(t *testing.T) {
					pr := v.pr()
					cache := newCache(t, pr, dt, 200, page)
					generate(t, pr, dt, cache).check(t, "prefill and steps")
				})
			}
		}
	}
}

func newCache(t *testing.T, pr *kvProblem, dt tensor.Dtype, capacity, page int) *op.KVCache {
	t.Helper()
	var opts []op.CacheOption
	if page > 0 {
		opts = append(opts, op.CachePageSize(page))
	}
	cache, err := op.NewKVCache(len(pr.prompts), pr.hkv, pr.d, capacity, dt, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	return cache
}

// TestKVCacheResetSequence generates two sequences, resets the second
// after two steps and gives it a new prompt in the run that takes the
// first one's next token, then steps both: each must match its own
// sequence's full attention, the first undisturbed by the other's reset.
func TestKVCacheResetSequence(t *testing.T) {
	for _, page := range []int{0, 4} {
		t.Run(fmt.Sprintf("page=%d", page), func(t *testing.T) {
			dt := tensor.Float64
			// Sequence 0 runs throughout: prompt 5, then 2 + 1 + 3 steps.
			// Sequence 1 is first prompt 6 with 2 steps, then another
			// sequence: prompt 7 and 3 steps.
			first := newKVProblem(4, 2, 8, []int{5, 6}, 6, 10)
			second := newKVProblem(4, 2, 8, []int{5, 7}, 3, 11)
			cache := newCache(t, first, dt, 64, page)
			c0, c1 := newChecker(first, dt), newChecker(second, dt)
			step, err := buildCached(t, first, dt, cache, 1, false)
			if err != nil {
				t.Fatal(err)
			}
			refill, err := buildCached(t, first, dt, cache, 7, true)
			if err != nil {
				t.Fatal(err)
			}
			out, err := refill.run(first, dt, []int{0, 0}, []int{5, 6})
			if err != nil {
				t.Fatal(err)
			}
			c0.add(t, out, 7, []int{0, 0}, []int{5, 6})
			for s := range 2 {
				out, err := step.run(first, dt, []int{5 + s, 6 + s}, []int{1, 1})
				if err != nil {
					t.Fatal(err)
				}
				c0.add(t, out, 1, []int{5 + s, 6 + s}, []int{1, 1})
			}
			if err := cache.ResetSequence(1); err != nil {
				t.Fatal(err)
			}
			if cache.Len(1) != 0 || cache.Len(0) != 7 {
				t.Fatalf("after the reset: lengths %d, %d, want 7, 0", cache.Len(0), cache.Len(1))
			}
			// Sequence 0's token 7 and sequence 1's new prompt in one run;
			// the rows of sequence 1 come from the second problem.
			mixed := &kvProblem{h: 4, hkv: 2, d: 8, prompts: []int{5, 5}, steps: 6,
				q: [][]float32{first.q[0], nil}, k: [][]float32{first.k[0], nil}, v: [][]float32{first.v[0], nil}}
			// Both sequences of mixed have the layout of length 5+6 = 11
			// that run reads; second's sequence 1 has length 7+3 = 10.
			mixed.q[1], mixed.k[1], mixed.v[1] = relength(second.q[1], 4, 10, 11, 8), relength(second.k[1], 2, 10, 11, 8), relength(second.v[1], 2, 10, 11, 8)
			out, err = refill.run(mixed, dt, []int{7, 0}, []int{1, 7})
			if err != nil {
				t.Fatal(err)
			}
			c0.add(t, maskSequence(out, first, 7, 1), 7, []int{7, 0}, []int{1, 0})
			c1.add(t, maskSequence(out, first, 7, 0), 7, []int{0, 0}, []int{0, 7})
			for s := range 3 {
				out, err := step.run(mixed, dt, []int{8 + s, 7 + s}, []int{1, 1})
				if err != nil {
					t.Fatal(err)
				}
				c0.add(t, maskSequence(out, first, 1, 1), 1, []int{8 + s, 0}, []int{1, 0})
				c1.add(t, maskSequence(out, first, 1, 0), 1, []int{0, 7 + s}, []int{0, 1})
			}
			c0.check(t, "the sequence that goes on")
			c1.check(t, "the refilled sequence")
			if cache.Len(0) != 11 || cache.Len(1) != 10 {
				t.Errorf("lengths %d, %d, want 11, 10", cache.Len(0), cache.Len(1))
			}
		})
	}
}

// relength copies x, [heads, from, d], into [heads, to, d] (to ≥ from).
func relength(x []float32, heads, from, to, d int) []float32 {
	y := make([]float32, heads*to*d)
	for h := range heads {
		copy(y[h*to*d:][:from*d], x[h*from*d:][:from*d])
	}
	return y
}

// maskSequence returns a copy of out ([B, H, t, D] for pr's batch) with
// sequence b's rows zeroed, for a checker that follows the other alone.
func maskSequence(out []float64, pr *kvProblem, tokens, b int) []float64 {
	y := slices.Clone(out)
	n := pr.h * tokens * pr.d
	clear(y[b*n : (b+1)*n])
	return y
}

// TestKVCacheCapacity fills one sequence to its capacity: the next run is
// an error that appends nothing, to either sequence, and once the full
// sequence is reset the cache goes on correctly.
func TestKVCacheCapacity(t *testing.T) {
	for _, page := range []int{0, 3} {
		t.Run(fmt.Sprintf("page=%d", page), func(t *testing.T) {
			dt := tensor.Float64
			pr := newKVProblem(2, 1, 8, []int{6, 2}, 4, 20)
			cache := newCache(t, pr, dt, 8, page)
			prefill, err := buildCached(t, pr, dt, cache, 6, true)
			if err != nil {
				t.Fatal(err)
			}
			step, err := buildCached(t, pr, dt, cache, 1, false)
			if err != nil {
				t.Fatal(err)
			}
			c := newChecker(pr, dt)
			if _, err := prefill.run(pr, dt, []int{0, 0}, []int{6, 2}); err != nil {
				t.Fatal(err)
			}
			for s := range 2 {
				out, err := step.run(pr, dt, []int{6 + s, 2 + s}, []int{1, 1})
				if err != nil {
					t.Fatal(err)
				}
				c.add(t, out, 1, []int{6 + s, 2 + s}, []int{1, 1})
			}
			bytes := cache.Bytes()
			_, err = step.run(pr, dt, []int{8, 4}, []int{1, 1})
			if !errors.Is(err, op.ErrInvalidInput) {
				t.Fatalf("past the capacity: got %v, want an error wrapping ErrInvalidInput", err)
			}
			if cache.Len(0) != 8 || cache.Len(1) != 4 || cache.Bytes() != bytes {
				t.Fatalf("the failed run changed the cache: lengths %d, %d, %d bytes (want 8, 4, %d)", cache.Len(0), cache.Len(1), cache.Bytes(), bytes)
			}
			// Sequence 1 goes on alone through its own lengths.
			if err := cache.ResetSequence(0); err != nil {
				t.Fatal(err)
			}
			out, err := prefill.run(pr, dt, []int{0, 4}, []int{6, 1})
			if err != nil {
				t.Fatal(err)
			}
			c.add(t, out, 6, []int{0, 4}, []int{6, 1})
			c.check(t, "around the capacity error")
		})
	}
}

// cacheFailingBackend computes nothing: every call fails.
type cacheFailingBackend struct{ cpukernels.Backend }

var errBackend = errors.New("backend failure")

func (cacheFailingBackend) Forward64(kernels.Params, []float64, []float64, []float64, []float64, []float64) error {
	return errBackend
}

// TestKVCacheFailedRunUndoesAppend requires a run whose backend fails to
// leave the lengths and the pages as they were.
func TestKVCacheFailedRunUndoesAppend(t *testing.T) {
	for _, page := range []int{0, 2} {
		pr := newKVProblem(2, 2, 8, []int{3, 5}, 0, 30)
		cache := newCache(t, pr, tensor.Float64, 16, page)
		good, err := buildCached(t, pr, tensor.Float64, cache, 5, true)
		if err != nil {
			t.Fatal(err)
		}
		bad, err := buildCached(t, pr, tensor.Float64, cache, 5, true, op.WithBackend(cacheFailingBackend{}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := good.run(pr, tensor.Float64, []int{0, 0}, []int{1, 1}); err != nil {
			t.Fatal(err)
		}
		bytes := cache.Bytes()
		if _, err := bad.run(pr, tensor.Float64, []int{1, 1}, []int{2, 4}); !errors.Is(err, errBackend) {
			t.Fatalf("page %d: got %v, want the backend's error", page, err)
		}
		if cache.Len(0) != 1 || cache.Len(1) != 1 {
			t.Errorf("page %d: after a failed run the lengths are %d, %d, want 1, 1", page, cache.Len(0), cache.Len(1))
		}
		// The pool may have grown, but the pages went back: a run that
		// needs them takes them without growing it again.
		grown := cache.Bytes()
		if page == 0 && grown != bytes {
			t.Errorf("a dense cache's bytes changed: %d, then %d", bytes, grown)
		}
		if _, err := good.run(pr, tensor.Float64, []int{1, 1}, []int{2, 4}); err != nil {
			t.Fatal(err)
		}
		if cache.Bytes() != grown {
			t.Errorf("page %d: the pages the failed run took were not handed back: %d bytes, then %d", page, grown, cache.Bytes())
		}
	}
}

// TestKVCachePagedHoldsItsPages requires a paged cache to hold the whole
// pages of its tokens, far less than batch × capacity, and a reset
// sequence's pages to serve the next prompt without the pool growing.
func TestKVCachePagedHoldsItsPages(t *testing.T) {
	const page, capacity = 16, 4096
	pr := newKVProblem(2, 2, 8, []int{1, 40, 150}, 0, 40)
	dt := tensor.Float32
	cache := newCache(t, pr, dt, capacity, page)
	if cache.Bytes() != 0 {
		t.Fatalf("an empty paged cache holds %d bytes", cache.Bytes())
	}
	prefill, err := buildCached(t, pr, dt, cache, 150, true)
	if err != nil {
		t.Fatal(err)
	}
	c := newChecker(pr, dt)
	out, err := prefill.run(pr, dt, []int{0, 0, 0}, pr.prompts)
	if err != nil {
		t.Fatal(err)
	}
	c.add(t, out, 150, []int{0, 0, 0}, pr.prompts)
	c.check(t, "the prefill")
	pageBytes := int64(2 * pr.hkv * page * pr.d * 4) // K and V
	pages := int64(1 + 3 + 10)                       // ⌈1/16⌉ + ⌈40/16⌉ + ⌈150/16⌉
	if got := cache.Bytes(); got != pages*pageBytes {
		t.Errorf("holds %d bytes, want %d: %d whole pages of %d", got, pages*pageBytes, pages, pageBytes)
	}
	dense := int64(3*2*capacity*pr.d*4) * 2
	if cache.Bytes()*10 > dense {
		t.Errorf("holds %d bytes, not far below the dense %d", cache.Bytes(), dense)
	}
	if err := cache.ResetSequence(2); err != nil {
		t.Fatal(err)
	}
	again := newKVProblem(2, 2, 8, []int{1, 40, 150}, 0, 41)
	if _, err := prefill.run(again, dt, []int{0, 0, 0}, []int{0, 0, 150}); err != nil {
		t.Fatal(err)
	}
	if got := cache.Bytes(); got != pages*pageBytes {
		t.Errorf("after a reset and refill of the same length: %d bytes, want %d (the pages handed back reused)", got, pages*pageBytes)
	}
}

// TestKVCacheErrors requires an error, not a panic or a wrong result, for
// every misuse of a cache.
func TestKVCacheErrors(t *testing.T) {
	pr := newKVProblem(2, 1, 8, []int{3}, 0, 50)
	newErr := map[string]func() error{
		"batch 0":      func() error { _, err := op.NewKVCache(0, 1, 8, 16, tensor.Float32); return err },
		"kvHeads 0":    func() error { _, err := op.NewKVCache(1, 0, 8, 16, tensor.Float32); return err },
		"headDim 0":    func() error { _, err := op.NewKVCache(1, 1, 0, 16, tensor.Float32); return err },
		"capacity 0":   func() error { _, err := op.NewKVCache(1, 1, 8, 0, tensor.Float32); return err },
		"dtype Int":    func() error { _, err := op.NewKVCache(1, 1, 8, 16, tensor.Int); return err },
		"page size 0":  func() error { _, err := op.NewKVCache(1, 1, 8, 16, tensor.Float32, op.CachePageSize(0)); return err },
		"page size -1": func() error { _, err := op.NewKVCache(1, 1, 8, 16, tensor.Float32, op.CachePageSize(-1)); return err },
		"too large":    func() error { _, err := op.NewKVCache(1<<16, 8, 128, 1<<16, tensor.Float32); return err },
		"unknown device": func() error {
			_, err := op.NewKVCache(1, 1, 8, 16, tensor.Float32, op.CacheDevice(op.Device(7)))
			return err
		},
	}
	for name, f := range newErr {
		if err := f(); !errors.Is(err, op.ErrInvalidInput) {
			t.Errorf("NewKVCache, %s: got %v, want an error wrapping ErrInvalidInput", name, err)
		}
	}
	if !builtWithGPU {
		if _, err := op.NewKVCache(1, 1, 8, 16, tensor.Float32, op.CacheDevice(op.GPU)); !errors.Is(err, op.ErrNoGPU) {
			t.Errorf("a GPU cache without the flashgpu tag: got %v, want an error wrapping ErrNoGPU", err)
		}
	}

	good := newCache(t, pr, tensor.Float32, 16, 0)
	build := func(dt tensor.Dtype, cache *op.KVCache, extra ...op.Option) error {
		_, err := buildCached(t, pr, dt, cache, 3, false, extra...)
		return err
	}
	other := func(batch, heads, dim int, dt tensor.Dtype) *op.KVCache {
		c, err := op.NewKVCache(batch, heads, dim, 16, dt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	closed := other(1, 1, 8, tensor.Float32)
	closed.Close()
	g := gorgonia.NewGraph()
	kLens := gorgonia.NewVector(g, tensor.Int, gorgonia.WithShape(1), gorgonia.WithName("klens"))
	buildErr := map[string]func() error{
		"another batch":      func() error { return build(tensor.Float32, other(2, 1, 8, tensor.Float32)) },
		"another head count": func() error { return build(tensor.Float32, other(1, 2, 8, tensor.Float32)) },
		"another dim":        func() error { return build(tensor.Float32, other(1, 1, 16, tensor.Float32)) },
		"another dtype":      func() error { return build(tensor.Float32, other(1, 1, 8, tensor.Float64)) },
		"nil cache":          func() error { return build(tensor.Float32, nil) },
		"closed cache":       func() error { return build(tensor.Float32, closed) },
		"dropout":            func() error { return build(tensor.Float32, good, op.WithDropout(0.1, 1)) },
		"key lengths": func() error {
			_, err := op.Attention(gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(1, 2, 3, 8)),
				gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(1, 1, 3, 8)),
				gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(1, 1, 3, 8)),
				op.WithKVCache(good), op.WithLengths(nil, kLens))
			return err
		},
		"a bias": func() error {
			bias := gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(1, 1, 3, 3))
			_, err := op.Attention(gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(1, 2, 3, 8)),
				gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(1, 1, 3, 8)),
				gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(1, 1, 3, 8)),
				op.WithKVCache(good), op.WithBias(bias))
			return err
		},
	}
	for name, f := range buildErr {
		if err := f(); !errors.Is(err, op.ErrInvalidInput) {
			t.Errorf("Attention, %s: got %v, want an error wrapping ErrInvalidInput", name, err)
		}
	}
	if err := build(tensor.Float32, good, op.WithDevice(op.GPU)); err == nil {
		t.Error("a GPU op with a host cache: no error")
	}

	// Differentiating is an error at graph build, through gorgonia.Grad.
	cg, err := buildCached(t, pr, tensor.Float32, good, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	loss := gorgonia.Must(gorgonia.Sum(cg.out))
	if _, err := gorgonia.Grad(loss, cg.q); err == nil {
		t.Error("gorgonia.Grad through a cached attention: no error")
	}

	// The LispMachine's backward refuses it too (DoDiff).
	cg, err = buildCached(t, pr, tensor.Float32, good, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	gorgonia.Must(gorgonia.Sum(cg.out))
	for _, n := range []*gorgonia.Node{cg.q, cg.k, cg.v} {
		gorgonia.Let(n, tensor.New(tensor.WithShape(n.Shape()...), tensor.WithBacking(make([]float32, n.Shape().TotalSize()))))
	}
	lisp := gorgonia.NewLispMachine(cg.g)
	defer lisp.Close()
	if err := lisp.RunAll(); err == nil {
		t.Error("the LispMachine's backward through a cached attention: no error")
	} else if !strings.Contains(err.Error(), "inference only") {
		t.Errorf("the LispMachine's backward: got %v, want the cache's refusal", err)
	}

	// A cache closed after the graph was built fails the run.
	late := other(1, 1, 8, tensor.Float32)
	cg, err = buildCached(t, pr, tensor.Float32, late, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	late.Close()
	if _, err := cg.run(pr, tensor.Float32, []int{0}, []int{3}); !errors.Is(err, op.ErrInvalidInput) {
		t.Errorf("a run on a closed cache: got %v, want an error wrapping ErrInvalidInput", err)
	}
	if err := good.ResetSequence(1); !errors.Is(err, op.ErrInvalidInput) {
		t.Errorf("ResetSequence(1) of a batch of 1: got %v, want an error wrapping ErrInvalidInput", err)
	}
	if err := late.ResetSequence(0); err == nil {
		t.Error("ResetSequence of a closed cache: no error")
	}
}
