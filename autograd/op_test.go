package autograd_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gorgonia-flash/flashattention/autograd"
	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/kernels"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestNewRefuses covers the checks New makes before any graph exists.
func TestNewRefuses(t *testing.T) {
	cpu := autograd.Config{Backend: cpukernels.Backend{}, Scale: 0.5}
	q, k := tensor.Shape{2, 3, 5, 8}, tensor.Shape{2, 3, 7, 8}
	for _, c := range []struct {
		name    string
		cfg     autograd.Config
		dt      tensor.Dtype
		q, k, v tensor.Shape
	}{
		{"no backend", autograd.Config{Scale: 1}, tensor.Float64, q, k, k},
		{"int dtype", cpu, tensor.Int, q, k, k},
		{"NaN scale", autograd.Config{Backend: cpukernels.Backend{}, Scale: math.NaN()}, tensor.Float64, q, k, k},
		{"float32 overflow", autograd.Config{Backend: cpukernels.Backend{}, Scale: 1e39}, tensor.Float32, q, k, k},
		{"rank 3", cpu, tensor.Float64, tensor.Shape{3, 5, 8}, k, k},
		{"k and v differ", cpu, tensor.Float64, q, k, tensor.Shape{2, 3, 6, 8}},
		{"Hkv not dividing H", cpu, tensor.Float64, q, tensor.Shape{2, 2, 7, 8}, tensor.Shape{2, 2, 7, 8}},
		{"D differs", cpu, tensor.Float64, q, tensor.Shape{2, 3, 7, 4}, tensor.Shape{2, 3, 7, 4}},
		{"zero dimension", cpu, tensor.Float64, tensor.Shape{2, 3, 0, 8}, k, k},
		{"B differs", cpu, tensor.Float64, q, tensor.Shape{1, 3, 7, 8}, tensor.Shape{1, 3, 7, 8}},
		{"window < -1", autograd.Config{Backend: cpukernels.Backend{}, Scale: 1, Window: kernels.Window{On: true, Left: -2, Right: 0}}, tensor.Float64, q, k, k},
		{"negative softcap", autograd.Config{Backend: cpukernels.Backend{}, Scale: 1, Softcap: -3}, tensor.Float64, q, k, k},
		{"two slopes for three heads", autograd.Config{Backend: cpukernels.Backend{}, Scale: 1, ALiBi: []float64{1, 2}}, tensor.Float64, q, k, k},
		{"bias of rank 3", autograd.Config{Backend: cpukernels.Backend{}, Scale: 1, Bias: tensor.Shape{3, 5, 7}}, tensor.Float64, q, k, k},
		{"bias Bb 3 of B 2", autograd.Config{Backend: cpukernels.Backend{}, Scale: 1, Bias: tensor.Shape{3, 3, 5, 7}}, tensor.Float64, q, k, k},
		{"bias Hb 2 of H 3", autograd.Config{Backend: cpukernels.Backend{}, Scale: 1, Bias: tensor.Shape{1, 2, 5, 7}}, tensor.Float64, q, k, k},
		{"bias of Nk 5", autograd.Config{Backend: cpukernels.Backend{}, Scale: 1, Bias: tensor.Shape{1, 1, 5, 5}}, tensor.Float64, q, k, k},
		{"empty bias shape", autograd.Config{Backend: cpukernels.Backend{}, Scale: 1, Bias: tensor.Shape{}}, tensor.Float64, q, k, k},
	} {
		if op, err := autograd.New(c.cfg, c.dt, c.q, c.k, c.v); op != nil || !errors.Is(err, kernels.ErrInvalidParams) {
			t.Errorf("%s: got %v, %v; want an error wrapping kernels.ErrInvalidParams", c.name, op, err)
		}
	}
}

// TestApplyOp places the op with gorgonia.ApplyOp directly and checks that
// it refuses inputs of other shapes than it was built for, and that its
// gradient nodes have the inputs' shapes.
func TestApplyOp(t *testing.T) {
	g := gorgonia.NewGraph()
	shape := tensor.Shape{1, 2, 4, 8}
	q := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(shape...), gorgonia.WithName("q"), gorgonia.WithInit(gorgonia.GlorotN(1)))
	other := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 2, 5, 8), gorgonia.WithName("k"), gorgonia.WithInit(gorgonia.GlorotN(1)))
	op, err := autograd.New(autograd.Config{Backend: cpukernels.Backend{}, Scale: 1}, tensor.Float64, shape, shape, shape)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gorgonia.ApplyOp(op, q, other, other); err == nil {
		t.Error("ApplyOp accepted inputs of other shapes than the op was built for")
	}
	o, err := gorgonia.ApplyOp(op, q, q, q)
	if err != nil {
		t.Fatal(err)
	}
	grads, err := gorgonia.Grad(gorgonia.Must(gorgonia.Sum(o)), q)
	if err != nil {
		t.Fatal(err)
	}
	m := gorgonia.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	if !grads[0].Shape().Eq(shape) || !grads[0].Value().Shape().Eq(shape) {
		t.Errorf("dQ has shape %v (value %v), want %v", grads[0].Shape(), grads[0].Value().Shape(), shape)
	}
	if err := op.Release(); err != nil {
		t.Error(err)
	}
}

