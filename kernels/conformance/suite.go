package conformance

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// float64Tolerance is the largest error allowed to a float64 backend,
// relative to the magnitude of each output.
const float64Tolerance = 1e-10

// Run checks backend b, forward and backward. prec is the arithmetic of b's
// float32 path; it picks the naive baseline that sets the float32 tolerance.
// Options relax what is required where the package documentation allows.
func Run(t *testing.T, b kernels.Backend, prec kernels.Precision, opts ...Option) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	run(t, b, prec, o)
}

// An Option relaxes a requirement of Run.
type Option func(*options)

type options struct {
	maskedNaN, nondeterministic bool
	variants                    map[Variant]bool
}

// A Variant is one of the attention variants of kernels.Params beyond
// plain attention. Run checks a variant only on a backend that claims it
// (WithVariants); for others its cases are skipped, with the reason.
type Variant int

const (
	// GQA is grouped-query attention: Params.Hkv < H.
	GQA Variant = iota
	// Window is a local window: Params.Window.On.
	Window
	// Softcap is Params.Softcap ≠ 0.
	Softcap
	// ALiBi is Params.ALiBi ≠ nil.
	ALiBi
	// Lengths are per-sequence lengths: Params.QLens or KLens not nil.
	Lengths
	// Dropout is Params.Dropout.On().
	Dropout
	// LSEGradient is a backward given a gradient with respect to the LSE
	// (dlse not nil), which the backend must fold into D.
	LSEGradient
	// Bias is an additive bias with its gradient: Params.Bias ≠ nil, full
	// or broadcast over the batch, the heads or both.
	Bias
	// Paged is keys and values read from a page pool through block
	// tables: Params.Pages ≠ nil, forward only. A backend that does not
	// claim it must refuse it with an error.
	Paged
)

func (v Variant) String() string {
	switch v {
	case GQA:
		return "GQA"
	case Window:
		return "window"
	case Softcap:
		return "softcap"
	case ALiBi:
		return "ALiBi"
	case Lengths:
		return "lengths"
	case Dropout:
		return "dropout"
	case LSEGradient:
		return "LSE gradient"
	case Bias:
		return "bias"
	case Paged:
		return "paged"
	}
	return fmt.Sprintf("Variant(%d)", int(v))
}

// AllVariants lists every Variant.
var AllVariants = []Variant{GQA, Window, Softcap, ALiBi, Lengths, Dropout, LSEGradient, Bias, Paged}

// WithVariants says that the backend computes the variants vs: their golden
// cases and sweep run. Without it, Run checks plain attention only.
func WithVariants(vs ...Variant) Option {
	return func(o *options) {
		if o.variants == nil {
			o.variants = map[Variant]bool{}
		}
		for _, v := range vs {
			o.variants[v] = true
		}
	}
}

// variantsOf lists the variants p uses.
func variantsOf(p kernels.Params) []Variant {
	var vs []Variant
	if p.KVHeads() != p.H {
		vs = append(vs, GQA)
	}
	if p.Window.On {
		vs = append(vs, Window)
	}
	if p.Softcap != 0 {
		vs = append(vs, Softcap)
	}
	if p.ALiBi != nil {
		vs = append(vs, ALiBi)
	}
	if p.QLens != nil || p.KLens != nil {
		vs = append(vs, Lengths)
	}
	if p.Dropout.On() {
		vs = append(vs, Dropout)
	}
	if p.Bias != nil {
		vs = append(vs, Bias)
	}
	if p.Pages != nil {
		vs = append(vs, Paged)
	}
	return vs
}

// skipUnsupported skips t when p uses a variant the backend does not claim.
func (o options) skipUnsupported(t *testing.T, b kernels.Backend, p kernels.Params) {
	t.Helper()
	for _, v := range variantsOf(p) {
		if !o.variants[v] {
			t.Skipf("%s does not claim the %v variant (conformance.WithVariants)", b.Name(), v)
		}
	}
}

