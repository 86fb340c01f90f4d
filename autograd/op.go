package autograd

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"math"
	"slices"

	"github.com/chewxy/hm"
	"github.com/gorgonia-flash/flashattention/kernels"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Config is what fixes an attention op's result, apart from its inputs.
// The variant fields mean what kernels.Params's fields of the same names
// do; grouped-query attention needs none, as k and v's head count says it.
type Config struct {
	Backend kernels.Backend
	Scale   float64 // already resolved: never a "default" placeholder
	Causal  bool
	Window  kernels.Window
	Softcap float64
	ALiBi   []float64 // one slope per query head; New keeps its own copy
	// QLens and KLens, when not the zero Dtype, say that the op takes
	// per-sequence lengths as inputs after q, k and v (QLens first):
	// vectors [B] of that dtype (Int, Int32 or Int64) whose values set
	// kernels.Params's QLens and KLens at every run, so that one graph
	// serves batches of different lengths.
	QLens, KLens tensor.Dtype
	// Dropout drops attention probabilities (kernels.Dropout's P and
	// Seed); the Op sets the Offset: the number of forward runs before
	// this one, so that each run draws a fresh mask and its backward the
	// same one.
	Dropout kernels.Dropout
	// LSE makes the op's result the vector [O | LSE] (O flat, then the
	// log-sum-exp of every row, [B, H, Nq] flat), which Op.Split views as
	// two differentiable nodes.
	LSE bool
	// BNHD says that q, k, v and the result are [B, N, H, D] (k and v
	// [B, Nk, Hkv, D]) rather than [B, H, N, D]; the Op moves them to the
	// kernels' [B, H, N, D] and back (layout.go). The LSE stays [B, H, Nq].
	BNHD bool
	// Bias, when not nil, is the shape [Bb, Hb, Nq, Nk] of an additive
	// bias on the scores (kernels.Bias), Bb 1 or B and Hb 1 or H, which
	// the op takes as its fourth input, after v and before any lengths, in
	// q's dtype and whatever the layout. It is differentiable: its
	// gradient is the fourth part of the backward's result.
	Bias tensor.Shape
	// Cache, when not nil, makes k and v the new tokens of a key/value
	// cache: each run appends them to Cache (of sequence b the first
	// QLens[b], with query lengths) and attends q to everything it holds,
	// the masks aligned on each sequence's end (kernels.Params.Mask with
	// the cache lengths as KLens). Such an Op is inference only: SymDiff
	// and DoDiff refuse it. It takes no key lengths, dropout or bias.
	Cache *Cache
}

// biasInputs is the number of bias inputs the op takes after v: 0 or 1.
func (c Config) biasInputs() int {
	if c.Bias == nil {
		return 0
	}
	return 1
}

// extraInputs is the number of inputs the op takes after q, k and v: the
// bias, then the lengths.
func (c Config) extraInputs() int { return c.biasInputs() + c.lengthInputs() }

// lengthDtypes are the dtypes of the length inputs, in input order.
func (c Config) lengthDtypes() []tensor.Dtype {
	var dts []tensor.Dtype
	for _, dt := range []tensor.Dtype{c.QLens, c.KLens} {
		if dt != (tensor.Dtype{}) {
			dts = append(dts, dt)
		}
	}
	return dts
}

// String identifies the configuration completely. The ops hash it, because
// Gorgonia merges nodes whose hashes are equal: every field that changes the
// result is in it, each ALiBi slope to full precision.
func (c Config) String() string {
	var cache uint64 // 0: none; two caches never share an Op
	if c.Cache != nil {
		cache = c.Cache.id
	}
	return fmt.Sprintf("scale=%v causal=%v window=%+v softcap=%v alibi=%v qlens=%v klens=%v dropout=%v/%#x lse=%v bnhd=%v bias=%v cache=%d backend=%s",
		c.Scale, c.Causal, c.Window, c.Softcap, c.ALiBi, lensName(c.QLens), lensName(c.KLens), c.Dropout.P, c.Dropout.Seed, c.LSE, c.BNHD, []int(c.Bias), cache, c.Backend.Name())
}

