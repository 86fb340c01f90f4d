package simd

import (
	"flag"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

type expImpl[T float32 | float64] struct {
	name string
	fn   func(x []T, shift T) T
}

// expSweep returns the arguments y = x − shift the exp tests cover: a dense
// sweep of [-100, 0] (step 1e-4, or 1e-3 with -short), a coarser one of
// [-750, 710] (past both ends of the float64 range), and edge values.
func expSweep() []float64 {
	var ys []float64
	step := 1e-4
	if testing.Short() {
		step = 1e-3
	}
	for i := range int(100/step) + 1 {
		ys = append(ys, -100+float64(i)*step)
	}
	for y := -750.0; y <= 710; y += 0.0137 {
		ys = append(ys, y)
	}
	ys = append(ys,
		0, math.Copysign(0, -1), -1e-30, 1e-30, -1e-8, -math.SmallestNonzeroFloat64,
		-0.34657359, 0.34657359, 0.5, 1, 10, 80, -80,
		-86.98, -86.99, -87.3, -87.4, -103, -104, -110,
		88.72, 88.7228, 88.72284, 88.8, 100,
		-707.9, -708, -708.1, -708.4, -708.5, -745, -746,
		709.78, 709.782712893384, 709.8, 1000,
		math.Inf(-1), math.Inf(1), math.NaN(), -math.MaxFloat64, math.MaxFloat64,
	)
	return ys
}

// TestExpShift32 and TestExpShift64 compare every implementation with
// math.Exp. The reference for x is math.Exp(y) with y = x − shift rounded to
// T first, as every implementation does (see expRef near overflow). The error is measured in ulp of T
// at the reference value; float32 is allowed 2 ulp, float64 1e-15 relative
// error (4.5 ulp: the bound the attention kernels need to meet a float64
// reference to 1e-10). Results below the smallest normal the assembly
// keeps (2^-125, 2^-1021) may be 0; results above MaxFloat must be +Inf.
// The sum is checked against the float64 sum of the results, to
// len(x)·u relative: the implementations add in different orders.
func TestExpShift32(t *testing.T) {
	testExp(t, exp32Impls(), 24, 2, math.Ldexp(1, -125))
}

func TestExpShift64(t *testing.T) {
	testExp(t, exp64Impls(), 53, 1e-15/math.Ldexp(1, -52), math.Ldexp(1, -1021))
}

func testExp[T float32 | float64](t *testing.T, impls []expImpl[T], prec int, tolULP, tiny float64) {
	ys := expSweep()
	u := math.Ldexp(1, -prec)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			// A shift other than 0 must cancel out exactly where x − shift
			// is exact; try a few, and slices of every length mod 16.
			worst, worstY := 0.0, 0.0
			for _, shift := range []T{0, 3, -17.25} {
				x := make([]T, len(ys))
				for i, y := range ys {
					x[i] = T(y) + shift
				}
				want := make([]float64, len(x))
				extra := make([]float64, len(x))
				y := make([]float64, len(x))
				for i := range x {
					y[i] = float64(x[i] - shift)
					want[i], extra[i] = expRef(y[i])
				}
				for start := 0; start < len(x); {
					n := min(len(x)-start, 1+rng.IntN(40))
					if rng.IntN(8) == 0 {
						n = min(len(x)-start, 4096)
					}
					seg := x[start : start+n]
					sum := impl.fn(seg, shift)
					ref, mag := 0.0, 0.0
					for i, got := range seg {
						w := want[start+i]
						g := float64(got)
						ref += g
						mag += math.Abs(g)
						switch {
						case math.IsNaN(w):
							if !math.IsNaN(g) {
								t.Fatalf("exp(NaN) = %v", g)
							}
							continue
						case math.IsInf(float64(T(w)), 1):
							if !math.IsInf(g, 1) {
								t.Fatalf("exp(%v) = %v, want +Inf", y[start+i], g)
							}
							continue
						case w < tiny && g == 0 && expFlushes(impl.name):
							continue
						case impl.name == "generic" && math.IsInf(g, 1) && math.IsInf(math.Exp(y[start+i]), 1):
							// The portable loop is math.Exp by definition,
							// including its early overflow on amd64.
							continue
						}
						ulp := ulpOf[T](w)
						e := math.Abs(g-w) / ulp
						if !(e <= tolULP+extra[start+i]) {
							t.Fatalf("exp(%v) = %v, want %v (%.2f ulp)", y[start+i], g, w, e)
						}
						if e > worst {
							worst, worstY = e, y[start+i]
						}
					}
					if math.IsNaN(ref) || math.IsInf(ref, 0) {
						if s := float64(sum); !(math.IsNaN(s) || math.IsInf(s, 0)) {
							t.Fatalf("sum = %v, want %v", sum, ref)
						}
					} else if math.IsInf(float64(sum), 1) && ref+float64(n)*u*mag > maxFloat[T]() {
						// The finite results add up past T's range in T's own
						// arithmetic (the float64 reference does not overflow).
					} else if math.Abs(float64(sum)-ref) > float64(n)*u*mag {
						t.Fatalf("sum = %v, want %v ± %.3g", sum, ref, float64(n)*u*mag)
					}
					start += n
				}
			}
			t.Logf("max error %.3f ulp (at y = %v) over %d arguments × 3 shifts", worst, worstY, len(ys))
		})
	}
}

