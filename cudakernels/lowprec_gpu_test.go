//go:build flashgpu

package cudakernels

import (
	"errors"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/kernels/conformance"
)

// TestForwardLowPrecision runs the shared suite's forward checks on the
// BF16 and FP16 backends, which have a tensor-core forward but no backward
// yet: O and LSE within twice the error of a naive forward computed in that
// precision.
func TestForwardLowPrecision(t *testing.T) {
	for _, prec := range []Precision{BF16, FP16} {
		b := newTestBackend(t, WithPrecision(prec))
		t.Run(prec.String(), func(t *testing.T) { conformance.RunForward(t, b, prec) })
	}
}

// TestLowPrecisionLimits checks the honest errors of the BF16 and FP16
// backends: no backward yet, and no forward above the verified head
// dimension.
func TestLowPrecisionLimits(t *testing.T) {
	for _, prec := range []Precision{BF16, FP16} {
		b := newTestBackend(t, WithPrecision(prec))
		p := kernels.Params{B: 1, H: 1, Nq: 3, Nk: 3, D: 16, Scale: 0.25}
		x := make([]float32, p.QLen())
		l := make([]float32, p.LSELen())
		if err := b.Backward32(p, x, x, x, x, l, x, make([]float32, len(x)), make([]float32, len(x)), make([]float32, len(x))); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%v Backward32: got %v, want ErrUnsupported", prec, err)
		}
		p.D = mmaVerifiedDim + 1
		x = make([]float32, p.QLen())
		if err := b.Forward32(p, x, x, x, make([]float32, len(x)), l); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%v Forward32 at D = %d: got %v, want ErrUnsupported", prec, p.D, err)
		}
	}
}