// lensName names a lengths input's dtype, or "none" for the zero Dtype (no
// input), whose own String dereferences nil.
func lensName(d tensor.Dtype) string {
	if d == (tensor.Dtype{}) {
		return "none"
	}
	return d.String()
}

// Op is fused attention as a Gorgonia op: (q, k, v, bias, lengths…) → o,
// or → [O | LSE] with Config.LSE; the bias and the lengths are there when
// Config asks for them. Its backward is gradOp, which SymDiff adds
// to the graph and DoDiff runs directly; the two share the forward's saved
// state.
type Op struct {
	cfg    Config
	dtype  tensor.Dtype
	shapes [3]tensor.Shape // q, k and v, as built
	p      kernels.Params  // the problem those shapes describe under cfg; its Bias has the shape, no data
	saved  *saved
}

var (
	_ gorgonia.SDOp = (*Op)(nil)
	_ gorgonia.ADOp = (*Op)(nil)
)

// New returns the op for q, k and v of dtype dt (Float32 or Float64) and the
// given shapes: q [B, H, Nq, D], k and v [B, Hkv, Nk, D] with Hkv dividing
// H (grouped-query attention when Hkv < H), or with Config.BNHD [B, Nq, H,
// D] and [B, Nk, Hkv, D]. It checks everything that can be checked before
// the graph runs: the shapes (the bias's included), the dtype, the
// backend, and that the scale is finite and representable in dt (a float32
// tensor cannot take a scale of 1e39, nor one that rounds to 0). Errors wrap
// kernels.ErrInvalidParams.
func New(cfg Config, dt tensor.Dtype, q, k, v tensor.Shape) (*Op, error) {
	if cfg.Backend == nil {
		return nil, invalid("no backend")
	}
	if dt != tensor.Float32 && dt != tensor.Float64 {
		return nil, invalid("dtype %v, want Float32 or Float64", dt)
	}
	if err := checkScale(cfg.Scale, dt); err != nil {
		return nil, err
	}
	for _, ldt := range cfg.lengthDtypes() {
		if ldt != tensor.Int && ldt != tensor.Int32 && ldt != tensor.Int64 {
			return nil, invalid("lengths of dtype %v, want Int, Int32 or Int64", ldt)
		}
	}
	cfg.ALiBi = slices.Clone(cfg.ALiBi)
	if cfg.Bias != nil {
		cfg.Bias = cfg.Bias.Clone()
	}
	kq, kk, kv := q, k, v
	if cfg.BNHD {
		for _, s := range []tensor.Shape{q, k, v} {
			if s.Dims() != 4 {
				return nil, invalid("shape %v (rank %d), want [B, N, H, D]", s, s.Dims())
			}
		}
		kq, kk, kv = headsFirst(q), headsFirst(k), headsFirst(v)
	}
	p, err := params(cfg, kq, kk, kv)
	if err != nil {
		if cfg.BNHD {
			return nil, fmt.Errorf("%w (BNHD shapes, read as [B, H, N, D])", err)
		}
		return nil, err
	}
	if p.Bias, err = biasShape(cfg.Bias, p); err != nil {
		return nil, err
	}
	if err := checkCache(cfg, p, dt); err != nil {
		return nil, err
	}
	return &Op{cfg: cfg, dtype: dt, shapes: [3]tensor.Shape{q.Clone(), k.Clone(), v.Clone()}, p: p, saved: new(saved)}, nil
}

// checkCache refuses what a cached Op cannot take: key lengths (the
// cache's lengths are the key lengths), dropout and a bias (inference
// attends without them), and a cache of another shape or dtype than k and
// v, or a closed one.
func checkCache(cfg Config, p kernels.Params, dt tensor.Dtype) error {
	if cfg.Cache == nil {
		return nil
	}
	switch {
	case cfg.KLens != (tensor.Dtype{}):
		return invalid("key lengths with a key/value cache, whose lengths are the key lengths; give query lengths alone")
	case cfg.Dropout.On():
		return invalid("dropout with a key/value cache: build the graph you generate with without it")
	case cfg.Bias != nil:
		return invalid("a bias with a key/value cache: its key count changes at every run")
	}
	return cfg.Cache.check(p, dt)
}