// expRef returns exp(y) and a bound on its error in ulp beyond math.Exp's.
// On amd64, math.Exp returns +Inf from about y = 709.44 although the result
// is finite up to y = 709.78; there the reference is exp(y−64)·exp(64),
// with y − 64 exact and two more roundings (1 ulp) plus exp(64)'s own error.
func expRef(y float64) (float64, float64) {
	const overflow = 7.09782712893383973096e+02 // largest y with exp(y) finite
	w := math.Exp(y)
	if math.IsInf(w, 1) && y <= overflow {
		return math.Exp(y-64) * math.Exp(64), 2
	}
	return w, 0
}

// ulpOf returns the spacing of T at |w|, treating subnormals as having the
// spacing of the smallest normal.
func ulpOf[T float32 | float64](w float64) float64 {
	var zero T
	if _, ok := any(zero).(float32); ok {
		_, e := math.Frexp(max(math.Abs(w), math.Ldexp(1, -126)))
		return math.Ldexp(1, e-24)
	}
	_, e := math.Frexp(max(math.Abs(w), math.Ldexp(1, -1022)))
	return math.Ldexp(1, e-53)
}

// TestExpShiftSpecial checks the exported functions on the cases attention
// relies on: masked scores (−Inf) give exactly 0, the row maximum gives
// exactly 1, and an empty slice sums to 0.
func TestExpShiftSpecial(t *testing.T) {
	inf := float32(math.Inf(-1))
	x32 := []float32{inf, 2, inf, inf, 5, inf, inf, inf, inf, inf, inf}
	if s := ExpShift32(x32, 5); x32[0] != 0 || x32[4] != 1 || x32[10] != 0 || math.Abs(float64(s)-(1+math.Exp(-3))) > 1e-6 {
		t.Errorf("ExpShift32 = %v, sum %v", x32, s)
	}
	x64 := []float64{math.Inf(-1), 2, 5, math.Inf(-1), math.Inf(-1)}
	if s := ExpShift64(x64, 5); x64[0] != 0 || x64[2] != 1 || x64[4] != 0 || math.Abs(s-(1+math.Exp(-3))) > 1e-15 {
		t.Errorf("ExpShift64 = %v, sum %v", x64, s)
	}
	if ExpShift32(nil, 0) != 0 || ExpShift64(nil, 0) != 0 {
		t.Errorf("empty sum not 0")
	}
}

// maxFloat is the largest finite value of T.
func maxFloat[T float32 | float64]() float64 {
	var zero T
	if _, ok := any(zero).(float32); ok {
		return math.MaxFloat32
	}
	return math.MaxFloat64
}

var exhaustive = flag.Bool("exhaustive", false, "run TestExpShift32Exhaustive (minutes)")

// TestExpShift32Exhaustive holds the assembly to TestExpShift32's contract
// on every float32 argument y (shift 0: the result depends on y alone), in
// 2^16 slices of 2^16 consecutive bit patterns, and also requires that no
// result be subnormal. It runs only with -exhaustive.
func TestExpShift32Exhaustive(t *testing.T) {
	if !*exhaustive {
		t.Skip("needs -exhaustive")
	}
	for _, impl := range exp32Impls() {
		if !expFlushes(impl.name) {
			continue // the portable loop is math.Exp itself
		}
		t.Run(impl.name, func(t *testing.T) {
			var mu sync.Mutex
			var wg sync.WaitGroup
			worst, worstY := 0.0, float32(0)
			const workers = 4
			for first := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					x, y := make([]float32, 1<<16), make([]float32, 1<<16)
					myWorst, myY := 0.0, float32(0)
					for hi := uint32(first); hi < 1<<16; hi += workers {
						for i := range y {
							y[i] = math.Float32frombits(hi<<16 | uint32(i))
						}
						copy(x, y)
						impl.fn(x, 0)
						for i, got := range x {
							w, g := math.Exp(float64(y[i])), float64(got)
							switch {
							case math.IsNaN(w):
								if !math.IsNaN(g) {
									t.Errorf("exp(%v) = %v", y[i], g)
								}
								continue
							case math.IsInf(float64(float32(w)), 1):
								if !math.IsInf(g, 1) {
									t.Errorf("exp(%v) = %v, want +Inf", y[i], g)
								}
								continue
							case g == 0 && w < math.Ldexp(1, -125):
								continue
							case g != 0 && math.Abs(g) < math.Ldexp(1, -126):
								t.Errorf("exp(%v) = %v, subnormal", y[i], g)
							}
							e := math.Abs(g-w) / ulpOf[float32](w)
							if !(e <= 2) {
								t.Errorf("exp(%v) = %v, want %v (%.2f ulp)", y[i], g, w, e)
							}
							if e > myWorst {
								myWorst, myY = e, y[i]
							}
						}
					}
					mu.Lock()
					if myWorst > worst {
						worst, worstY = myWorst, myY
					}
					mu.Unlock()
				}()
			}
			wg.Wait()
			t.Logf("max error %.3f ulp (at y = %v) over every float32 argument", worst, worstY)
		})
	}
}