// TestNewAcceptsGroupedHeads builds the op for k and v with fewer heads
// than q, and requires the gradient of k to have k's shape.
func TestNewAcceptsGroupedHeads(t *testing.T) {
	g := gorgonia.NewGraph()
	qs, ks := tensor.Shape{1, 4, 5, 8}, tensor.Shape{1, 2, 6, 8}
	q := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(qs...), gorgonia.WithName("q"), gorgonia.WithInit(gorgonia.GlorotN(1)))
	k := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(ks...), gorgonia.WithName("k"), gorgonia.WithInit(gorgonia.GlorotN(1)))
	v := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(ks...), gorgonia.WithName("v"), gorgonia.WithInit(gorgonia.GlorotN(1)))
	op, err := autograd.New(autograd.Config{Backend: cpukernels.Backend{}, Scale: 0.3, Causal: true}, tensor.Float64, qs, ks, ks)
	if err != nil {
		t.Fatal(err)
	}
	o, err := gorgonia.ApplyOp(op, q, k, v)
	if err != nil {
		t.Fatal(err)
	}
	grads, err := gorgonia.Grad(gorgonia.Must(gorgonia.Sum(o)), q, k, v)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []tensor.Shape{qs, ks, ks} {
		if !grads[i].Shape().Eq(want) {
			t.Errorf("gradient %d has shape %v, want %v", i, grads[i].Shape(), want)
		}
	}
	m := gorgonia.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
}

// TestConfigStringNamesEveryOption requires a different String, and so a
// different hash, for every option, and a copy of the caller's slopes.
func TestConfigStringNamesEveryOption(t *testing.T) {
	base := autograd.Config{Backend: cpukernels.Backend{}, Scale: 0.5}
	seen := map[string]string{base.String(): "base"}
	for name, c := range map[string]autograd.Config{
		"causal":       {Backend: base.Backend, Scale: 0.5, Causal: true},
		"window":       {Backend: base.Backend, Scale: 0.5, Window: kernels.Window{On: true, Left: 3, Right: -1}},
		"other window": {Backend: base.Backend, Scale: 0.5, Window: kernels.Window{On: true, Left: -1, Right: 3}},
		"diagonal":     {Backend: base.Backend, Scale: 0.5, Window: kernels.Window{On: true}},
		"softcap":      {Backend: base.Backend, Scale: 0.5, Softcap: 30},
		"alibi":        {Backend: base.Backend, Scale: 0.5, ALiBi: []float64{0.5, 0.25}},
		"other alibi":  {Backend: base.Backend, Scale: 0.5, ALiBi: []float64{0.5, 0.25000000000000006}},
		"qlens":        {Backend: base.Backend, Scale: 0.5, QLens: tensor.Int},
		"klens int32":  {Backend: base.Backend, Scale: 0.5, KLens: tensor.Int32},
		"klens int64":  {Backend: base.Backend, Scale: 0.5, KLens: tensor.Int64},
		"bias":         {Backend: base.Backend, Scale: 0.5, Bias: tensor.Shape{1, 2, 3, 3}},
		"shared bias":  {Backend: base.Backend, Scale: 0.5, Bias: tensor.Shape{1, 1, 3, 3}},
	} {
		if strings.Contains(c.String(), "PANIC") {
			t.Errorf("%s: String %q", name, c.String())
		}
		if other, dup := seen[c.String()]; dup {
			t.Errorf("%s and %s have the same String %q", name, other, c.String())
		}
		seen[c.String()] = name
	}
	slopes := []float64{0.5, 0.25}
	shape := tensor.Shape{1, 2, 3, 4}
	op, err := autograd.New(autograd.Config{Backend: cpukernels.Backend{}, Scale: 1, ALiBi: slopes}, tensor.Float64, shape, shape, shape)
	if err != nil {
		t.Fatal(err)
	}
	before := op.String()
	slopes[0] = 9
	if op.String() != before {
		t.Error("the op changed with the caller's slice of slopes")
	}
}