// errCachedGrad refuses to differentiate a cached Op.
var errCachedGrad = invalid("attention with a key/value cache is inference only: it has no gradient (build the training graph without the cache)")

// checkScale refuses a scale that is not finite, or that dt turns into
// infinity or into 0 when it is not 0.
func checkScale(scale float64, dt tensor.Dtype) error {
	if math.IsNaN(scale) || math.IsInf(scale, 0) {
		return invalid("scale %v must be finite", scale)
	}
	if dt == tensor.Float32 {
		s32 := float32(scale)
		if math.IsInf(float64(s32), 0) || (s32 == 0 && scale != 0) {
			return invalid("scale %v is not representable in float32 (it becomes %v)", scale, s32)
		}
	}
	return nil
}

// params checks the shapes of q, k and v against each other and returns the
// problem they describe under cfg.
func params(cfg Config, q, k, v tensor.Shape) (kernels.Params, error) {
	for _, x := range []struct {
		name string
		s    tensor.Shape
	}{{"q", q}, {"k", k}, {"v", v}} {
		if x.s.Dims() != 4 {
			return kernels.Params{}, invalid("%s has shape %v (rank %d), want [B, H, N, D]", x.name, x.s, x.s.Dims())
		}
		for i, d := range x.s {
			if d < 1 {
				return kernels.Params{}, invalid("%s has shape %v; dimension %d is %d, want at least 1", x.name, x.s, i, d)
			}
		}
	}
	if !k.Eq(v) {
		return kernels.Params{}, invalid("k %v and v %v must have the same shape", k, v)
	}
	if q[0] != k[0] {
		return kernels.Params{}, invalid("B differs: q %v, k %v", q, k)
	}
	if q[1]%k[1] != 0 {
		return kernels.Params{}, invalid("k and v have %d heads, which does not divide q's %d (q %v, k %v)", k[1], q[1], q, k)
	}
	if q[3] != k[3] {
		return kernels.Params{}, invalid("head dimension D differs: q %v, k %v", q, k)
	}
	p := kernels.Params{B: q[0], H: q[1], Nq: q[2], Nk: k[2], D: q[3], Scale: cfg.Scale, Causal: cfg.Causal,
		Window: cfg.Window, Softcap: cfg.Softcap, ALiBi: cfg.ALiBi, Dropout: cfg.Dropout}
	if k[1] != q[1] {
		p.Hkv = k[1]
	}
	if err := p.Validate(); err != nil {
		return kernels.Params{}, fmt.Errorf("attention: %w", err)
	}
	return p, nil
}

// biasShape checks the bias shape s (nil: no bias) against the problem p
// and returns the kernels' Bias for it, shape alone (the data comes with
// each run).
func biasShape(s tensor.Shape, p kernels.Params) (*kernels.Bias, error) {
	if s == nil {
		return nil, nil
	}
	if s.Dims() != 4 || s[2] != p.Nq || s[3] != p.Nk {
		return nil, invalid("bias has shape %v, want [Bb, Hb, Nq, Nk] with Nq = %d, Nk = %d", s, p.Nq, p.Nk)
	}
	b := &kernels.Bias{Bb: s[0], Hb: s[1]}
	p.Bias = b
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("attention: %w", err)
	}
	return b, nil
}

// invalid formats an error wrapping kernels.ErrInvalidParams.
func invalid(format string, args ...any) error {
	return fmt.Errorf("attention: %w: "+format, append([]any{kernels.ErrInvalidParams}, args...)...)
}

// lengthInputs is the number of length vectors the op takes after q, k
// and v.
func (c Config) lengthInputs() int { return len(c.lengthDtypes()) }

func (op *Op) Arity() int { return 3 + op.cfg.extraInputs() }

// Type is (Tensor4 a, Tensor4 a, Tensor4 a) → Tensor4 a, with a Tensor4 a
// after v for the bias and an integer vector before the result for each
// length input.
func (op *Op) Type() hm.Type {
	return hm.NewFnType(append(op.inputTypes(0), op.outType())...)
}

