package cudakernels

import (
	"fmt"
	"strings"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// checkPlain refuses the attention variants of kernels.Params that the CUDA
// kernels do not compute yet (grouped-query heads, windows, softcap,
// ALiBi, per-sequence lengths, dropout), so that a caller gets an error wrapping ErrUnsupported rather
// than plain attention's result for another problem.
// checkNoLSEGradient refuses a gradient with respect to the LSE that is not
// zero (the CUDA backward's D = rowsum(dO∘O) does not take it yet); nil or
// all zeros, what a loss that does not use the LSE gives, is fine.
func checkNoLSEGradient[T kernels.Float](dlse []T) error {
	for _, x := range dlse {
		if x != 0 {
			return fmt.Errorf("%w: a gradient with respect to the LSE: not yet on the GPU; run it on the CPU backend", ErrUnsupported)
		}
	}
	return nil
}

func checkPlain(p kernels.Params) error {
	if p.IsPlain() {
		return nil
	}
	var used []string
	if p.KVHeads() != p.H {
		used = append(used, fmt.Sprintf("grouped-query attention (Hkv = %d, H = %d)", p.KVHeads(), p.H))
	}
	if p.Window.On {
		used = append(used, fmt.Sprintf("a window (%d, %d)", p.Window.Left, p.Window.Right))
	}
	if p.Softcap != 0 {
		used = append(used, fmt.Sprintf("softcap %v", p.Softcap))
	}
	if p.ALiBi != nil {
		used = append(used, "ALiBi")
	}
	if p.QLens != nil || p.KLens != nil {
		used = append(used, "per-sequence lengths")
	}
	if p.Dropout.On() {
		used = append(used, fmt.Sprintf("dropout %v", p.Dropout.P))
	}
	if p.Bias != nil {
		used = append(used, "an additive bias")
	}
	return fmt.Errorf("%w: %s: not yet on the GPU; run it on the CPU backend", ErrUnsupported, strings.Join(used, ", "))
}
