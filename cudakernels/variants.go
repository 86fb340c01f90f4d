package cudakernels

import (
	"fmt"
	"strings"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// checkPlain refuses every attention variant of kernels.Params, listing
// those p uses, with an error wrapping ErrUnsupported; plain attention
// passes.
func checkPlain(p kernels.Params) error { return refuseVariants(p, "the GPU", false, false) }

// refuseVariants returns an error wrapping ErrUnsupported that lists the
// variants of p that kernels (a family's, named for the message) do not
// compute: dropout unless withDropout, every other variant unless
// withOthers. A problem that uses none of those passes. Each backend entry
// point asks the kernels the registry chose (their computes method), so a
// caller never gets plain attention's result for another problem.
func refuseVariants(p kernels.Params, kernelsName string, withOthers, withDropout bool) error {
	var used []string
	if !withOthers {
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
	}
	if !withDropout && p.Dropout.On() {
		used = append(used, fmt.Sprintf("dropout %v", p.Dropout.P))
	}
	if p.Bias != nil {
		used = append(used, "an additive bias") // no GPU kernel computes it yet
	}
	if len(used) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s: not yet in %s; FP32 and float64 (CUDA cores) and the CPU backend compute every variant",
		ErrUnsupported, strings.Join(used, ", "), kernelsName)
}
