//go:build !noasm

package simd

import "golang.org/x/sys/cpu"

// The assembly paths, chosen once from the CPU's features. cpu.X86 reports a
// feature only when the OS also saves its register state, so hasAVX512
// implies that zmm and opmask registers are usable.
var (
	hasAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasFMA
	hasAVX512 = hasAVX2 && cpu.X86.HasAVX512F
)
