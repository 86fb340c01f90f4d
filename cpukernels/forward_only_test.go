package cpukernels_test

import (
	"testing"

	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/kernels/conformance"
)

func TestConformanceForwardOnly(t *testing.T) {
	conformance.RunForward(t, cpukernels.Backend{}, conformance.Float32)
}
