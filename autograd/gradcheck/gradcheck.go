package gradcheck

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ErrMismatch is wrapped by the error that Report.Err returns when an
// analytic gradient element lies outside the tolerance.
var ErrMismatch = errors.New("gradcheck: gradient mismatch")

// Defaults of Check.
//
// The central difference (f(x+h) − f(x−h)) / 2h has a truncation error of
// about h²·|f⁽³⁾|/6 and a rounding error of about ε·|f|/h (ε = 2⁻⁵²). The sum
// is smallest near h = ε^(1/3) ≈ 6.06e-6 for a well-scaled f, where both terms
// are about ε^(2/3) ≈ 4e-11, so the default tolerances leave five orders of
// magnitude of headroom while still catching a gradient that is off by a
// factor, a sign, or a missing term.
const (
	DefaultStep = 6.0554544523933386e-06 // ε^(1/3) for float64
	DefaultAtol = 1e-6
	DefaultRtol = 1e-5
)

// Option configures Check.
type Option func(*config)

type config struct {
	step       float64
	atol, rtol float64
	lisp       bool
	maxElems   int
	seed       uint64
}

// WithStep sets the relative finite-difference step. Element x is evaluated
// at x ± step·max(1, |x|): scaling by |x| keeps the step far above the spacing
// of float64 numbers near a large x, and the floor of 1 keeps it from
// vanishing near zero. The default is DefaultStep. step must be positive
// and finite.
func WithStep(step float64) Option {
	return func(c *config) { c.step = step }
}

// WithTolerance sets the pass criterion of an element: |a − n| ≤ atol + rtol·|n|,
// where a is the analytic and n the numeric derivative. Both must be finite and
// non-negative. The defaults are DefaultAtol and DefaultRtol; loosen
// atol for costs of large magnitude, since the rounding error of the numeric
// derivative grows like ε·|cost|/h.
func WithTolerance(atol, rtol float64) Option {
	return func(c *config) { c.atol, c.rtol = atol, rtol }
}

// WithLispMachine makes Check take the analytic gradient from
// gorgonia.NewLispMachine, which calls each op's DoDiff, instead of from
// gorgonia.Grad (each op's SymDiff) run on a TapeMachine. The cost at
// perturbed inputs is then also evaluated with LispMachines.
func WithLispMachine() Option {
	return func(c *config) { c.lisp = true }
}

// WithMaxElements limits the check to at most n elements of each input,
// drawn without replacement by a PCG generator seeded with seed and the
// input's position in wrt, so a run is reproducible. n ≤ 0 checks every
// element (the default). Each checked element costs two forward passes.
func WithMaxElements(n int, seed uint64) Option {
	return func(c *config) { c.maxElems, c.seed = n, seed }
}

func (c *config) validate() error {
	if !(c.step > 0) || math.IsInf(c.step, 0) {
		return fmt.Errorf("gradcheck: step %v is not positive and finite", c.step)
	}
	if !(c.atol >= 0) || math.IsInf(c.atol, 0) || !(c.rtol >= 0) || math.IsInf(c.rtol, 0) {
		return fmt.Errorf("gradcheck: tolerances atol=%v rtol=%v are not finite and non-negative", c.atol, c.rtol)
	}
	return nil
}

// Element is the comparison of one element of one input's gradient.
type Element struct {
	Input    string  // name of the wrt node
	Index    []int   // row-major coordinates in the input; empty for a scalar
	Analytic float64 // gorgonia's gradient
	Numeric  float64 // central finite difference
	AbsErr   float64 // |Analytic − Numeric|
	RelErr   float64 // AbsErr/|Numeric|: 0 if both are 0, +Inf if only Numeric is 0

	// Ratio is AbsErr/(atol + rtol·|Numeric|); the element passes when
	// Ratio ≤ 1. It is +Inf when either derivative is NaN or infinite.
	Ratio float64
}

// String formats e as "name[i j]: analytic A, numeric N (abs err E, rel err R)".
func (e Element) String() string {
	return fmt.Sprintf("%s%v: analytic %.10g, numeric %.10g (abs err %.2g, rel err %.2g)",
		e.Input, e.Index, e.Analytic, e.Numeric, e.AbsErr, e.RelErr)
}