// MaskedNaNMayPropagate accepts NaN where the reference is finite in the
// non-finite cases that have a causal mask, and in those of the variants
// (windows, lengths, grouped heads) that the backend claims: a tiled kernel multiplies the
// masked probabilities of a tile that the mask cuts, zeros, with every key,
// value or query row of that tile, and 0·NaN = 0·Inf = NaN, while the naive
// reference never touches a masked pair (kernels' doc, Masking convention).
// Everything else stays required: NaN and ±Inf where the reference has
// them, and O = 0, LSE = +Inf for rows that see no key.
func MaskedNaNMayPropagate() Option { return func(o *options) { o.maskedNaN = true } }

// NonDeterministic skips the determinism tests, which require
// bit-identical outputs from repeated calls: for a backend configured to
// sum in an order that varies from call to call (the fused GPU backward
// adds dQ with float32 reductions, cudakernels.WithDeterministic(false)).
// Every output is still held to the accuracy bounds.
func NonDeterministic() Option { return func(o *options) { o.nondeterministic = true } }

// RunShapes runs the suite's accuracy check, forward and backward in float32
// and float64, on each of the problems ps (random inputs), for shapes the
// sweep leaves out: large head dimensions, say.
func RunShapes(t *testing.T, b kernels.Backend, prec kernels.Precision, ps []kernels.Params) {
	for i, p := range ps {
		t.Run(shapeName(p), func(t *testing.T) {
			t.Parallel()
			checkProblem(t, b, prec, randomProblem(p, uint64(1000+i)))
		})
	}
}

