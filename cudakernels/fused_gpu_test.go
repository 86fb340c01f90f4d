//go:build flashgpu

package cudakernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// TestFusedBackwardMatchesTwoKernels runs plain BF16 and FP16 problems
// through a deterministic backend and one that allows the fused backward
// (WithDeterministic(false)): O, the LSE, dK and dV must be the same bits
// (the fused kernel computes them as the dK/dV kernel does), and dQ, summed
// in another order, must agree within 1e-5 of its largest magnitude. Odd
// lengths put padding rows and keys in the last blocks; D = 80 pads to 128.
func TestFusedBackwardMatchesTwoKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, prec := range []Precision{BF16, FP16} {
		det := newTestBackend(t, WithPrecision(prec), WithDeterministic(true))
		fused := newTestBackend(t, WithPrecision(prec), WithDeterministic(false))
		for _, p := range []kernels.Params{
			{B: 2, H: 3, Nq: 300, Nk: 260, D: 64, Scale: 0.125},
			{B: 2, H: 3, Nq: 300, Nk: 260, D: 64, Scale: 0.125, Causal: true},
			{B: 1, H: 2, Nq: 64, Nk: 1000, D: 128, Scale: 0.088},
			{B: 1, H: 2, Nq: 777, Nk: 777, D: 128, Scale: 0.088, Causal: true},
			{B: 1, H: 2, Nq: 129, Nk: 383, D: 80, Scale: 0.11},
		} {
			name := fmt.Sprintf("%v/B%d_H%d_Nq%d_Nk%d_D%d_causal=%v", prec, p.B, p.H, p.Nq, p.Nk, p.D, p.Causal)
			t.Run(name, func(t *testing.T) {
				q, k, v := randn[float32](rng, p.QLen()), randn[float32](rng, p.KLen()), randn[float32](rng, p.KLen())
				do := randn[float32](rng, p.QLen())
				want := runCall(t, det, p, q, k, v, do, false)
				got := runCall(t, fused, p, q, k, v, do, false)
				if !usedFused(fused) {
					if _, capab, err := probe(0); err == nil && capab.hopper() {
						t.Fatal("a Hopper device, and the backend opened WithDeterministic(false) loaded no fused backward")
					}
					t.Skip("no fused backward on this device (not a Hopper GPU)")
				}
				dq := got.dq
				got.dq = want.dq
				sameBits(t, "fused against two kernels", got, want)
				var peak, worst float64
				for i := range dq {
					peak = max(peak, math.Abs(float64(want.dq[i])))
					worst = max(worst, math.Abs(float64(dq[i]-want.dq[i])))
				}
				if !(worst <= 1e-5*peak) {
					t.Fatalf("dQ differs by %.3g, %.3g of its largest magnitude %.3g", worst, worst/peak, peak)
				}
			})
		}
	}
}

// usedFused reports whether b loaded a fused backward kernel.
func usedFused(b *Backend) bool {
	for _, k := range b.reg.bwd {
		if w, ok := k.(*wgmmaBackward); ok && w.dkdvDQ != (cu.Function{}) {
			return true
		}
	}
	return false
}