// InputReport summarises the check of one wrt node.
type InputReport struct {
	Name    string
	Shape   tensor.Shape
	Checked int     // elements compared
	Failed  int     // compared elements with Ratio > 1
	Worst   Element // largest Ratio; the first in row-major order on ties
}

// Report is the result of Check.
type Report struct {
	Machine string  // "TapeMachine" or "LispMachine"
	Cost    float64 // cost at the original inputs
	Step    float64 // relative step, see WithStep
	Atol    float64
	Rtol    float64

	Inputs []InputReport // in the order of wrt
	Worst  Element       // largest Ratio over all inputs; the first on ties
	Failed int           // elements with Ratio > 1 over all inputs
}

// Passed reports whether every compared element is within tolerance.
func (r *Report) Passed() bool { return r.Failed == 0 }

// Err returns nil if the check passed, and otherwise an error wrapping
// ErrMismatch that describes the worst element.
func (r *Report) Err() error {
	if r.Passed() {
		return nil
	}
	return fmt.Errorf("%w: %d of %d elements outside |a−n| ≤ %g + %g·|n|; worst %v",
		ErrMismatch, r.Failed, r.checked(), r.Atol, r.Rtol, r.Worst)
}

func (r *Report) checked() int {
	total := 0
	for _, in := range r.Inputs {
		total += in.Checked
	}
	return total
}

// String gives a verdict line, one line per input, and the worst element.
func (r *Report) String() string {
	var b strings.Builder
	verdict := "ok"
	if !r.Passed() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "gradient check (%s) %s: %d of %d elements outside |a−n| ≤ %g + %g·|n|; step %.3g, cost %.10g\n",
		r.Machine, verdict, r.Failed, r.checked(), r.Atol, r.Rtol, r.Step, r.Cost)
	for _, in := range r.Inputs {
		fmt.Fprintf(&b, "  %s %v: %d of %d elements checked, %d failed",
			in.Name, in.Shape, in.Checked, in.Shape.TotalSize(), in.Failed)
		if in.Checked > 0 {
			fmt.Fprintf(&b, "; worst %v", in.Worst)
		}
		b.WriteByte('\n')
	}
	if r.checked() > 0 {
		fmt.Fprintf(&b, "  worst overall: %v\n", r.Worst)
	}
	return b.String()
}