// ReportErrors runs one problem of attention's usual scale (B = 1, H = 4,
// N = 512, D = 128, unit-normal inputs, non-causal) through b's float32
// path, applies the suite's float32 check, and logs each output's largest
// error relative to its largest value, beside the naive baseline's in the
// same precision: the figures the precision modes are documented with. It
// skips under the race detector, where the baselines take minutes.
func ReportErrors(t *testing.T, b kernels.Backend, prec kernels.Precision) {
	if raceDetector {
		t.Skip("the float32 and float64 baselines are too slow under the race detector")
	}
	p := kernels.Params{B: 1, H: 4, Nq: 512, Nk: 512, D: 128, Scale: 1 / math.Sqrt(128)}
	pr := randomProblem(p, 2026)
	q, k, v, do := widen(pr.q), widen(pr.k), widen(pr.v), widen(pr.do)
	want, err := reference(p, q, k, v, do, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := runPass(t, b, p, pr.q, pr.k, pr.v, pr.do, nil)
	check32(t, b, p, prec, got, want, pr.q, pr.k, pr.v, pr.do, nil, false)
	base := checks(p, prec != kernels.FP32, naive32(p, prec, pr.q, pr.k, pr.v, pr.do, nil), want, q, k, v, do)
	for i, c := range checks(p, prec != kernels.FP32, got, want, q, k, v, do) {
		e, _ := maxAbsErr(c.got, c.want, false)
		n := finiteErr(base[i].got, c.want)
		t.Logf("%v %s: max error / max|ref| = %.2e (naive %v: %.2e)", prec, c.name, e/maxAbs(c.want), prec, n/maxAbs(c.want))
	}
}

func run(t *testing.T, b kernels.Backend, prec kernels.Precision, o options) {
	t.Run("golden", func(t *testing.T) { testGolden(t, b, prec, o) })
	t.Run("sweep", func(t *testing.T) { testSweep(t, b, prec) })
	t.Run("variants", func(t *testing.T) { testVariants(t, b, prec, o) })
	t.Run("kv-cache", func(t *testing.T) { testKVCache(t, b, prec, o) })
	t.Run("sharp-softmax", func(t *testing.T) { testSharpSoftmax(t, b, prec) })
	t.Run("rows-without-keys", func(t *testing.T) { testRowsWithoutKeys(t, b) })
	t.Run("non-finite", func(t *testing.T) { testNonFinite(t, b, prec, o.maskedNaN) })
	t.Run("determinism", func(t *testing.T) { testDeterminism(t, b, o) })
	t.Run("bad-arguments", func(t *testing.T) { testBadArguments(t, b) })
}

// problem is one set of inputs, held in float32 so that both paths and the
// float64 reference see exactly the same numbers.
type problem struct {
	// p describes the problem; its Bias, when not nil, gives only the
	// shape (Bb, Hb), and bias the values (params puts them in).
	p           kernels.Params
	q, k, v, do []float32
	bias        []float32
	dlse        []float32 // the gradient with respect to the LSE; nil: none
	// leak accepts NaN where the reference is finite (see
	// MaskedNaNMayPropagate).
	leak bool
}

func randomProblem(p kernels.Params, seed uint64) problem {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	fill := func(n int) []float32 { return normals(rng, n) }
	pr := problem{p: p, q: fill(p.QLen()), k: fill(p.KLen()), v: fill(p.KLen()), do: fill(p.QLen())}
	if p.Bias != nil {
		pr.bias = fill(p.BiasLen())
	}
	return pr
}

// params returns pr.p with the bias values in both element types, so that
// the float32 and float64 passes, the float32 baseline and the float64
// reference read the same numbers.
func (pr problem) params() kernels.Params {
	return withBiasData(pr.p, pr.bias, widen(pr.bias))
}

// withBiasData returns p with a bias of p's shape holding d32 and d64 (no
// gradient slices); p without a bias is returned as it is.
func withBiasData(p kernels.Params, d32 []float32, d64 []float64) kernels.Params {
	if p.Bias != nil {
		p.Bias = &kernels.Bias{Bb: p.Bias.Bb, Hb: p.Bias.Hb, Data32: d32, Data64: d64}
	}
	return p
}

// withBiasGrad returns p whose bias (a copy) writes its gradient of
// element type T into grad; p without a bias is returned as it is.
func withBiasGrad[T kernels.Float](p kernels.Params, grad []T) kernels.Params {
	if p.Bias == nil {
		return p
	}
	b := *p.Bias
	switch g := any(grad).(type) {
	case []float32:
		b.Grad32 = g
	case []float64:
		b.Grad64 = g
	}
	p.Bias = &b
	return p
}

// normals returns n unit-normal values drawn from rng.
func normals(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func widen(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, xi := range x {
		y[i] = float64(xi)
	}
	return y
}

func narrow(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, xi := range x {
		y[i] = float32(xi)
	}
	return y
}

// reference computes the float64 answer with the naive kernels.
// dlse, when not nil, is the gradient with respect to the LSE.
// With a bias, p must hold its float64 data.
func reference(p kernels.Params, q, k, v, do, dlse []float64) (result[float64], error) {
	kept, digest, ok := references.get(p, float64Reference, [][]float64{q, k, v, do, dlse})
	if ok {
		return kept, nil
	}
	r := newResult[float64](p)
	if err := kernels.NaiveForward(p, q, k, v, r.o, r.lse); err != nil {
		return r, err
	}
	if err := kernels.NaiveBackward(withBiasGrad(p, r.dbias), q, k, v, r.o, r.lse, do, dlse, r.dq, r.dk, r.dv); err != nil {
		return r, err
	}
	r.mass = columnMass(p, q, k, r.lse)
	references.put(p, float64Reference, digest, r, resultBytes(r))
	return r, nil
}

func newResult[T kernels.Float](p kernels.Params) result[T] {
	r := result[T]{
		o: make([]T, p.QLen()), lse: make([]T, p.LSELen()),
		dq: make([]T, p.QLen()), dk: make([]T, p.KLen()), dv: make([]T, p.KLen()),
	}
	if p.Bias != nil {
		r.dbias = make([]T, p.BiasLen())
	}
	return r
}

// runPass calls the backend's forward then its backward, with dBias into
// the result when p has a bias (whose data of type T must be there), and
// fails the test if the inputs changed.
func runPass[T kernels.Float](t *testing.T, b kernels.Backend, p kernels.Params, q, k, v, do, dlse []T) result[T] {
	t.Helper()
	forward, backward := kernels.EntryPoints[T](b)
	bias := kernels.BiasData[T](p.Bias)
	in := [][]T{slices.Clone(q), slices.Clone(k), slices.Clone(v), slices.Clone(do), slices.Clone(bias)}
	r := newResult[T](p)
	for i := range r.dbias {
		r.dbias[i] = T(math.NaN()) // overwritten, never added into
	}
	if err := forward(p, q, k, v, r.o, r.lse); err != nil {
		t.Fatalf("%s forward (%T, %+v): %v", b.Name(), q, p, err)
	}
	if err := backward(withBiasGrad(p, r.dbias), q, k, v, r.o, r.lse, do, dlse, r.dq, r.dk, r.dv); err != nil {
		t.Fatalf("%s backward (%T, %+v): %v", b.Name(), q, p, err)
	}
	// NaN ≠ NaN, so equality is that of every element or of both NaN.
	same := func(a, b T) bool { return a == b || (a != a && b != b) }
	for i, x := range [][]T{q, k, v, do, bias} {
		if !slices.EqualFunc(x, in[i], same) {
			t.Fatalf("%s modified input %d", b.Name(), i)
		}
	}
	return r
}

// check64 requires every output within float64Tolerance of the reference.
func check64(t *testing.T, b kernels.Backend, p kernels.Params, got, want result[float64], q, k, v, do []float64, leak bool) {
	t.Helper()
	for _, c := range checks(p, false, got, want, q, k, v, do) {
		bound := float64Tolerance * max(maxAbs(c.want), c.floor)
		if e, at := maxAbsErr(c.got, c.want, leak); !(e <= bound) {
			t.Errorf("float64 %s: error %.3g > bound %.3g (got %v, want %v)",
				describe(c.name, p, at), e, bound, c.got[at], c.want[at])
		}
	}
}

// check32 requires every output within twice the error of the naive
// baseline in precision prec, plus two rounding units of its floor (see
// checks) or of its own magnitude, whichever is larger.
func check32(t *testing.T, b kernels.Backend, p kernels.Params, prec kernels.Precision, got result[float32], want result[float64], q, k, v, do, dlse []float32, leak bool) {
	t.Helper()
	base := naive32(p, prec, q, k, v, do, dlse)
	q64, k64, v64, do64 := widen(q), widen(k), widen(v), widen(do)
	baseChecks := checks(p, prec != kernels.FP32, base, want, q64, k64, v64, do64)
	for i, c := range checks(p, prec != kernels.FP32, got, want, q64, k64, v64, do64) {
		naiveErr := finiteErr(baseChecks[i].got, c.want)
		bound := 2*naiveErr + roundingAllowance(prec, c)
		e, at := maxAbsErr(c.got, c.want, leak)
		if logBounds {
			t.Logf("%v %s: error %.3g, bound %.3g, naive %v error %.3g", prec, c.name, e, bound, prec, naiveErr)
		}
		if !(e <= bound) {
			t.Errorf("%v %s: error %.3g > bound %.3g (naive %v error %.3g; got %v, want %v)",
				prec, describe(c.name, p, at), e, bound, prec, naiveErr, c.got[at], c.want[at])
		}
	}
}

// CheckPass checks a float32 forward and backward of problem p (dense
// float32 inputs q, k, v, do and outputs o, lse, dq, dk, dv; with a bias,
// p.Bias holds its float32 data and the computed dBias in Grad32)
// computed in precision prec against the float64 reference, with the
// suite's bounds: twice the error of the naive baseline in prec plus two
// rounding units of each output's floor. It serves computations that are
// not one kernels.Backend call, such as a ring of them (package ring).
func CheckPass(t *testing.T, p kernels.Params, prec kernels.Precision, q, k, v, do, o, lse, dq, dk, dv []float32) {
	t.Helper()
	got := result[float32]{o: o, lse: lse, dq: dq, dk: dk, dv: dv}
	if p.Bias != nil {
		got.dbias = p.Bias.Grad32
		p = withBiasData(p, p.Bias.Data32, widen(p.Bias.Data32))
	}
	want, err := reference(p, widen(q), widen(k), widen(v), widen(do), nil)
	if err != nil {
		t.Fatal(err)
	}
	check32(t, nil, p, prec, got, want, q, k, v, do, nil, false)
}

// logBounds (FLASHATTN_CONFORMANCE_LOG=1) makes check32 log every
// output's error, bound and naive error, passing or not: how a precision
// study reads the margins (run with -v).
var logBounds = os.Getenv("FLASHATTN_CONFORMANCE_LOG") == "1"

// roundingAllowance is what the bounds add to twice the naive baseline's
// error: two rounding units of the operand format times the output's
// largest magnitude, or two units of the accumulator times the output's
// floor (checks), whichever is larger. The floor is the error of sums whose
// operands both computations round alike (the inputs, P and dS in the
// operand format), so what differs is the order of the additions, done in
// float32 in every precision: for the tensor-core ones by an accumulator
// that truncates, off by up to a unit in the last place where rounding to
// nearest is off by half (accumulatorUnit).
func roundingAllowance[T kernels.Float](prec kernels.Precision, c tensorCheck[T]) float64 {
	return 2 * max(roundingUnit(prec)*maxAbs(c.want), accumulatorUnit(prec)*c.floor)
}

// accumulatorUnit is the rounding unit of the float32 sums: half an ulp
// at 1 for FP32, a whole one for the truncating tensor cores.
func accumulatorUnit(prec kernels.Precision) float64 {
	if prec == kernels.FP32 {
		return roundingUnit(kernels.FP32)
	}
	return 2 * roundingUnit(kernels.FP32)
}

// roundingUnit is half the spacing of numbers near 1 in the precision's
// storage format: float32 for FP32 and TF32 (results are float32).
func roundingUnit(prec kernels.Precision) float64 {
	switch prec {
	case kernels.BF16:
		return 1.0 / (1 << 8)
	case kernels.FP16:
		return 1.0 / (1 << 11)
	}
	return 1.0 / (1 << 24)
}

func testGolden(t *testing.T, b kernels.Backend, prec kernels.Precision, o options) {
	cases, err := loadGolden()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			o.skipUnsupported(t, b, c.Params)
			p := withBiasData(c.Params, nil, c.Bias)
			want := result[float64]{o: c.O, lse: c.LSE, dq: c.DQ, dk: c.DK, dv: c.DV, dbias: c.DBias,
				mass: columnMass(p, c.Q, c.K, c.LSE)}
			got := runPass(t, b, p, c.Q, c.K, c.V, c.DO, nil)
			check64(t, b, p, got, want, c.Q, c.K, c.V, c.DO, false)
			// The float32 path sees the inputs rounded to float32; its
			// reference is recomputed from exactly those inputs.
			q, k, v, do, bias := narrow(c.Q), narrow(c.K), narrow(c.V), narrow(c.DO), narrow(c.Bias)
			p32 := withBiasData(c.Params, bias, widen(bias))
			want32, err := reference(p32, widen(q), widen(k), widen(v), widen(do), nil)
			if err != nil {
				t.Fatal(err)
			}
			got32 := runPass(t, b, p32, q, k, v, do, nil)
			check32(t, b, p32, prec, got32, want32, q, k, v, do, nil, false)
		})
	}
}

