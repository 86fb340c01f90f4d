package cudakernels

import (
	"fmt"
	"strings"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// checkPlain refuses every attention variant of kernels.Params, listing
// those p uses, with an error wrapping ErrUnsupported; plain attention
// passes.
func checkPlain(p kernels.Params) error { return refuseVariants(p, "the GPU", 0) }

// variantSet is a set of attention variants that kernels compute.
type variantSet uint8

const (
	// masksAndMods are grouped-query heads, windows, lengths, softcap and
	// ALiBi.
	masksAndMods variantSet = 1 << iota
	dropoutVariant
	biasVariant
	// pagedVariant is keys and values read from a page pool, which the
	// decoding kernels alone do (decode_gpu.go).
	pagedVariant

	// allVariants is every variant the dense kernels can compute.
	allVariants = masksAndMods | dropoutVariant | biasVariant
)

// refuseVariants returns an error wrapping ErrUnsupported that lists the
// variants of p outside computed, the set that kernels (a family's, named
// for the message) compute. A problem that uses none of those passes. Each
// backend entry point asks the kernels the registry chose (their computes
// method), so a caller never gets plain attention's result for another
// problem.
func refuseVariants(p kernels.Params, kernelsName string, computed variantSet) error {
	var used []string
	if computed&masksAndMods == 0 {
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
	if computed&dropoutVariant == 0 && p.Dropout.On() {
		used = append(used, fmt.Sprintf("dropout %v", p.Dropout.P))
	}
	if computed&biasVariant == 0 && p.Bias != nil {
		used = append(used, "an additive bias")
	}
	if computed&pagedVariant == 0 && p.Pages != nil {
		// The dense kernels would read the pool as [B, Hkv, Nk, D].
		used = append(used, "paged keys and values")
	}
	if len(used) == 0 {
		return nil
	}
	where := "FP32 and float64 (CUDA cores) and the CPU backend compute every variant"
	if p.Pages != nil {
		where = "the GPU reads pages in its decoding kernels (a forward with masks, softcap and ALiBi); the CPU backend computes every variant"
	}
	return fmt.Errorf("%w: %s: not yet in %s; %s", ErrUnsupported, strings.Join(used, ", "), kernelsName, where)
}

// refusePlainOnly is refuseVariants for kernels that compute plain
// problems alone (plainParams: the causal mask and a window's right bound
// included), such as FP32's 3xTF32 Hopper kernels.
func refusePlainOnly(p kernels.Params) error {
	if plainParams(p) && p.Bias == nil && !p.Dropout.On() && p.Pages == nil {
		return nil
	}
	return refuseVariants(p, "FP32's Hopper (3xTF32) kernels", 0)
}

// pickVariant returns plain for a problem the plain kernels compute (the
// causal mask and a window's right bound included), else withVariants. It
// reads the kernels' argument, not the chunk's kernels.Params, which no
// longer holds the lengths and slopes (they live on the device). F is the
// kernels' handle: a cu.Function, or what a CPU test names them by.
func pickVariant[F any](kp *kernelParams, plain, withVariants F) F {
	if isPlain(kp) {
		return plain
	}
	return withVariants
}

// plainParams is isPlain for the problem itself: the test kernel
// selection makes before a launch's argument exists (request.plain). It
// must agree with isPlain on every problem (TestPlainParamsAgrees); a
// chunk's Params keep markers of the call's lengths and slopes for it
// (chunkParams).
func plainParams(p kernels.Params) bool {
	return p.KVHeads() == p.H && !(p.Window.On && p.Window.Left >= 0) && p.QLens == nil && p.KLens == nil &&
		p.Softcap == 0 && p.ALiBi == nil
}

// isPlain reports whether the plain kernels compute kp's problem.
func isPlain(kp *kernelParams) bool {
	return kp.KvGroup == 1 && kp.MaskLeft < 0 && kp.QLens == 0 && kp.KLens == 0 && kp.Softcap == 0 && kp.Alibi == 0
}

// pickMmaVariant is pickVariant for the mma.sync kernels: full where the
// problem has a bias or dropout (the _full kernels compute them on top of
// _var's variants), else withVariants or plain; the plain kernels compute
// the causal mask alone (Hopper's compute a window's right bound too), so
// a right bound without the causal mask takes the _var kernel.
func pickMmaVariant[F any](kp *kernelParams, plain, withVariants, full F) F {
	if kp.Bias != 0 || kp.DropoutThreshold != 0 {
		return full
	}
	if kp.MaskRight >= 0 && kp.Causal == 0 {
		return withVariants
	}
	return pickVariant(kp, plain, withVariants)
}
