package op_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// lseCases are AttentionLSE graphs: plain, with every variant and lengths
// (padding rows have LSE +Inf), with a bias too, with dropout (the LSE is
// the undropped softmax's), and one whose loss uses only the LSE.
func lseCases(t testing.TB) []struct {
	vc      variantCase
	lseOnly bool
} {
	pick := func(name string) variantCase { return pickVariant(t, name) }
	return []struct {
		vc      variantCase
		lseOnly bool
	}{
		{variantCase{name: "plain", c: graphCase{2, 2, 17, 23, 8, true}}, false},
		{pick("all+lengths"), false},
		{pick("bias+all+lengths"), false},
		{pick("dropout+GQA+causal+lengths"), false},
		{variantCase{name: "LSE only", c: graphCase{1, 2, 20, 20, 8, false}}, true},
	}
}

// TestAttentionLSEMatchesReference runs AttentionLSE graphs whose loss is
// sum(O∘w) + sum(LSE∘u), on both machines and in both dtypes: O and LSE
// must be the reference forward's, and the gradients the reference
// backward's with dLSE = u.
func TestAttentionLSEMatchesReference(t *testing.T) {
	for i, lc := range lseCases(t) {
		vc := lc.vc
		p := vc.params()
		in := randomInputs(p, uint64(700+i))
		in.u = normals(rand.New(rand.NewPCG(uint64(800+i), 3)), p.LSELen())
		if lc.lseOnly {
			clear(in.w)
		}
		o, lse, grads := naiveReference(t, p, in)
		for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
			tol := 1e-10
			if dt == tensor.Float32 {
				tol = 1e-4
			}
			for _, lisp := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%v/lisp=%v", vc.name, dt, lisp), func(t *testing.T) {
					gr := vc.build(t, dt, in)
					got := gr.run(t, lisp)
					gotLSE := asFloat64s(t, gr.lse.Value())
					if s := gr.lse.Shape(); !s.Eq(tensor.Shape{p.B, p.H, p.Nq}) {
						t.Fatalf("LSE has shape %v, want [%d %d %d]", s, p.B, p.H, p.Nq)
					}
					if len(got) != 1+len(grads) {
						t.Fatalf("%d results, want %d", len(got), 1+len(grads))
					}
					type output struct {
						name      string
						got, want []float64
					}
					cs := []output{{"O", got[0], o}, {"LSE", gotLSE, lse}, {"dQ", got[1], grads[0]}, {"dK", got[2], grads[1]}, {"dV", got[3], grads[2]}}
					if len(grads) == 4 {
						cs = append(cs, output{"dBias", got[4], grads[3]})
					}
					for j, c := range cs {
						if len(c.got) != len(c.want) {
							t.Fatalf("%s has %d elements, want %d", c.name, len(c.got), len(c.want))
						}
						finite := slices.DeleteFunc(slices.Clone(c.want), func(x float64) bool { return math.IsInf(x, 0) })
						scale := max(1, slices.Max(absAll(finite)))
						for e, w := range c.want {
							if math.IsInf(w, 0) {
								if c.got[e] != w {
									t.Fatalf("%s[%d] = %v, want %v", c.name, e, c.got[e], w)
								}
								continue
							}
							if d := math.Abs(c.got[e] - w); !(d <= tol*scale) {
								t.Fatalf("output %d %s[%d] = %v, want %v (diff %.3g)", j, c.name, e, c.got[e], w, d)
							}
						}
					}
				})
			}
		}
	}
}

// TestAttentionLSEFiniteDifferences checks the gradients of a float64 loss
// of both outputs against finite differences, on both machines.
func TestAttentionLSEFiniteDifferences(t *testing.T) {
	vc := variantCase{c: graphCase{2, 4, 7, 9, 4, false}, hkv: 2,
		opts: []op.Option{op.WithSoftcap(1.5), op.WithALiBi(slopes4)},
		set:  func(p *kernels.Params) { p.Softcap, p.ALiBi = 1.5, slopes4 }}
	p := vc.params()
	in := randomInputs(p, 31)
	in.u = normals(rand.New(rand.NewPCG(32, 3)), p.LSELen())
	for _, lisp := range []bool{false, true} {
		t.Run(fmt.Sprintf("lisp=%v", lisp), func(t *testing.T) {
			vc.build(t, tensor.Float64, in).checkGradients(t, lisp)
		})
	}
}

// TestAttentionLSEBadInput requires AttentionLSE to refuse what Attention
// refuses, with no nodes.
func TestAttentionLSEBadInput(t *testing.T) {
	g := gorgonia.NewGraph()
	q := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 4, 5, 8))
	k3 := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 3, 7, 8))
	if o, lse, err := op.AttentionLSE(q, k3, k3); o != nil || lse != nil || err == nil {
		t.Errorf("3 key heads of 4: got %v, %v, %v; want an error", o, lse, err)
	}
}

func normals(rng *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	return x
}