// sweepParams lists the odd-size problems; short mode keeps the cheap ones.
func sweepParams(short bool) []kernels.Params {
	ns := []int{1, 17, 113, 255, 1023}
	ds := []int{8, 24, 40, 64, 80, 128}
	if short {
		ns = ns[:4]
		ds = []int{8, 40, 128}
	}
	var ps []kernels.Params
	for i, n := range ns {
		other := ns[(i+1)%len(ns)] // a different length, so Nq ≠ Nk both ways
		bh := 2
		if n > 255 {
			bh = 1
		}
		for _, d := range ds {
			for _, causal := range []bool{false, true} {
				for _, nn := range [][2]int{{n, n}, {n, other}, {other, n}} {
					ps = append(ps, kernels.Params{B: bh, H: 2, Nq: nn[0], Nk: nn[1], D: d,
						Scale: 1 / math.Sqrt(float64(d)), Causal: causal})
				}
			}
		}
	}
	return ps
}

func testSweep(t *testing.T, b kernels.Backend, prec kernels.Precision) {
	for i, p := range sweepParams(testing.Short() || raceDetector) {
		t.Run(shapeName(p), func(t *testing.T) {
			t.Parallel()
			checkProblem(t, b, prec, randomProblem(p, uint64(i)))
		})
	}
}