// inputTypes are the types of the op's inputs: q, k and v, outs more of
// the result's type (gradOp's o and dO), then the extra inputs.
func (op *Op) inputTypes(outs int) []hm.Type {
	t := gorgonia.TensorType{Dims: 4, Of: hm.TypeVariable('a')}
	ts := []hm.Type{t, t, t}
	for range outs {
		ts = append(ts, op.outType())
	}
	if op.cfg.Bias != nil {
		ts = append(ts, t)
	}
	return append(ts, op.lengthTypes()...)
}

// outType is the type of the op's result (outShape).
func (op *Op) outType() hm.Type {
	return gorgonia.TensorType{Dims: op.outShape().Dims(), Of: hm.TypeVariable('a')}
}

// lengthTypes are the types of the length inputs: vectors of the dtypes
// the op was built for.
func (op *Op) lengthTypes() []hm.Type {
	var ts []hm.Type
	for _, dt := range op.cfg.lengthDtypes() {
		ts = append(ts, gorgonia.TensorType{Dims: 1, Of: dt})
	}
	return ts
}

// withLengths returns the Op's problem with the lengths the length inputs
// hold at this run (vals, in QLens, KLens order). Errors wrap
// kernels.ErrInvalidParams.
func (op *Op) withLengths(vals []gorgonia.Value) (kernels.Params, error) {
	p := op.p
	if len(vals) != op.cfg.lengthInputs() {
		return p, invalid("%d length inputs, want %d", len(vals), op.cfg.lengthInputs())
	}
	for _, l := range []struct {
		name string
		dt   tensor.Dtype
		dst  *[]int
	}{{"query lengths", op.cfg.QLens, &p.QLens}, {"key lengths", op.cfg.KLens, &p.KLens}} {
		if l.dt == (tensor.Dtype{}) {
			continue
		}
		lens, err := intsOf(vals[0], p.B)
		if err != nil {
			return p, invalid("%s: %v", l.name, err)
		}
		*l.dst, vals = lens, vals[1:]
	}
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("attention: %w", err)
	}
	return p, nil
}

// intsOf reads a length input: a vector of B integers of dtype Int, Int32
// or Int64.
func intsOf(v gorgonia.Value, b int) ([]int, error) {
	if v == nil {
		return nil, errors.New("the node has no value (bind one before running the graph)")
	}
	d, err := dense(v)
	if err != nil {
		return nil, err
	}
	if s := d.Shape(); s.TotalSize() != b || (s.Dims() > 1 && !s.IsVectorLike()) {
		return nil, fmt.Errorf("shape %v, want [%d], one length per batch entry", s, b)
	}
	out := make([]int, b)
	switch x := d.Data().(type) {
	case []int:
		copy(out, x)
	case []int32:
		for i, n := range x {
			out[i] = int(n)
		}
	case []int64:
		for i, n := range x {
			out[i] = int(n)
		}
	default:
		return nil, fmt.Errorf("dtype %v, want Int, Int32 or Int64", d.Dtype())
	}
	return out, nil
}

// InferShape checks the shapes itself: Gorgonia does not unify the rank of
// a TensorType, and a wrong rank would otherwise panic later in ApplyOp.
func (op *Op) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	if len(in) != op.Arity() {
		return nil, fmt.Errorf("attention: %d inputs, want %d", len(in), op.Arity())
	}
	for i, ds := range in {
		s, ok := ds.(tensor.Shape)
		if i == 3 && op.cfg.Bias != nil {
			if !ok || !s.Eq(op.cfg.Bias) {
				return nil, invalid("the bias has shape %v, the op was built for %v", ds, op.cfg.Bias)
			}
			continue
		}
		if i >= 3 {
			if !ok || s.TotalSize() != op.p.B {
				return nil, invalid("length input %d has shape %v, want [%d], one length per batch entry", i-3-op.cfg.biasInputs(), ds, op.p.B)
			}
			continue
		}
		if !ok || !s.Eq(op.shapes[i]) {
			return nil, invalid("input %d has shape %v, the op was built for %v", i, ds, op.shapes[i])
		}
	}
	return op.outShape(), nil
}

