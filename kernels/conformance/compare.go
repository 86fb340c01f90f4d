package conformance

import (
	"fmt"
	"math"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// maxAbs is the largest finite magnitude in x, skipping NaN and ±Inf.
func maxAbs[T kernels.Float](x []T) float64 {
	var m float64
	for _, xi := range x {
		if a := math.Abs(float64(xi)); !math.IsInf(a, 0) && !math.IsNaN(a) {
			m = max(m, a)
		}
	}
	return m
}

// maxAbsErr is max|got − want| with its index. Where want is not finite (a
// row that sees no key has LSE +Inf; NaN and ±Inf inputs give NaN and ±Inf
// outputs) got must not be finite either: NaN where want is NaN, the same
// infinity or NaN where it is infinite (how far an infinity survives
// before meeting another, as in ∞ − ∞ inside a tile, depends on the order
// of operations). That pattern does not depend on the precision, so every
// mode is held to it; a mismatch is an infinite error. A NaN where want is
// finite is an infinite error too, unless leak accepts it (see
// MaskedNaNMayPropagate).
func maxAbsErr[T kernels.Float](got []T, want []float64, leak bool) (float64, int) {
	worst, at := 0.0, 0
	for i, w := range want {
		g := float64(got[i])
		var e float64
		switch {
		case math.IsNaN(w):
			if !math.IsNaN(g) {
				e = math.Inf(1)
			}
		case math.IsInf(w, 0):
			if g != w && !math.IsNaN(g) {
				e = math.Inf(1)
			}
		case math.IsNaN(g):
			if !leak {
				e = math.Inf(1)
			}
		case math.IsInf(g, 0):
			e = math.Inf(1)
		default:
			e = math.Abs(g - w)
		}
		if e > worst || (math.IsInf(e, 1) && !math.IsInf(worst, 1)) {
			worst, at = e, i
		}
	}
	return worst, at
}

// finiteErr is max|got − want| over the elements where both are finite: the
// error of a naive baseline, whose pattern of NaN and ±Inf sets no bound
// (the backend's pattern is checked against the reference itself).
func finiteErr[T kernels.Float](got []T, want []float64) float64 {
	var worst float64
	for i, w := range want {
		if e := math.Abs(float64(got[i]) - w); !math.IsNaN(e) && !math.IsInf(e, 0) {
			worst = max(worst, e)
		}
	}
	return worst
}

// tensorCheck is one output tensor to compare against the float64 reference.
type tensorCheck[T kernels.Float] struct {
	name string
	got  []T
	want []float64
	// floor is the size of the rounding error that computing this tensor
	// cannot avoid, in units of the rounding unit u (see roundingFloor).
	floor float64
}

// checks lists the five outputs of a forward+backward pass, and dBias with
// a bias, each with its rounding floor.
//
// The floor follows the usual probabilistic bound for a sum of n rounded
// terms of magnitude at most M: about √n·u·M (Higham, Accuracy and Stability
// of Numerical Algorithms, §2.8). The backward's dS = P∘(dP − D) subtracts
// two dot products of length D, so its error is about √D·u·|dO|·|V| even
// where dS is exactly 0: with a single visible key, softmax is constant and
// dQ and dK vanish, yet any summation order other than the naive one leaves
// this residue. dQ sums such terms against K with weights P that add up to 1
// along a row; dK sums them against Q with weights that add up to the
// column mass c = max_j Σ_i P_ij, so its residues grow like √c. The scores
// S = scale·Q·Kᵀ are themselves dot products of length D, so LSE carries
// about √D·u·|scale|·|Q|·|K| on top of the rounding of its own value.
//
// Tensor cores (the TF32, BF16 and FP16 modes) add the products of a dot
// product in an order of their own with an fp32 accumulator that does not
// round to nearest at every step, so the errors of their sums do not
// cancel like random roundings: for those precisions a dot product of
// length D gets the worst-case bound D·u (Higham's γ_D) instead of √D·u.
// This matters only where a result cancels to about 0: dQ and dK of rows
// that see one key, where dP − D is a difference of two dot products of
// the same numbers summed by different hardware.
//
// dBias is dS itself, without the scale, summed over the n = B·H/(Bb·Hb)
// query heads that share a slice: its residue is that of dS, about
// √D·u·|dO|·|V| per head, and the sum of n such independent errors grows
// like √n.
func checks[T kernels.Float](p kernels.Params, tensorCores bool, got result[T], want result[float64], q, k, v, do []float64) []tensorCheck[T] {
	dot := math.Sqrt(float64(p.D)) // error growth of one dot product, in rounding units
	if tensorCores {
		dot = float64(p.D)
	}
	dS := dot * math.Abs(p.Scale) * maxAbs(do) * maxAbs(v)
	mass := math.Sqrt(want.mass)
	scores := dot * math.Abs(p.Scale) * maxAbs(q) * maxAbs(k)
	cs := []tensorCheck[T]{
		{"O", got.o, want.o, maxAbs(v)},
		{"LSE", got.lse, want.lse, maxAbs(want.lse) + scores},
		{"dQ", got.dq, want.dq, dS * maxAbs(k)},
		{"dK", got.dk, want.dk, dS * maxAbs(q) * mass},
		{"dV", got.dv, want.dv, maxAbs(do) * mass},
	}
	if p.Bias != nil {
		shared := float64(p.B*p.H) / float64(p.Bias.Bb*p.Bias.Hb)
		cs = append(cs, tensorCheck[T]{"dBias", got.dbias, want.dbias, dot * maxAbs(do) * maxAbs(v) * math.Sqrt(shared)})
	}
	return cs
}

// columnMass is the largest Σ_i P_ij over the keys j of every head, with P
// recomputed in float64 from the reference LSE.
func columnMass(p kernels.Params, q, k, lse []float64) float64 {
	var most float64
	mass := make([]float64, p.Nk)
	// A key head's mass sums over the query heads that read it (dK and dV
	// do too), so heads are visited grouped by key head.
	for kvh := range p.B * p.KVHeads() {
		clear(mass)
		for bh := kvh / p.KVHeads() * p.H; bh < (kvh/p.KVHeads()+1)*p.H; bh++ {
			if p.KVHead(bh) != kvh {
				continue
			}
			addMass(p, bh, q, k[kvh*p.Nk*p.D:], lse, mass)
		}
		for _, m := range mass {
			most = max(most, m)
		}
	}
	return most
}

// addMass adds Σ_i P_ij of query head bh to mass[j]; kh is its key head.
func addMass(p kernels.Params, bh int, q, kh, lse, mass []float64) {
	mask := p.Mask(bh / p.H)
	for i := range p.Nq {
		l := lse[bh*p.Nq+i]
		qi := q[(bh*p.Nq+i)*p.D : (bh*p.Nq+i+1)*p.D]
		lo, hi := mask.KeyRange(i)
		for j := lo; j < hi; j++ {
			kj := kh[j*p.D : (j+1)*p.D]
			var s float64
			for d, x := range qi {
				s += x * kj[d]
			}
			s, _ = kernels.ModifyScore(p, bh, i, j, p.Scale*s)
			// Non-finite P (NaN or ±Inf inputs) is matched by pattern,
			// not by tolerance, and sets no floor.
			if pij := math.Exp(s - l); !math.IsNaN(pij) && !math.IsInf(pij, 0) {
				mass[j] += pij
			}
		}
	}
}

// describe reports where an error occurred as a [b,h,row,col] index.
func describe(name string, p kernels.Params, i int) string {
	var rows, cols int
	switch name {
	case "LSE":
		rows, cols = p.Nq, 1
	case "dK", "dV":
		rows, cols = p.Nk, p.D
	case "dBias":
		rows, cols = p.Nq, p.Nk
	default:
		rows, cols = p.Nq, p.D
	}
	c := i % cols
	i /= cols
	r := i % rows
	i /= rows
	heads := p.H
	switch name {
	case "dK", "dV":
		heads = p.KVHeads()
	case "dBias":
		heads = p.Bias.Hb
	}
	return fmt.Sprintf("%s[b=%d,h=%d,row=%d,col=%d]", name, i/heads, i%heads, r, c)
}
