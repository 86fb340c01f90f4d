package cpukernels_test

import (
	"math/rand/v2"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// tensors are the inputs and outputs of one forward+backward pass.
type tensors[T kernels.Float] struct {
	q, k, v, do        []T
	o, lse, dq, dk, dv []T
}

// newTensors fills the inputs with unit-normal values from seed.
func newTensors[T kernels.Float](p kernels.Params, seed uint64) tensors[T] {
	rng := rand.New(rand.NewPCG(seed, 2))
	fill := func(n int) []T {
		x := make([]T, n)
		for i := range x {
			x[i] = T(rng.NormFloat64())
		}
		return x
	}
	return tensors[T]{
		q: fill(p.QLen()), k: fill(p.KLen()), v: fill(p.KLen()), do: fill(p.QLen()),
		o: make([]T, p.QLen()), lse: make([]T, p.LSELen()),
		dq: make([]T, p.QLen()), dk: make([]T, p.KLen()), dv: make([]T, p.KLen()),
	}
}
