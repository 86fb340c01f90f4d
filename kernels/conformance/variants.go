package conformance

import (
	"math"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// alibiSlopes are the usual geometric slopes 2^(−8(h+1)/H).
func alibiSlopes(h int) []float64 {
	s := make([]float64, h)
	for i := range s {
		s[i] = math.Exp2(-8 * float64(i+1) / float64(h))
	}
	return s
}

// variantCase is one problem of the variant sweep; qGain multiplies the
// random queries, to make scores large where the softcap must bite.
type variantCase struct {
	p     kernels.Params
	qGain float32
}

// variantParams lists the variant sweep: odd sizes with Nq = Nk and Nq ≠ Nk
// both ways, causal on and off, and in each variant the settings that
// exercise its edges: GQA ratios 1, 2, 8 and all heads on one key head;
// windows of width 0, one-sided, unbounded on either side, and bounds that
// cut the kernels' tiles (64 rows, 128 keys) off their edges; softcaps well
// below the scores; ALiBi, alone and with everything else.
func variantParams(short bool) []variantCase {
	sizes := [][2]int{{113, 113}, {255, 77}, {40, 300}}
	if !short {
		sizes = append(sizes, [2]int{1023, 1023}, [2]int{1, 517})
	}
	var cs []variantCase
	add := func(p kernels.Params, gain float32) {
		for _, n := range sizes {
			for _, causal := range []bool{false, true} {
				p := p
				p.Nq, p.Nk, p.Causal = n[0], n[1], causal
				p.Scale = 1 / math.Sqrt(float64(p.D))
				if n[0] > 255 || n[1] > 517 {
					p.B = 1
				}
				cs = append(cs, variantCase{p, gain})
			}
		}
	}
	for _, h := range [][2]int{{8, 8}, {8, 4}, {16, 2}, {8, 1}} {
		add(kernels.Params{B: 2, H: h[0], Hkv: h[1], D: 40}, 1)
	}
	for _, w := range [][2]int{{0, 0}, {5, -1}, {-1, 7}, {63, 64}, {130, 1}, {200, 129}} {
		add(kernels.Params{B: 2, H: 2, D: 24, Window: kernels.Window{On: true, Left: w[0], Right: w[1]}}, 1)
	}
	for _, c := range []float64{2, 30} {
		add(kernels.Params{B: 2, H: 2, D: 64, Softcap: c}, 6)
	}
	add(kernels.Params{B: 2, H: 4, D: 40, ALiBi: alibiSlopes(4)}, 1)
	add(kernels.Params{B: 2, H: 4, Hkv: 2, D: 40, Window: kernels.Window{On: true, Left: 70, Right: 9},
		Softcap: 5, ALiBi: alibiSlopes(4)}, 3)
	return cs
}

// testVariants runs the variant sweep against the float64 reference, with
// the usual tolerances, skipping the variants b does not claim.
func testVariants(t *testing.T, b kernels.Backend, prec kernels.Precision, o options) {
	for i, c := range variantParams(testing.Short() || raceDetector) {
		t.Run(shapeName(c.p), func(t *testing.T) {
			o.skipUnsupported(t, b, c.p)
			t.Parallel()
			pr := randomProblem(c.p, uint64(2000+i))
			for j := range pr.q {
				pr.q[j] *= c.qGain
			}
			checkProblem(t, b, prec, pr)
		})
	}
}
