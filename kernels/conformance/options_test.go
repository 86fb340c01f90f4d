package conformance

import (
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// naiveBackend is the naive kernels as a kernels.Backend.
type naiveBackend struct{}

func (naiveBackend) Name() string { return "naive" }
func (naiveBackend) Forward32(p kernels.Params, q, k, v, o, lse []float32) error {
	return kernels.NaiveForward(p, q, k, v, o, lse)
}
func (naiveBackend) Forward64(p kernels.Params, q, k, v, o, lse []float64) error {
	return kernels.NaiveForward(p, q, k, v, o, lse)
}
func (naiveBackend) Backward32(p kernels.Params, q, k, v, o, lse, do, dlse, dq, dk, dv []float32) error {
	return kernels.NaiveBackward(p, q, k, v, o, lse, do, dlse, dq, dk, dv)
}
func (naiveBackend) Backward64(p kernels.Params, q, k, v, o, lse, do, dlse, dq, dk, dv []float64) error {
	return kernels.NaiveBackward(p, q, k, v, o, lse, do, dlse, dq, dk, dv)
}

// TestNonDeterministicSkipsDeterminism checks that NonDeterministic skips
// the bit-identity tests, which the naive kernels would pass.
func TestNonDeterministicSkipsDeterminism(t *testing.T) {
	var skipped bool
	t.Run("determinism", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		var o options
		NonDeterministic()(&o)
		testDeterminism(t, naiveBackend{}, o)
	})
	if !skipped {
		t.Error("NonDeterministic ran the determinism tests")
	}
}