func shapeName(p kernels.Params) string {
	name := fmt.Sprintf("B%dH%d_Nq%d_Nk%d_D%d_causal=%v", p.B, p.H, p.Nq, p.Nk, p.D, p.Causal)
	if p.KVHeads() != p.H {
		name += fmt.Sprintf("_Hkv%d", p.KVHeads())
	}
	if p.Window.On {
		name += fmt.Sprintf("_window=%d,%d", p.Window.Left, p.Window.Right)
	}
	if p.Softcap != 0 {
		name += fmt.Sprintf("_softcap=%v", p.Softcap)
	}
	if p.ALiBi != nil {
		name += "_alibi"
	}
	if p.Bias != nil {
		name += fmt.Sprintf("_bias%dx%d", p.Bias.Bb, p.Bias.Hb)
	}
	if p.QLens != nil {
		name += "_qlens"
	}
	if p.KLens != nil {
		name += "_klens"
	}
	if p.Dropout.P != 0 {
		name += fmt.Sprintf("_dropout=%v", p.Dropout.P)
	}
	return name
}

// checkProblem runs both paths on pr and checks them against the reference.
func checkProblem(t *testing.T, b kernels.Backend, prec kernels.Precision, pr problem) {
	t.Helper()
	p := pr.params()
	q, k, v, do := widen(pr.q), widen(pr.k), widen(pr.v), widen(pr.do)
	var dlse []float64
	if pr.dlse != nil {
		dlse = widen(pr.dlse)
	}
	want, err := reference(p, q, k, v, do, dlse)
	if err != nil {
		t.Fatal(err)
	}
	check64(t, b, p, runPass(t, b, p, q, k, v, do, dlse), want, q, k, v, do, pr.leak)
	check32(t, b, p, prec, runPass(t, b, p, pr.q, pr.k, pr.v, pr.do, pr.dlse), want, pr.q, pr.k, pr.v, pr.do, pr.dlse, pr.leak)
}

