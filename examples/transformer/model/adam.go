package model

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Adam is the Adam optimiser (Kingma and Ba, 2015) as a gorgonia.Solver
// whose state can be saved. Gorgonia's own AdamSolver keeps its moment
// estimates and step counter unexported, so a run resumed from a
// checkpoint would restart them, and with them the bias correction's
// cautious first steps.
//
// The update of parameter w with gradient g at step t is
//
//	m = β₁·m + (1−β₁)·g
//	v = β₂·v + (1−β₂)·g²
//	w = w − LR · (m / (1−β₁ᵗ)) / (√(v / (1−β₂ᵗ)) + ε)
//
// computed in float64 whatever the parameters' dtype, so that the moments
// saved in a checkpoint are exactly the ones the next step uses.
type Adam struct {
	LR           float64 // set by the caller before each step (Schedule.Rate)
	Beta1, Beta2 float64
	Eps          float64
	AdamState
}

// AdamState is what Adam carries from one step to the next.
type AdamState struct {
	Steps int         // steps taken: t in the bias corrections
	M, V  [][]float64 // moment estimates, one slice per parameter in Step's order; nil before the first step
}

var _ G.Solver = (*Adam)(nil)

// Step applies one update to every parameter of model from its gradient.
// model must list the same parameters in the same order every time
// (Graph.Step does).
func (a *Adam) Step(model []G.ValueGrad) error {
	if a.M == nil {
		a.M, a.V = make([][]float64, len(model)), make([][]float64, len(model))
		for i, p := range model {
			n := p.Value().Shape().TotalSize()
			a.M[i], a.V[i] = make([]float64, n), make([]float64, n)
		}
	}
	if len(a.M) != len(model) || len(a.V) != len(model) {
		return fmt.Errorf("adam: state for %d parameters, stepping %d", len(a.M), len(model))
	}
	a.Steps++
	c1 := 1 - math.Pow(a.Beta1, float64(a.Steps))
	c2 := 1 - math.Pow(a.Beta2, float64(a.Steps))
	for i, p := range model {
		gv, err := p.Grad()
		if err != nil {
			return fmt.Errorf("adam: parameter %d: %w", i, err)
		}
		w, wok := p.Value().(tensor.Tensor)
		g, gok := gv.(tensor.Tensor)
		if !wok || !gok {
			return fmt.Errorf("adam: parameter %d is a %T with a %T gradient, want tensors", i, p.Value(), gv)
		}
		n := w.Shape().TotalSize()
		if len(a.M[i]) != n || len(a.V[i]) != n || g.Shape().TotalSize() != n {
			return fmt.Errorf("adam: parameter %d has %d values, its gradient %d and its moments %d and %d",
				i, n, g.Shape().TotalSize(), len(a.M[i]), len(a.V[i]))
		}
		switch wd := w.Data().(type) {
		case []float32:
			adamUpdate(a, wd, g.Data().([]float32), a.M[i], a.V[i], c1, c2)
		case []float64:
			adamUpdate(a, wd, g.Data().([]float64), a.M[i], a.V[i], c1, c2)
		default:
			return fmt.Errorf("adam: parameter %d holds %T, want float32 or float64", i, wd)
		}
	}
	return nil
}

// adamUpdate applies the update of one parameter; c1 and c2 are the bias
// corrections 1−β₁ᵗ and 1−β₂ᵗ.
func adamUpdate[T float32 | float64](a *Adam, w, g []T, m, v []float64, c1, c2 float64) {
	for j, gj := range g {
		gf := float64(gj)
		m[j] = a.Beta1*m[j] + (1-a.Beta1)*gf
		v[j] = a.Beta2*v[j] + (1-a.Beta2)*gf*gf
		w[j] -= T(a.LR * (m[j] / c1) / (math.Sqrt(v[j]/c2) + a.Eps))
	}
}
