package model

import (
	"fmt"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// cpuPrecision rejects a reduced precision on the CPU, whose backend
// computes float32 exactly: silently ignoring it would mislead a comparison.
func cpuPrecision(prec kernels.Precision) error {
	if prec != kernels.FP32 {
		return fmt.Errorf("precision %v needs the GPU; the CPU computes fp32", prec)
	}
	return nil
}