// testSharpSoftmax makes the row maximum grow from one key block to the next,
// so the online softmax must rescale its accumulator many times, with scores
// spanning about ±60.
func testSharpSoftmax(t *testing.T, b kernels.Backend, prec kernels.Precision) {
	p := kernels.Params{B: 1, H: 2, Nq: 300, Nk: 700, D: 64, Scale: 0.125, Causal: true}
	pr := randomProblem(p, 99)
	for i := range pr.q {
		pr.q[i] *= 4
	}
	for j := range p.B * p.H * p.Nk {
		pr.k[j*p.D] += float32(j%p.Nk) / 40
		pr.q[j%(p.B*p.H*p.Nq)*p.D] = 8
	}
	checkProblem(t, b, prec, pr)
}

// testRowsWithoutKeys checks the rows a bottom-right causal mask leaves
// empty when Nq > Nk: exact zeros and +Inf, no NaN.
func testRowsWithoutKeys(t *testing.T, b kernels.Backend) {
	p := kernels.Params{B: 2, H: 3, Nq: 150, Nk: 20, D: 32, Scale: 0.2, Causal: true}
	pr := randomProblem(p, 7)
	r32 := runPass(t, b, p, pr.q, pr.k, pr.v, pr.do, nil)
	r64 := runPass(t, b, p, widen(pr.q), widen(pr.k), widen(pr.v), widen(pr.do), nil)
	for bh := range p.B * p.H {
		for i := range p.Nq {
			empty := p.Mask(0).VisibleKeys(i) == 0
			row := r32.o[(bh*p.Nq+i)*p.D : (bh*p.Nq+i+1)*p.D]
			dq := r32.dq[(bh*p.Nq+i)*p.D : (bh*p.Nq+i+1)*p.D]
			row64 := r64.o[(bh*p.Nq+i)*p.D : (bh*p.Nq+i+1)*p.D]
			for d := range p.D {
				for _, x := range []float64{float64(row[d]), float64(dq[d]), row64[d]} {
					if math.IsNaN(x) || (empty && x != 0) {
						t.Fatalf("head %d row %d (empty=%v): value %v, want 0 and never NaN", bh, i, empty, x)
					}
				}
			}
			if l := r32.lse[bh*p.Nq+i]; empty != math.IsInf(float64(l), 1) {
				t.Fatalf("head %d row %d: LSE %v, want +Inf exactly when the row sees no key", bh, i, l)
			}
		}
	}
	for _, x := range append(slices.Clone(r32.dk), r32.dv...) {
		if math.IsNaN(float64(x)) {
			t.Fatal("NaN in dK or dV")
		}
	}
}

