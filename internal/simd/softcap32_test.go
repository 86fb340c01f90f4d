package simd

import (
	"math"
	"math/rand/v2"
	"testing"
)

// ulps is |got − want| in units of float32's spacing at want.
func ulps(got float32, want float64) float64 {
	w := float32(want)
	spacing := math.Nextafter32(float32(math.Abs(float64(w))), float32(math.Inf(1))) - float32(math.Abs(float64(w)))
	if spacing == 0 || math.IsInf(float64(spacing), 0) {
		return 0
	}
	return math.Abs(float64(got)-want) / float64(spacing)
}

// TestSoftcap32 checks Softcap32 against c·tanh(s/c) and 1 − tanh² in
// float64 over a dense sweep of s/c in [−12, 12] (both sides of the
// polynomial's threshold ½), random scores and caps, and the special
// values: c·tanh within 4 ulp, the derivative (at most 1) within 2⁻²²,
// and exactly the portable loop's special cases.
func TestSoftcap32(t *testing.T) {
	var s []float32
	for x := -12.0; x <= 12; x += 1.0 / 4096 {
		s = append(s, float32(x))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1 << 14 {
		s = append(s, float32(rng.NormFloat64()*40))
	}
	s = append(s, 0, float32(math.Copysign(0, -1)), 0.5, -0.5, math.Nextafter32(0.5, 0), 1e-30, -1e-30, 3e38, -3e38)
	for _, c := range []float32{1, 5, 30, 50.5} {
		got, grad := append([]float32(nil), s...), make([]float32, len(s))
		Softcap32(got, grad, c)
		worst, worstGrad := 0.0, 0.0
		for i, x := range s {
			tw := math.Tanh(float64(x) / float64(c))
			if e := ulps(got[i], float64(c)*tw); e > worst {
				worst = e
			}
			if e := math.Abs(float64(grad[i]) - (1 - tw*tw)); e > worstGrad {
				worstGrad = e
			}
		}
		if worst > 4 || worstGrad > 0x1p-22 {
			t.Errorf("c = %v: %.2f ulp for c·tanh (want ≤ 4), error %.3g for its derivative (want ≤ 2⁻²²)", c, worst, worstGrad)
		}
		plain := append([]float32(nil), s...)
		Softcap32(plain, nil, c)
		for i := range plain {
			if plain[i] != got[i] {
				t.Fatalf("c = %v: without grad s[%d] = %v, with grad %v", c, i, plain[i], got[i])
			}
		}
	}
	inf := float32(math.Inf(1))
	special := []float32{inf, -inf, float32(math.NaN())}
	grad := make([]float32, 3)
	Softcap32(special, grad, 30)
	if special[0] != 30 || special[1] != -30 || grad[0] != 0 || grad[1] != 0 {
		t.Errorf("±Inf gave %v, %v (derivative %v, %v); want ±30 and 0", special[0], special[1], grad[0], grad[1])
	}
	if !math.IsNaN(float64(special[2])) || !math.IsNaN(float64(grad[2])) {
		t.Errorf("NaN gave %v (derivative %v)", special[2], grad[2])
	}
}

// TestSoftcap32Tails runs Softcap32 on every length up to 70 (every tail of
// 16 lanes) and two long rows, with and without grad: each element must be
// the one a whole-row call gives it, and the elements around the slices
// must stay untouched.
func TestSoftcap32Tails(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	whole := make([]float32, 299)
	for i := range whole {
		whole[i] = float32(rng.NormFloat64() * 40)
	}
	wantS, wantG := append([]float32(nil), whole...), make([]float32, len(whole))
	Softcap32(wantS, wantG, 30)
	for n := range 300 {
		if n > 70 && n != 257 && n != 299 {
			continue
		}
		for _, withGrad := range []bool{false, true} {
			const guard = 9
			sBuf, gBuf := guarded[float32](n, guard), guarded[float32](n, guard)
			s := sBuf[guard : guard+n]
			copy(s, whole)
			var g []float32
			if withGrad {
				g = gBuf[guard : guard+n]
			}
			Softcap32(s, g, 30)
			for i := range s {
				if s[i] != wantS[i] || (withGrad && g[i] != wantG[i]) {
					t.Fatalf("n=%d grad=%v: element %d is %v (grad %v), a whole row gives %v (%v)", n, withGrad, i, s[i], g, wantS[i], wantG[i])
				}
			}
			checkGuards(t, "Softcap32", sBuf, guard, n)
			checkGuards(t, "Softcap32's grad", gBuf, guard, n)
		}
	}
}

// TestSoftcap32PolynomialPath checks that a vector whose every lane is
// below the polynomial's threshold, which skips the exponential, gives
// the values and derivatives that the same lanes get beside a lane above
// it (the full path), bit for bit.
func TestSoftcap32PolynomialPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 1000 {
		const c = 30
		small := make([]float32, 16)
		for i := range small {
			small[i] = float32(rng.Float64()*29 - 14.5) // |s/c| < ½
		}
		mixed := append([]float32(nil), small...)
		big := rng.IntN(16)
		mixed[big] = 100 // one lane on the exponential's side
		gs, gm := make([]float32, 16), make([]float32, 16)
		ws := append([]float32(nil), small...)
		Softcap32(ws, gs, c)
		Softcap32(mixed, gm, c)
		for i := range small {
			if i == big {
				continue
			}
			if math.Float32bits(ws[i]) != math.Float32bits(mixed[i]) || math.Float32bits(gs[i]) != math.Float32bits(gm[i]) {
				t.Fatalf("s = %v: %v, %v alone; %v, %v beside a large score", small[i], ws[i], gs[i], mixed[i], gm[i])
			}
		}
	}
}
