package kernels

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestVisibleKeys(t *testing.T) {
	cases := []struct {
		p    Params
		want []int // per query row
	}{
		{Params{Nq: 3, Nk: 5}, []int{5, 5, 5}},
		{Params{Nq: 3, Nk: 3, Causal: true}, []int{1, 2, 3}},
		{Params{Nq: 2, Nk: 5, Causal: true}, []int{4, 5}},          // bottom-right: last row sees all
		{Params{Nq: 5, Nk: 2, Causal: true}, []int{0, 0, 0, 1, 2}}, // leading rows see nothing
		{Params{Nq: 1, Nk: 7, Causal: true}, []int{7}},             // decoding
	}
	for _, c := range cases {
		for i, want := range c.want {
			if got := c.p.Mask(0).VisibleKeys(i); got != want {
				t.Errorf("%+v: VisibleKeys(%d) = %d, want %d", c.p, i, got, want)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	good := Params{B: 1, H: 2, Nq: 3, Nk: 4, D: 8, Scale: 0.5}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid params: %v", err)
	}
	bad := map[string]func(p *Params){
		"B=0":       func(p *Params) { p.B = 0 },
		"H<0":       func(p *Params) { p.H = -1 },
		"Nq=0":      func(p *Params) { p.Nq = 0 },
		"Nk=0":      func(p *Params) { p.Nk = 0 },
		"D=0":       func(p *Params) { p.D = 0 },
		"NaN scale": func(p *Params) { p.Scale = math.NaN() },
		"Inf scale": func(p *Params) { p.Scale = math.Inf(1) },
		"too large": func(p *Params) { p.B, p.Nq = 1<<16, 1<<16 },
	}
	for name, mutate := range bad {
		p := good
		mutate(&p)
		if err := p.Validate(); !errors.Is(err, ErrInvalidParams) {
			t.Errorf("%s: got %v, want an error wrapping ErrInvalidParams", name, err)
		}
	}
}

func TestFLOPs(t *testing.T) {
	p := Params{B: 2, H: 3, Nq: 5, Nk: 7, D: 11}
	if got, want := p.ForwardFLOPs(), 4.0*2*3*5*7*11; got != want {
		t.Errorf("ForwardFLOPs = %v, want %v", got, want)
	}
	p.Causal = true
	if got, want := p.BackwardFLOPs(), 2.5*2*2*3*5*7*11; got != want {
		t.Errorf("causal BackwardFLOPs = %v, want %v", got, want)
	}
}

func TestParsePrecision(t *testing.T) {
	for _, p := range []Precision{FP32, TF32, BF16, FP16} {
		for _, s := range []string{p.String(), strings.ToUpper(p.String())} {
			if got, err := ParsePrecision(s); err != nil || got != p {
				t.Errorf("ParsePrecision(%q) = %v, %v; want %v", s, got, err, p)
			}
		}
	}
	for _, s := range []string{"", "fp64", "bf16 "} {
		if _, err := ParsePrecision(s); !errors.Is(err, ErrInvalidParams) {
			t.Errorf("ParsePrecision(%q): error %v, want ErrInvalidParams", s, err)
		}
	}
}

// TestKeyRangeMatchesMask compares KeyRange and QueryRange with the mask of
// the package documentation, pair by pair, for windows that are one-sided,
// empty for some rows, and combined with the causal mask, on entries whose
// lengths are full, shorter than N (0 included) or padded on one side only.
func TestKeyRangeMatchesMask(t *testing.T) {
	windows := []Window{{}, {On: true, Left: 0, Right: 0}, {On: true, Left: 3, Right: -1},
		{On: true, Left: -1, Right: 2}, {On: true, Left: 4, Right: 1}, {On: true, Left: -1, Right: -1}}
	for _, w := range windows {
		for _, causal := range []bool{false, true} {
			for _, n := range [][2]int{{7, 7}, {3, 9}, {9, 3}} {
				p := Params{B: 5, Nq: n[0], Nk: n[1], Causal: causal, Window: w,
					QLens: []int{n[0], 0, 1, n[0] - 1, n[0]}, KLens: []int{n[1], n[1], 1, n[1] - 2, 0}}
				for b := range p.B {
					m := p.Mask(b)
					lq, lk := p.QLens[b], p.KLens[b]
					lastLo, lastHi := 0, 0
					for i := range p.Nq {
						lo, hi := m.KeyRange(i)
						if lo < lastLo || hi < lastHi {
							t.Fatalf("%+v entry %d: KeyRange(%d) = [%d, %d) after [%d, %d): not non-decreasing", p, b, i, lo, hi, lastLo, lastHi)
						}
						lastLo, lastHi = lo, hi
						a := i + lk - lq
						for j := range p.Nk {
							want := i < lq && j < lk && (!causal || j <= a) &&
								(!w.On || w.Left < 0 || j >= a-w.Left) && (!w.On || w.Right < 0 || j <= a+w.Right)
							if got := lo <= j && j < hi; got != want {
								t.Fatalf("%+v entry %d: row %d key %d: KeyRange [%d, %d), visible %v", p, b, i, j, lo, hi, want)
							}
							qlo, qhi := m.QueryRange(j)
							if got := qlo <= i && i < qhi; got != want {
								t.Fatalf("%+v entry %d: key %d row %d: QueryRange [%d, %d), visible %v", p, b, j, i, qlo, qhi, want)
							}
						}
					}
				}
			}
		}
	}
}

func TestValidateVariants(t *testing.T) {
	good := Params{B: 1, H: 4, Nq: 3, Nk: 4, D: 8, Scale: 0.5, Hkv: 2,
		Window: Window{On: true, Left: -1, Right: 0}, Softcap: 20, ALiBi: []float64{1, 2, 3, 4}}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid params: %v", err)
	}
	bad := map[string]func(p *Params){
		"Hkv 3 of 4":          func(p *Params) { p.Hkv = 3 },
		"Hkv > H":             func(p *Params) { p.Hkv = 8 },
		"Hkv < 0":             func(p *Params) { p.Hkv = -1 },
		"left < -1":           func(p *Params) { p.Window.Left = -2 },
		"right < -1":          func(p *Params) { p.Window.Right = -5 },
		"bounds of no window": func(p *Params) { p.Window = Window{Left: 3} },
		"negative softcap":    func(p *Params) { p.Softcap = -1 },
		"NaN softcap":         func(p *Params) { p.Softcap = math.NaN() },
		"Inf softcap":         func(p *Params) { p.Softcap = math.Inf(1) },
		"3 slopes":            func(p *Params) { p.ALiBi = []float64{1, 2, 3} },
		"NaN slope":           func(p *Params) { p.ALiBi = []float64{1, math.NaN(), 3, 4} },
		"Inf slope":           func(p *Params) { p.ALiBi = []float64{1, 2, math.Inf(-1), 4} },
		"2 QLens for B = 1":   func(p *Params) { p.QLens = []int{1, 2} },
		"no KLens":            func(p *Params) { p.KLens = []int{} },
		"QLens > Nq":          func(p *Params) { p.QLens = []int{4} },
		"KLens < 0":           func(p *Params) { p.KLens = []int{-1} },
	}
	for name, mutate := range bad {
		p := good
		mutate(&p)
		if err := p.Validate(); !errors.Is(err, ErrInvalidParams) {
			t.Errorf("%s: got %v, want an error wrapping ErrInvalidParams", name, err)
		}
	}
	if good.KLen() != 1*2*4*8 {
		t.Errorf("KLen = %d with Hkv = 2, want %d", good.KLen(), 2*4*8)
	}
	for bh, want := range []int{0, 0, 1, 1} {
		if got := good.KVHead(bh); got != want {
			t.Errorf("KVHead(%d) = %d, want %d", bh, got, want)
		}
	}
	withLens := good
	withLens.QLens, withLens.KLens = []int{3}, []int{0}
	if err := withLens.Validate(); err != nil {
		t.Errorf("lengths 3 and 0 of Nq = 3, Nk = 4: %v", err)
	}
	if !good.Equal(good) || good.Equal(Params{}) || (Params{}).Equal(Params{ALiBi: []float64{}}) ||
		good.Equal(withLens) || (Params{}).Equal(Params{KLens: []int{}}) {
		t.Error("Equal does not tell Params apart")
	}
}

// TestBias covers the bias's shape checks, which slice each head reads,
// and that Equal and IsPlain see it.
func TestBias(t *testing.T) {
	good := Params{B: 2, H: 3, Nq: 4, Nk: 5, D: 8, Scale: 0.5}
	n := 4 * 5
	for _, s := range [][2]int{{2, 3}, {1, 3}, {2, 1}, {1, 1}} {
		p := good
		p.Bias = &Bias{Bb: s[0], Hb: s[1], Data32: make([]float32, s[0]*s[1]*n), Grad64: make([]float64, s[0]*s[1]*n)}
		if err := p.Validate(); err != nil {
			t.Errorf("bias %v: %v", s, err)
		}
		if p.IsPlain() {
			t.Errorf("bias %v: IsPlain", s)
		}
		// Head (b, h) reads slice (b or 0, h or 0).
		for bh := range p.B * p.H {
			b, h := bh/p.H, bh%p.H
			want := (min(b, s[0]-1)*s[1] + min(h, s[1]-1)) * n
			if got := p.BiasOffset(bh); got != want {
				t.Errorf("bias %v: BiasOffset(%d) = %d, want %d", s, bh, got, want)
			}
		}
		if err := CheckForward(p, make([]float32, p.QLen()), make([]float32, p.KLen()), make([]float32, p.KLen()),
			make([]float32, p.QLen()), make([]float32, p.LSELen())); err != nil {
			t.Errorf("bias %v, float32 call: %v", s, err)
		}
		if err := CheckForward(p, make([]float64, p.QLen()), make([]float64, p.KLen()), make([]float64, p.KLen()),
			make([]float64, p.QLen()), make([]float64, p.LSELen())); !errors.Is(err, ErrInvalidParams) {
			t.Errorf("bias %v without float64 data, float64 call: %v, want ErrInvalidParams", s, err)
		}
	}
	bad := map[string]*Bias{
		"Bb 3 of B 2": {Bb: 3, Hb: 1, Data32: make([]float32, 3*n)},
		"Bb 0":        {Bb: 0, Hb: 1},
		"Hb 2 of H 3": {Bb: 1, Hb: 2, Data32: make([]float32, 2*n)},
		"short data":  {Bb: 1, Hb: 1, Data64: make([]float64, n-1)},
		"long data":   {Bb: 1, Hb: 1, Data32: make([]float32, n+1)},
		"short grad":  {Bb: 1, Hb: 1, Data32: make([]float32, n), Grad32: make([]float32, n-1)},
		"empty data":  {Bb: 1, Hb: 1, Data32: []float32{}},
		"grad of B·H": {Bb: 1, Hb: 1, Data32: make([]float32, n), Grad64: make([]float64, 6*n)},
		"huge":        {Bb: 2, Hb: 3},
	}
	for name, b := range bad {
		p := good
		if name == "huge" {
			p.Nq, p.Nk = 1<<15, 1<<15
		}
		p.Bias = b
		if err := p.Validate(); !errors.Is(err, ErrInvalidParams) {
			t.Errorf("%s: got %v, want an error wrapping ErrInvalidParams", name, err)
		}
	}
	with := func(b Bias) Params { p := good; p.Bias = &b; return p }
	data := []float32{1, float32(math.NaN()), 3}
	a := with(Bias{Bb: 1, Hb: 1, Data32: data})
	if !a.Equal(with(Bias{Bb: 1, Hb: 1, Data32: []float32{1, float32(math.NaN()), 3}, Grad32: make([]float32, 3)})) {
		t.Error("Equal: the same bias data elsewhere, NaN included, with a gradient slice, is not equal")
	}
	for name, o := range map[string]Params{
		"no bias":     good,
		"other shape": with(Bias{Bb: 1, Hb: 3, Data32: data}),
		"other data":  with(Bias{Bb: 1, Hb: 1, Data32: []float32{1, 2, 3}}),
		"float64":     with(Bias{Bb: 1, Hb: 1, Data32: data, Data64: []float64{1, 2, 3}}),
	} {
		if a.Equal(o) || o.Equal(a) {
			t.Errorf("Equal: a bias equals %s", name)
		}
	}
}