// testDeterminism runs a problem large enough to use every parallel path
// twice and requires bit-identical results; then the same with a bias
// broadcast over the batch and the heads, whose gradient sums over every
// head, and over the batch alone with grouped heads.
func testDeterminism(t *testing.T, b kernels.Backend, o options) {
	if o.nondeterministic {
		t.Skipf("%s does not promise bit-identical repeated calls (conformance.NonDeterministic)", b.Name())
	}
	p := kernels.Params{B: 1, H: 3, Nq: 300, Nk: 700, D: 40, Scale: 0.15, Causal: true}
	t.Run("plain", func(t *testing.T) { checkDeterministic(t, b, randomProblem(p, 11)) })
	for _, bp := range []kernels.Params{
		{B: 2, H: 3, Nq: 300, Nk: 700, D: 40, Scale: 0.15, Causal: true, Bias: &kernels.Bias{Bb: 1, Hb: 1}},
		{B: 3, H: 4, Hkv: 2, Nq: 200, Nk: 300, D: 24, Scale: 0.2, Bias: &kernels.Bias{Bb: 1, Hb: 4}},
	} {
		t.Run(shapeName(bp), func(t *testing.T) {
			o.skipUnsupported(t, b, bp)
			checkDeterministic(t, b, randomProblem(bp, 12))
		})
	}
}

