package cpukernels_test

import (
	"testing"

	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/kernels/conformance"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, cpukernels.Backend{}, conformance.Float32)
}

// TestConformanceOneWorker checks that the serial schedule agrees too.
func TestConformanceSerial(t *testing.T) {
	conformance.Run(t, cpukernels.Backend{Workers: 1}, conformance.Float32)
}