// Do runs the forward and saves its LSE (and, on a kernels.Resident backend
// once the backward exists, its device state) for the backward.
func (op *Op) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	ts, p, err := op.inputs(in, 3)
	if err != nil {
		return nil, err
	}
	_, resident := op.cfg.Backend.(kernels.Resident)
	keep := resident && op.saved.keepOnDevice()
	p.Dropout.Offset = op.saved.nextRun()
	kt, err := op.toKernelLayout(ts...)
	if err != nil {
		return nil, err
	}
	e := engineFor(op.dtype)
	var packed *tensor.Dense
	var st kernels.DeviceState
	if op.cfg.Cache != nil {
		packed, err = e.forwardCached(op.cfg.Cache, op.cfg.Backend, p, kt[0], kt[1], kt[2])
	} else {
		packed, st, err = e.forward(op.cfg.Backend, keep, p, kt[0], kt[1], kt[2])
	}
	if err == nil && op.cfg.BNHD {
		// O back to BNHD, the LSE as it is.
		if packed, err = e.relayout(packed, [4]int{p.B, p.H, p.Nq, p.D}); err != nil && st != nil {
			err = errors.Join(err, st.Release())
		}
	}
	if err != nil {
		// The previous run's device state is of no use to anyone now.
		return nil, errors.Join(fmt.Errorf("attention on %s: %w", op.cfg.Backend.Name(), err), op.saved.release())
	}
	o, lse := op.outputViews()
	out := packed
	if !op.cfg.LSE {
		if out, err = o.view(packed); err != nil {
			return nil, err
		}
	}
	// The backward keeps its own copy of the LSE (1/D of O): a view would
	// keep O's memory alive from one run to the next, and with Config.LSE
	// later ops may write into the packed result.
	saved, err := lse.view(packed)
	if err != nil {
		return nil, err
	}
	if err := op.saved.store(saved.Clone().(*tensor.Dense), p.Dropout.Offset, st); err != nil {
		return nil, fmt.Errorf("attention on %s: releasing the previous run's device state: %w", op.cfg.Backend.Name(), err)
	}
	return out, nil
}

// toKernelLayout returns q, k, v and any further tensors of O's shape
// (o, dO) in the kernels' [B, H, N, D]: as they are, or with Config.BNHD
// moved from [B, N, H, D].
func (op *Op) toKernelLayout(ts ...*tensor.Dense) ([]*tensor.Dense, error) {
	if !op.cfg.BNHD {
		return ts, nil
	}
	p, e := op.p, engineFor(op.dtype)
	out := make([]*tensor.Dense, len(ts))
	for i, t := range ts {
		s := [4]int{p.B, p.Nq, p.H, p.D}
		if i == 1 || i == 2 {
			s = [4]int{p.B, p.Nk, p.KVHeads(), p.D}
		}
		r, err := e.relayout(t, s)
		if err != nil {
			return nil, err
		}
		r.Reshape(s[0], s[2], s[1], s[3])
		out[i] = r
	}
	return out, nil
}

// outShape is the shape of the op's result: O's, or with Config.LSE the
// vector [O | LSE] that outputViews split.
func (op *Op) outShape() tensor.Shape {
	if op.cfg.LSE {
		return tensor.Shape{op.p.QLen() + op.p.LSELen()}
	}
	return op.shapes[0].Clone()
}

// outputViews returns the views of O (q's shape) and LSE ([B, H, Nq]) in
// the packed [O | LSE] vector the forward makes; as graph nodes (Split)
// they copy (see unpackOp.copied).
func (op *Op) outputViews() (o, lse unpackOp) {
	return unpackOp{0, op.shapes[0], false}, unpackOp{op.p.QLen(), tensor.Shape{op.p.B, op.p.H, op.p.Nq}, false}
}

// Split returns O and the LSE as nodes viewing the result of an Op built
// with Config.LSE, both differentiable: a gradient that reaches the LSE
// node reaches q and k through the backward.
func (op *Op) Split(packed *gorgonia.Node) (o, lse *gorgonia.Node, err error) {
	if !op.cfg.LSE {
		return nil, nil, invalid("Split of an op built without Config.LSE")
	}
	ov, lv := op.outputViews()
	ov.copied, lv.copied = true, true
	if o, err = gorgonia.ApplyOp(ov, packed); err != nil {
		return nil, nil, err
	}
	if lse, err = gorgonia.ApplyOp(lv, packed); err != nil {
		return nil, nil, err
	}
	return o, lse, nil
}