// checkDeterministic runs pr twice in each element type and requires
// bit-identical outputs.
func checkDeterministic(t *testing.T, b kernels.Backend, pr problem) {
	p := pr.params()
	first, second := runPass(t, b, p, pr.q, pr.k, pr.v, pr.do, nil), runPass(t, b, p, pr.q, pr.k, pr.v, pr.do, nil)
	q, k, v, do := widen(pr.q), widen(pr.k), widen(pr.v), widen(pr.do)
	first64, second64 := runPass(t, b, p, q, k, v, do, nil), runPass(t, b, p, q, k, v, do, nil)
	for i, pair := range [][2][]float32{{first.o, second.o}, {first.lse, second.lse}, {first.dq, second.dq}, {first.dk, second.dk}, {first.dv, second.dv}, {first.dbias, second.dbias}} {
		if !slices.Equal(pair[0], pair[1]) {
			t.Errorf("float32 output %d differs between two identical calls", i)
		}
	}
	for i, pair := range [][2][]float64{{first64.o, second64.o}, {first64.lse, second64.lse}, {first64.dq, second64.dq}, {first64.dk, second64.dk}, {first64.dv, second64.dv}, {first64.dbias, second64.dbias}} {
		if !slices.Equal(pair[0], pair[1]) {
			t.Errorf("float64 output %d differs between two identical calls", i)
		}
	}
}

// testBadArguments requires an error wrapping kernels.ErrInvalidParams, not
// a panic, for invalid parameters and slice lengths.
func testBadArguments(t *testing.T, b kernels.Backend) {
	good := kernels.Params{B: 1, H: 2, Nq: 5, Nk: 7, D: 8, Scale: 0.3}
	pr := randomProblem(good, 3)
	r := newResult[float32](good)
	bad := map[string]func() error{
		"D=0": func() error {
			p := good
			p.D = 0
			return b.Forward32(p, pr.q, pr.k, pr.v, r.o, r.lse)
		},
		"Nk=0": func() error {
			p := good
			p.Nk = 0
			return b.Forward32(p, pr.q, pr.k, pr.v, r.o, r.lse)
		},
		"NaN scale": func() error {
			p := good
			p.Scale = math.NaN()
			return b.Forward32(p, pr.q, pr.k, pr.v, r.o, r.lse)
		},
		"short q": func() error { return b.Forward32(good, pr.q[1:], pr.k, pr.v, r.o, r.lse) },
		"short lse": func() error {
			return b.Backward32(good, pr.q, pr.k, pr.v, r.o, r.lse[1:], pr.do, nil, r.dq, r.dk, r.dv)
		},
		"long dv": func() error {
			return b.Backward32(good, pr.q, pr.k, pr.v, r.o, r.lse, pr.do, nil, r.dq, r.dk, append(r.dv, 0))
		},
		"bias Bb = 2 of B = 1": func() error {
			p := good
			p.Bias = &kernels.Bias{Bb: 2, Hb: 1, Data32: make([]float32, 2*5*7)}
			return b.Forward32(p, pr.q, pr.k, pr.v, r.o, r.lse)
		},
		"bias Hb = 3 of H = 2": func() error {
			p := good
			p.Bias = &kernels.Bias{Bb: 1, Hb: 3, Data32: make([]float32, 3*5*7)}
			return b.Forward32(p, pr.q, pr.k, pr.v, r.o, r.lse)
		},
		"short bias": func() error {
			p := good
			p.Bias = &kernels.Bias{Bb: 1, Hb: 2, Data32: make([]float32, 2*5*7-1)}
			return b.Forward32(p, pr.q, pr.k, pr.v, r.o, r.lse)
		},
		"bias without float32 data": func() error {
			p := good
			p.Bias = &kernels.Bias{Bb: 1, Hb: 1, Data64: make([]float64, 5*7)}
			return b.Forward32(p, pr.q, pr.k, pr.v, r.o, r.lse)
		},
		"long bias gradient": func() error {
			p := good
			p.Bias = &kernels.Bias{Bb: 1, Hb: 1, Data32: make([]float32, 5*7), Grad32: make([]float32, 5*7+1)}
			return b.Backward32(p, pr.q, pr.k, pr.v, r.o, r.lse, pr.do, nil, r.dq, r.dk, r.dv)
		},
	}
	for name, call := range bad {
		t.Run(name, func(t *testing.T) {
			if err := call(); !errors.Is(err, kernels.ErrInvalidParams) {
				t.Fatalf("got error %v, want one wrapping kernels.ErrInvalidParams", err)
			}
		})
	}
}