// Check compares Gorgonia's analytic gradients of the scalar cost with
// respect to the input nodes wrt against central finite differences in
// float64, element by element, and reports the worst element of each input
// and overall. A mismatch is not an error of Check: it returns the report,
// and report.Err() describes the mismatch. The error result is for graphs it
// cannot check.
//
// # Requirements
//
// cost must be a float64 node of scalar type (tensor.Dtype, not a TensorType
// of shape ()), and must be a deterministic function of wrt (no dropout or
// random nodes). Each wrt node must be a distinct float64 input (variable)
// node of cost's graph that cost depends on, bound to a value (a *tensor.Dense
// or *gorgonia.F64). Every input that cost depends on needs a bound value.
//
// # Effect on the graph
//
// By default Check calls gorgonia.Grad(cost, wrt...), which adds the
// gradient nodes to cost's graph and sets Deriv on the nodes it differentiates,
// exactly as a user's own call would. If cost and every wrt node already have
// a Deriv, because Grad was called before, Check checks those gradient
// nodes instead and adds nothing; Grad would return the same nodes. So if you
// call Grad yourself, for training say, call it before Check: a second
// Grad on a graph that already holds gradient nodes can fail in Gorgonia.
// Only the part of the graph that cost and the gradients depend on is compiled
// and run, so other roots of the graph need no values.
//
// With WithLispMachine no nodes are added. Gorgonia's LispMachine adds into
// the gradient of an input across runs, so Check zeroes the gradient held
// in each wrt node first; afterwards wrt[i].Grad() holds the gradient at the
// original inputs. Because the LispMachine silently skips ops without DoDiff,
// Check returns an error if a gradient from wrt would flow through one.
//
// While the cost is evaluated at perturbed inputs, each wrt node is bound to a
// private copy of its value. On return, success or not, every wrt node is
// bound again to its original Value, which Check never writes; Check
// returns an error if an op wrote to it. On success, the other nodes hold the
// values of a final evaluation at the original inputs.
func Check(cost *gorgonia.Node, wrt gorgonia.Nodes, opts ...Option) (*Report, error) {
	cfg := config{step: DefaultStep, atol: DefaultAtol, rtol: DefaultRtol}
	for _, opt := range opts {
		opt(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := checkCost(cost); err != nil {
		return nil, err
	}
	sub := cost.Graph().ExactSubgraphRoots(cost)
	params, err := newCheckedInputs(cost, sub, wrt)
	if err != nil {
		return nil, err
	}
	// Whatever happens below, hand the user's values back.
	defer func() {
		for _, p := range params {
			// Let cannot fail here: the node is an input and orig was bound to it.
			_ = gorgonia.Let(p.node, p.orig)
		}
	}()

	var ev gradEvaluator
	if cfg.lisp {
		ev, err = newLispEvaluator(cost, sub, wrt)
	} else {
		ev, err = newTapeEvaluator(cost, sub, wrt)
	}
	if err != nil {
		return nil, err
	}
	defer ev.close()

	f0, analytic, err := ev.gradients()
	if err != nil {
		return nil, err
	}
	for k, p := range params {
		if err := p.checkUnchanged(p.orig, "computing the gradient"); err != nil {
			return nil, err
		}
		if len(analytic[k]) != len(p.snap) {
			return nil, fmt.Errorf("gradcheck: gradient of %q has %d elements, input has %d",
				p.node.Name(), len(analytic[k]), len(p.snap))
		}
	}

	r := &Report{Machine: ev.name(), Cost: f0, Step: cfg.step, Atol: cfg.atol, Rtol: cfg.rtol}
	for k, p := range params {
		in, err := p.compare(ev, analytic[k], &cfg, k)
		if err != nil {
			return nil, err
		}
		if in.Checked > 0 && (r.checked() == 0 || in.Worst.Ratio > r.Worst.Ratio) {
			r.Worst = in.Worst
		}
		r.Failed += in.Failed
		r.Inputs = append(r.Inputs, in)
	}

	for _, p := range params {
		if err := gorgonia.Let(p.node, p.orig); err != nil {
			return nil, fmt.Errorf("gradcheck: restoring %q: %w", p.node.Name(), err)
		}
	}
	// Leave the graph's values at the original point rather than at the last
	// perturbation.
	if _, err := ev.cost(); err != nil {
		return nil, err
	}
	return r, nil
}

func checkCost(cost *gorgonia.Node) error {
	switch {
	case cost == nil:
		return errors.New("gradcheck: cost is nil")
	case cost.Graph() == nil:
		return fmt.Errorf("gradcheck: cost %q belongs to no graph", cost.Name())
	case !cost.IsScalar():
		// A TensorType of shape () is not enough: gorgonia.Grad and the
		// LispMachine both test the type, not the shape.
		return fmt.Errorf("gradcheck: cost %q has type %v and shape %v, not a scalar type; reduce it with gorgonia.Sum",
			cost.Name(), cost.Type(), cost.Shape())
	}
	if dt, ok := nodeDtype(cost); !ok || dt != tensor.Float64 {
		return fmt.Errorf("gradcheck: cost %q has type %v; only float64 is supported", cost.Name(), cost.Type())
	}
	return nil
}

// nodeDtype is n.Dtype() without its panic on an unresolved type.
func nodeDtype(n *gorgonia.Node) (tensor.Dtype, bool) {
	switch t := n.Type().(type) {
	case tensor.Dtype:
		return t, true
	case gorgonia.TensorType:
		dt, ok := t.Of.(tensor.Dtype)
		return dt, ok
	}
	return tensor.Dtype{}, false
}

// checkedInput is one wrt node during a check.
type checkedInput struct {
	node *gorgonia.Node
	orig gorgonia.Value // the user's value, bound again on return
	snap []float64      // orig's elements in row-major order

	// work is bound while the cost is evaluated at perturbed points; set
	// writes its element i.
	work gorgonia.Value
	set  func(i int, v float64)
}

func newCheckedInputs(cost *gorgonia.Node, sub *gorgonia.ExprGraph, wrt gorgonia.Nodes) ([]*checkedInput, error) {
	if len(wrt) == 0 {
		return nil, errors.New("gradcheck: no wrt nodes")
	}
	inCost := sub.AllNodes()
	params := make([]*checkedInput, 0, len(wrt))
	for i, n := range wrt {
		switch {
		case n == nil:
			return nil, fmt.Errorf("gradcheck: wrt[%d] is nil", i)
		case n.Graph() != cost.Graph():
			return nil, fmt.Errorf("gradcheck: wrt[%d] %q is not in cost's graph", i, n.Name())
		case !n.IsVar():
			return nil, fmt.Errorf("gradcheck: wrt[%d] %q is not an input (variable) node", i, n.Name())
		}
		if dt, ok := nodeDtype(n); !ok || dt != tensor.Float64 {
			return nil, fmt.Errorf("gradcheck: wrt[%d] %q has type %v; only float64 is supported", i, n.Name(), n.Type())
		}
		switch {
		case slices.Contains(wrt[:i], n):
			return nil, fmt.Errorf("gradcheck: wrt[%d] %q appears twice", i, n.Name())
		case !inCost.Contains(n):
			return nil, fmt.Errorf("gradcheck: cost does not depend on wrt[%d] %q", i, n.Name())
		}
		p, err := newCheckedInput(n)
		if err != nil {
			return nil, fmt.Errorf("gradcheck: wrt[%d]: %w", i, err)
		}
		params = append(params, p)
	}
	return params, nil
}

func newCheckedInput(n *gorgonia.Node) (*checkedInput, error) {
	orig := n.Value()
	if orig == nil {
		return nil, fmt.Errorf("%q has no value bound; use gorgonia.Let or gorgonia.WithValue", n.Name())
	}
	snap, err := valueFloat64s(orig)
	if err != nil {
		return nil, fmt.Errorf("value of %q: %w", n.Name(), err)
	}
	p := &checkedInput{node: n, orig: orig, snap: snap}
	switch orig.(type) {
	case *gorgonia.F64:
		w := gorgonia.NewF64(snap[0])
		p.work = w
		p.set = func(_ int, v float64) { *w = gorgonia.F64(v) }
	default:
		data := slices.Clone(snap)
		p.work = tensor.New(tensor.WithShape(orig.Shape()...), tensor.WithBacking(data))
		p.set = func(i int, v float64) { data[i] = v }
	}
	return p, nil
}

// valueFloat64s copies the elements of a float64 value in row-major order.
func valueFloat64s(v gorgonia.Value) ([]float64, error) {
	switch v := v.(type) {
	case *gorgonia.F64:
		return []float64{float64(*v)}, nil
	case *tensor.Dense:
		if v.Dtype() != tensor.Float64 {
			return nil, fmt.Errorf("dtype %v, want float64", v.Dtype())
		}
		if v.IsMaterializable() {
			// A view or a lazy transpose: its backing is not in row-major order.
			d, ok := v.Materialize().(*tensor.Dense)
			if !ok {
				return nil, fmt.Errorf("cannot materialize %v view", v.Shape())
			}
			v = d
		}
		size := v.Shape().TotalSize()
		data := v.Float64s()
		if len(data) < size {
			return nil, fmt.Errorf("backing of %d elements for shape %v", len(data), v.Shape())
		}
		return slices.Clone(data[:size]), nil
	case nil:
		return nil, errors.New("no value")
	}
	return nil, fmt.Errorf("unsupported value type %T, want *tensor.Dense or *gorgonia.F64", v)
}

// checkUnchanged returns an error unless v still holds p's original elements,
// bit for bit.
func (p *checkedInput) checkUnchanged(v gorgonia.Value, during string) error {
	now, err := valueFloat64s(v)
	if err != nil {
		return fmt.Errorf("gradcheck: reading %q back: %w", p.node.Name(), err)
	}
	for i := range now {
		if math.Float64bits(now[i]) != math.Float64bits(p.snap[i]) {
			return fmt.Errorf("gradcheck: an op wrote to the value of input %q (element %v) while %s",
				p.node.Name(), unravelIndex(i, p.orig.Shape()), during)
		}
	}
	return nil
}

// compare computes the central difference for the chosen elements of p and
// compares it with the analytic gradient.
func (p *checkedInput) compare(ev gradEvaluator, analytic []float64, cfg *config, k int) (InputReport, error) {
	shape := p.orig.Shape()
	in := InputReport{Name: p.node.Name(), Shape: shape}
	if err := gorgonia.Let(p.node, p.work); err != nil {
		return in, fmt.Errorf("gradcheck: binding a copy of %q: %w", p.node.Name(), err)
	}
	for _, i := range sampleIndices(len(p.snap), cfg.maxElems, cfg.seed, k) {
		x := p.snap[i]
		h := cfg.step * math.Max(1, math.Abs(x))
		// x±h are rounded to float64; dividing by their actual distance
		// rather than by 2h removes that representation error.
		xp, xm := x+h, x-h
		p.set(i, xp)
		fp, err := ev.cost()
		if err != nil {
			return in, err
		}
		p.set(i, xm)
		fm, err := ev.cost()
		if err != nil {
			return in, err
		}
		p.set(i, x)

		e := compareElement(analytic[i], (fp-fm)/(xp-xm), cfg.atol, cfg.rtol)
		e.Input, e.Index = in.Name, unravelIndex(i, shape)
		if in.Checked == 0 || e.Ratio > in.Worst.Ratio {
			in.Worst = e
		}
		if e.Ratio > 1 {
			in.Failed++
		}
		in.Checked++
	}
	if err := p.checkUnchanged(p.work, "evaluating the cost"); err != nil {
		return in, err
	}
	return in, nil
}

func compareElement(a, n, atol, rtol float64) Element {
	e := Element{Analytic: a, Numeric: n, AbsErr: math.Abs(a - n)}
	switch {
	case e.AbsErr == 0:
		// RelErr and Ratio stay 0.
	case n == 0:
		e.RelErr = math.Inf(1)
	default:
		e.RelErr = e.AbsErr / math.Abs(n)
	}
	allowed := atol + rtol*math.Abs(n)
	switch {
	case isNonFinite(a) || isNonFinite(n):
		e.Ratio = math.Inf(1)
	case e.AbsErr == 0:
	case allowed == 0:
		e.Ratio = math.Inf(1)
	default:
		e.Ratio = e.AbsErr / allowed
	}
	return e
}

func isNonFinite(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }

// sampleIndices returns the flat indices to check, ascending.
func sampleIndices(size, max int, seed uint64, input int) []int {
	if max <= 0 || size <= max {
		idx := make([]int, size)
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	rng := rand.New(rand.NewPCG(seed, uint64(input)))
	idx := rng.Perm(size)[:max]
	slices.Sort(idx)
	return idx
}

// unravelIndex turns a row-major flat index into coordinates of shape.
func unravelIndex(i int, shape tensor.Shape) []int {
	coords := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		coords[d] = i % shape[d]
		i /= shape[d]
	}
	return coords
}

// gradEvaluator runs cost's graph on one kind of Gorgonia machine.
type gradEvaluator interface {
	name() string
	// gradients runs the forward and backward pass once at the bound values
	// and returns the cost and, per wrt node, its gradient in row-major order.
	gradients() (float64, [][]float64, error)
	// cost runs the forward pass only.
	cost() (float64, error)
	close()
}

// tapeEvaluator takes gradients from gorgonia.Grad (SymDiff) on a TapeMachine.
type tapeEvaluator struct {
	costNode  *gorgonia.Node
	gradNodes gorgonia.Nodes
	fwd       gorgonia.VM // compiled for cost alone, reused with Reset
}

func newTapeEvaluator(cost *gorgonia.Node, sub *gorgonia.ExprGraph, wrt gorgonia.Nodes) (*tapeEvaluator, error) {
	grads, err := symbolicGrads(cost, wrt)
	if err != nil {
		return nil, err
	}
	fwd, err := compileTape(sub)
	if err != nil {
		return nil, err
	}
	return &tapeEvaluator{costNode: cost, gradNodes: grads, fwd: fwd}, nil
}

// symbolicGrads returns the gradient nodes of cost with respect to wrt.
//
// If Grad was already called for cost and every wrt node has a Deriv, those
// nodes are returned as they are. gorgonia.Grad would return them too, since
// Backpropagate skips nodes that already have a Deriv, but calling it again
// can fail: it analyses the whole graph, gradient nodes included, and rejects
// a graph holding a gradient op that is itself not differentiable.
func symbolicGrads(cost *gorgonia.Node, wrt gorgonia.Nodes) (gorgonia.Nodes, error) {
	if cost.Deriv() != nil {
		grads := make(gorgonia.Nodes, 0, len(wrt))
		for _, n := range wrt {
			if n.Deriv() == nil {
				break
			}
			grads = append(grads, n.Deriv())
		}
		if len(grads) == len(wrt) {
			return grads, nil
		}
	}
	var grads gorgonia.Nodes
	err := callGorgonia("gorgonia.Grad", func() (err error) {
		grads, err = gorgonia.Grad(cost, wrt...)
		return err
	})
	return grads, err
}

func compileTape(g *gorgonia.ExprGraph) (gorgonia.VM, error) {
	var vm gorgonia.VM
	err := callGorgonia("compiling the graph", func() error {
		// NewTapeMachine panics on a compile error; compiling first returns it.
		prog, locMap, err := gorgonia.Compile(g)
		if err != nil {
			return err
		}
		vm = gorgonia.NewTapeMachine(g, gorgonia.WithPrecompiled(prog, locMap))
		return nil
	})
	return vm, err
}

func (t *tapeEvaluator) name() string { return "TapeMachine" }

func (t *tapeEvaluator) gradients() (float64, [][]float64, error) {
	// A machine of its own, used once, so that no state of a previous run
	// leaks into the gradient.
	roots := append(gorgonia.Nodes{t.costNode}, t.gradNodes...)
	vm, err := compileTape(t.costNode.Graph().ExactSubgraphRoots(roots...))
	if err != nil {
		return 0, nil, err
	}
	defer vm.Close()
	if err := callGorgonia("running the gradient", vm.RunAll); err != nil {
		return 0, nil, err
	}
	f, err := costValue(t.costNode)
	if err != nil {
		return 0, nil, err
	}
	grads := make([][]float64, len(t.gradNodes))
	for i, gn := range t.gradNodes {
		if grads[i], err = valueFloat64s(gn.Value()); err != nil {
			return 0, nil, fmt.Errorf("gradcheck: gradient node %q: %w", gn.Name(), err)
		}
	}
	return f, grads, nil
}

func (t *tapeEvaluator) cost() (float64, error) {
	// Without Reset a TapeMachine resumes at the end of its program and
	// runs nothing.
	t.fwd.Reset()
	if err := callGorgonia("evaluating the cost", t.fwd.RunAll); err != nil {
		return 0, err
	}
	return costValue(t.costNode)
}

func (t *tapeEvaluator) close() { t.fwd.Close() }

// lispEvaluator takes gradients from a LispMachine (DoDiff). A LispMachine
// cannot be rerun: after RunAll it has nothing left to execute, and its Reset
// skips all but the last node. So every run gets a new one.
type lispEvaluator struct {
	costNode *gorgonia.Node
	sub      *gorgonia.ExprGraph // cost and what it depends on
	wrt      gorgonia.Nodes
}

func newLispEvaluator(cost *gorgonia.Node, sub *gorgonia.ExprGraph, wrt gorgonia.Nodes) (*lispEvaluator, error) {
	if err := checkDoDiff(sub, wrt); err != nil {
		return nil, err
	}
	return &lispEvaluator{costNode: cost, sub: sub, wrt: wrt}, nil
}

// checkDoDiff returns an error if an op that a gradient from wrt flows
// through lacks DoDiff: the LispMachine would skip it silently and report a
// zero gradient for everything below it. As in gorgonia.Grad, a gradient
// flows into an SDOp only through the inputs its DiffWRT names, so an op such
// as the SizeOf under gorgonia.Mean needs no DoDiff. An op that is no SDOp
// gives no such information and counts as differentiable in all inputs.
func checkDoDiff(sub *gorgonia.ExprGraph, wrt gorgonia.Nodes) error {
	flows := make(map[*gorgonia.Node]bool)
	var visit func(n *gorgonia.Node) bool
	visit = func(n *gorgonia.Node) bool {
		if f, ok := flows[n]; ok {
			return f
		}
		f := wrt.Contains(n)
		children := sub.From(n.ID())
		var diffs []bool
		if op, ok := n.Op().(gorgonia.SDOp); ok {
			diffs = op.DiffWRT(children.Len())
		} else {
			diffs = slices.Repeat([]bool{true}, children.Len())
		}
		for j := 0; children.Next(); j++ {
			if j < len(diffs) && diffs[j] && visit(children.Node().(*gorgonia.Node)) {
				f = true
			}
		}
		flows[n] = f
		return f
	}
	for _, n := range sub.AllNodes() {
		if n.Op() == nil || !visit(n) {
			continue
		}
		if _, ok := n.Op().(gorgonia.ADOp); !ok {
			return fmt.Errorf("gradcheck: op %v of node %q has no DoDiff; the LispMachine would skip it silently", n.Op(), n.Name())
		}
	}
	return nil
}

func (l *lispEvaluator) name() string { return "LispMachine" }

func (l *lispEvaluator) gradients() (float64, [][]float64, error) {
	for _, n := range l.wrt {
		clearLispGrad(n)
	}
	if err := l.run(); err != nil {
		return 0, nil, err
	}
	f, err := costValue(l.costNode)
	if err != nil {
		return 0, nil, err
	}
	grads := make([][]float64, len(l.wrt))
	for i, n := range l.wrt {
		d, err := n.Grad()
		if err == nil {
			grads[i], err = valueFloat64s(d)
		}
		if err != nil {
			return 0, nil, fmt.Errorf("gradcheck: gradient of %q: %w", n.Name(), err)
		}
	}
	return f, grads, nil
}

// clearLispGrad zeroes the gradient that a previous LispMachine run left in
// input n. The LispMachine reuses an input's dual value and adds into its
// gradient, so without this the result would be the sum over all runs.
func clearLispGrad(n *gorgonia.Node) {
	d, err := n.Grad()
	if err != nil || d == nil {
		return // no dual value yet: the machine will start from zero
	}
	if dn := n.Deriv(); dn != nil && dn.Value() == d {
		return // the value of a symbolic gradient node, not a dual value
	}
	switch d := d.(type) {
	case *gorgonia.F64:
		*d = 0
	case tensor.Tensor:
		d.Zero()
	}
}

func (l *lispEvaluator) run(opts ...gorgonia.VMOpt) error {
	return callGorgonia("running the LispMachine", func() error {
		vm := gorgonia.NewLispMachine(l.sub, opts...)
		defer vm.Close()
		return vm.RunAll()
	})
}

func (l *lispEvaluator) cost() (float64, error) {
	if err := l.run(gorgonia.ExecuteFwdOnly()); err != nil {
		return 0, err
	}
	return costValue(l.costNode)
}

func (l *lispEvaluator) close() {}

// costValue reads the float64 value of the cost node after a run.
func costValue(n *gorgonia.Node) (float64, error) {
	v, err := valueFloat64s(n.Value())
	if err != nil {
		return 0, fmt.Errorf("gradcheck: value of cost %q: %w", n.Name(), err)
	}
	if len(v) != 1 {
		return 0, fmt.Errorf("gradcheck: cost %q has %d elements after a run, want 1", n.Name(), len(v))
	}
	return v[0], nil
}

// callGorgonia calls f and turns an error or a panic from Gorgonia, which
// panics on many malformed graphs, into an error naming what failed.
func callGorgonia(what string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("gradcheck: %s: gorgonia panicked: %v", what, r)
		}
	}()
	if err := f(); err != nil {
		return fmt.Errorf("gradcheck: %s: %w", what, err)
	}
	return nil
}
