package cudakernels

import (
	"fmt"
	"strings"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// checkPlain refuses every attention variant of kernels.Params, listing
// those p uses, with an error wrapping ErrUnsupported; plain attention
// passes. checkVariants and KernelTime (plain problems only) use it.
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
	return fmt.Errorf("%w: %s: not yet on the GPU; run it on the CPU backend", ErrUnsupported, strings.Join(used, ", "))
}

// checkVariants refuses what the kernels that would run p in precision prec
// on elements of elem bytes do not compute yet, with an error wrapping
// ErrUnsupported: every variant on the tensor cores (TF32, BF16 and FP16
// on float32). The CUDA-core kernels (FP32 and float64) compute them all:
// grouped-query attention, windows, softcap, ALiBi, lengths and dropout. A
// gradient with respect to the LSE runs everywhere: it is folded into
// D = rowsum(dO∘O) − dLSE, which every backward shares.
func checkVariants(p kernels.Params, prec Precision, elem int) error {
	err := checkPlain(p)
	if err == nil || elem == 8 || prec == FP32 {
		return nil
	}
	return fmt.Errorf("%w (in %v, on the tensor cores; FP32 and float64 compute them)", err, prec)
}