// inputs checks the values a machine passes to Do: tensors first (want of
// them: q, k and v, then any of the result's shape), then the extra
// inputs, the bias and the lengths. It checks the tensors against the
// shapes and dtype the op was built for (a node's value can be replaced by
// one of another shape), and returns them as contiguous tensors, with the
// problem the bias and the lengths make of the Op's.
func (op *Op) inputs(in []gorgonia.Value, want int) ([]*tensor.Dense, kernels.Params, error) {
	if len(in) != want+op.cfg.extraInputs() {
		return nil, op.p, fmt.Errorf("attention: %d inputs, want %d", len(in), want+op.cfg.extraInputs())
	}
	extra := in[want:]
	var bias gorgonia.Value
	if op.cfg.Bias != nil {
		bias, extra = extra[0], extra[1:]
	}
	p, err := op.withLengths(extra)
	if err != nil {
		return nil, p, err
	}
	if op.cfg.Bias != nil {
		if p.Bias, err = op.biasOf(bias); err != nil {
			return nil, p, err
		}
	}
	names := []string{"q", "k", "v", "o", "dO"}
	ts := make([]*tensor.Dense, want)
	for i, v := range in[:want] {
		d, err := dense(v)
		if err != nil {
			return nil, p, fmt.Errorf("attention: %s: %w", names[i], err)
		}
		shape := op.outShape() // o and dO: the result's
		if i < 3 {
			shape = op.shapes[i]
		}
		if !d.Shape().Eq(shape) {
			return nil, p, invalid("%s has shape %v at run time, the op was built for %v", names[i], d.Shape(), shape)
		}
		if d.Dtype() != op.dtype {
			return nil, p, invalid("%s is %v at run time, the op was built for %v", names[i], d.Dtype(), op.dtype)
		}
		ts[i] = d
	}
	return ts, p, nil
}

// biasOf checks the bias's value against the shape and dtype the op was
// built for and returns it as the kernels' Bias, reading its data in
// place (copied only if it is a view that is not contiguous).
func (op *Op) biasOf(v gorgonia.Value) (*kernels.Bias, error) {
	if v == nil {
		return nil, invalid("the bias node has no value (bind one before running the graph)")
	}
	d, err := dense(v)
	if err != nil {
		return nil, fmt.Errorf("attention: bias: %w", err)
	}
	if !d.Shape().Eq(op.cfg.Bias) {
		return nil, invalid("the bias has shape %v at run time, the op was built for %v", d.Shape(), op.cfg.Bias)
	}
	if d.Dtype() != op.dtype {
		return nil, invalid("the bias is %v at run time, the op was built for %v", d.Dtype(), op.dtype)
	}
	return engineFor(op.dtype).bias(op.p.Bias, d), nil
}

// dense returns the contiguous backing of a Gorgonia value, copying a view
// that is not contiguous.
func dense(v any) (*tensor.Dense, error) {
	d, ok := v.(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("%w: got a %T, want a *tensor.Dense", kernels.ErrInvalidParams, v)
	}
	if d.RequiresIterator() {
		return d.Materialize().(*tensor.Dense), nil
	}
	return d, nil
}

// DiffWRT: q, k, v and the bias; the length inputs have no gradient.
func (op *Op) DiffWRT(inputs int) []bool {
	diff := make([]bool, inputs)
	for i := range min(3+op.cfg.biasInputs(), inputs) {
		diff[i] = true
	}
	return diff
}

