package cudakernels

import "fmt"

// Family selects the kernel family of the tensor-core kernels (TF32, BF16
// and FP16 precisions, and FP32's 3xTF32 kernels on Hopper).
type Family int

const (
	// FamilyAuto (the default) uses FamilySM90 on devices of compute
	// capability 9.0 where it is built for the precision and head
	// dimension, FamilySM80 everywhere else.
	FamilyAuto Family = iota
	// FamilySM80 is the mma.sync family (csrc/fwd_mma.cuh, bwd_mma.cuh),
	// for compute capability 8.0 and newer. It keeps FP32 on the CUDA
	// cores everywhere.
	FamilySM80
	// FamilySM90 is the Hopper family (csrc/fwd_wgmma.cuh, bwd_wgmma.cuh:
	// wgmma and bulk asynchronous copies), for compute capability 9.0
	// only. Where it is not built (D ≤ 32; the TF32 forward above D = 128;
	// every backward above D = 128) FamilySM80 or the CUDA cores serve.
	// FP32's plain problems at D ≤ 128 run on its 3xTF32 kernels (with
	// FamilyAuto too; package doc, Precision modes).
	FamilySM90
)

func (f Family) String() string {
	switch f {
	case FamilyAuto:
		return "auto"
	case FamilySM80:
		return "sm80"
	case FamilySM90:
		return "sm90"
	}
	return fmt.Sprintf("Family(%d)", int(f))
}

// ParseFamily returns the family whose String is s.
func ParseFamily(s string) (Family, error) {
	for _, f := range []Family{FamilyAuto, FamilySM80, FamilySM90} {
		if s == f.String() {
			return f, nil
		}
	}
	return 0, fmt.Errorf("%w: kernel family %q (want auto, sm80 or sm90)", ErrUnsupported, s)
}
