package model

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gorgonia.org/tensor"
)

// param is one learnable tensor of a Model.
type param struct {
	name string
	t    *tensor.Dense
}

// Model is a Config plus the parameter tensors every graph binds.
type Model struct {
	Config Config
	params []param
	byName map[string]*tensor.Dense
}

// initStd is the GPT-2 initialisation scale; residual output projections are
// further divided by √(2·Layers) so that the residual stream does not grow
// with depth.
const initStd = 0.02

// New returns a model with freshly initialised parameters. The same cfg and
// seed always give the same parameters, whatever the attention path, so that
// naive and flash runs can be compared step for step.
func New(cfg Config, seed uint64) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dt, _ := cfg.dtype()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	m := &Model{Config: cfg, byName: map[string]*tensor.Dense{}}
	C, V := cfg.Dim, cfg.Vocab
	resStd := initStd / math.Sqrt(2*float64(cfg.Layers))
	normal := func(std float64) func(int) float64 {
		return func(int) float64 { return rng.NormFloat64() * std }
	}
	constant := func(c float64) func(int) float64 { return func(int) float64 { return c } }

	m.add(dt, "wte", []int{V, C}, normal(initStd))
	m.add(dt, "wpe", []int{cfg.Seq, C}, normal(initStd))
	for l := range cfg.Layers {
		p := func(s string) string { return fmt.Sprintf("h%d.%s", l, s) }
		m.add(dt, p("ln1.g"), []int{C}, constant(1))
		m.add(dt, p("ln1.b"), []int{C}, constant(0))
		m.add(dt, p("wq"), []int{C, C}, normal(initStd))
		m.add(dt, p("wk"), []int{C, C}, normal(initStd))
		m.add(dt, p("wv"), []int{C, C}, normal(initStd))
		m.add(dt, p("wo"), []int{C, C}, normal(resStd))
		m.add(dt, p("ln2.g"), []int{C}, constant(1))
		m.add(dt, p("ln2.b"), []int{C}, constant(0))
		m.add(dt, p("w1"), []int{C, 4 * C}, normal(initStd))
		m.add(dt, p("b1"), []int{4 * C}, constant(0))
		m.add(dt, p("w2"), []int{4 * C, C}, normal(resStd))
		m.add(dt, p("b2"), []int{C}, constant(0))
	}
	m.add(dt, "lnf.g", []int{C}, constant(1))
	m.add(dt, "lnf.b", []int{C}, constant(0))
	m.add(dt, "head.w", []int{C, V}, normal(initStd))
	m.add(dt, "head.b", []int{V}, constant(0))
	return m, nil
}

func (m *Model) add(dt tensor.Dtype, name string, shape []int, fill func(i int) float64) {
	t := tensor.New(tensor.Of(dt), tensor.WithShape(shape...))
	switch d := t.Data().(type) {
	case []float32:
		for i := range d {
			d[i] = float32(fill(i))
		}
	case []float64:
		for i := range d {
			d[i] = fill(i)
		}
	}
	m.params = append(m.params, param{name, t})
	m.byName[name] = t
}

// NumParams counts scalar parameters.
func (m *Model) NumParams() int {
	n := 0
	for _, p := range m.params {
		n += p.t.Shape().TotalSize()
	}
	return n
}

// ParamNames lists parameter names in a fixed order, the order of
// Graph.Gradients.
func (m *Model) ParamNames() []string {
	names := make([]string, len(m.params))
	for i, p := range m.params {
		names[i] = p.name
	}
	return names
}