// SymDiff adds the recomputing backward to the graph: one gradOp node for
// the packed [dQ | dK | dV], with dBias after them when there is a bias,
// and a view of it for each part. From now on the forward
// keeps its device state for that backward (see saved).
func (op *Op) SymDiff(in gorgonia.Nodes, output, grad *gorgonia.Node) (gorgonia.Nodes, error) {
	if len(in) != op.Arity() {
		return nil, fmt.Errorf("attention: SymDiff got %d inputs, want %d", len(in), op.Arity())
	}
	if op.cfg.Cache != nil {
		return nil, errCachedGrad
	}
	op.saved.setKeep()
	packed, err := gorgonia.ApplyOp(&gradOp{op}, append(gorgonia.Nodes{in[0], in[1], in[2], output, grad}, in[3:]...)...)
	if err != nil {
		return nil, fmt.Errorf("attention backward: %w", err)
	}
	grads := make(gorgonia.Nodes, len(in)) // q, k, v, the bias; none for the lengths
	for i, part := range op.gradParts() {
		if grads[i], err = gorgonia.ApplyOp(part, packed); err != nil {
			return nil, fmt.Errorf("attention backward: %w", err)
		}
	}
	return grads, nil
}

// DoDiff adds the op's gradients into its inputs' gradients, for the
// LispMachine (which skips ops that lack it without a word). Constant
// inputs have no gradient to add to.
func (op *Op) DoDiff(_ gorgonia.ExecutionContext, in gorgonia.Nodes, output *gorgonia.Node) error {
	if len(in) != op.Arity() {
		return fmt.Errorf("attention: DoDiff got %d inputs, want %d", len(in), op.Arity())
	}
	if op.cfg.Cache != nil {
		return errCachedGrad
	}
	dO, err := output.Grad()
	if err != nil {
		return fmt.Errorf("attention: DoDiff: %w", err)
	}
	vals := []gorgonia.Value{in[0].Value(), in[1].Value(), in[2].Value(), output.Value(), dO}
	for _, l := range in[3:] {
		vals = append(vals, l.Value())
	}
	packed, err := (&gradOp{op}).Do(vals...)
	if err != nil {
		return err
	}
	for i, part := range op.gradParts() {
		if isConstant(in[i]) {
			continue
		}
		acc, err := in[i].Grad()
		if err != nil {
			return fmt.Errorf("attention: DoDiff: %w", err)
		}
		g, err := part.Do(packed)
		if err != nil {
			return err
		}
		if err := addInto(acc, g.(*tensor.Dense)); err != nil {
			return err
		}
	}
	return nil
}

// isConstant reports whether n is a Gorgonia constant. Gorgonia keeps that
// test unexported; a constant is the node whose op takes no input (inputs
// and variables have no op at all).
func isConstant(n *gorgonia.Node) bool {
	return n.Op() != nil && n.Op().Arity() == 0
}

// addInto accumulates g into the gradient value acc in place.
func addInto(acc gorgonia.Value, g *tensor.Dense) error {
	dst, ok := acc.(*tensor.Dense)
	if !ok || dst.RequiresIterator() || dst.Dtype() != g.Dtype() || dst.Shape().TotalSize() != g.Shape().TotalSize() {
		return fmt.Errorf("attention: DoDiff: gradient holder %T %v cannot take %v", acc, acc.Shape(), g.Shape())
	}
	switch d := dst.Data().(type) {
	case []float32:
		for i, x := range g.Float32s() {
			d[i] += x
		}
	case []float64:
		for i, x := range g.Float64s() {
			d[i] += x
		}
	default:
		return fmt.Errorf("attention: DoDiff: gradient holder of %v", dst.Dtype())
	}
	return nil
}

// Release frees the device memory the op holds between a forward and its
// backward, if any. The LSE stays, so a backward still runs; it uploads its
// inputs again.
func (op *Op) Release() error { return op.saved.release() }

func (op *Op) ReturnsPtr() bool      { return false }
func (op *Op) CallsExtern() bool     { return false }
func (op *Op) OverwritesInput() int  { return -1 }
func (op *Op) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op *Op) Hashcode() uint32      { return hashOf(op) }

func (op *Op) String() string {
	return fmt.Sprintf("FlashAttention{%v %v q%v k%v v%v}", op.cfg, op.dtype, op.shapes[0], op.shapes[1], op.shapes[2])
}

// hashOf is FNV-1a of an op's WriteHash, as Gorgonia's own ops hash, for
// all three op types of this package.
func hashOf(op interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}
