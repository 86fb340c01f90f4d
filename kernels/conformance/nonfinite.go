package conformance

import (
	"fmt"
	"math"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// nonFiniteCase is a problem with NaN or ±Inf planted in its inputs.
type nonFiniteCase struct {
	name  string
	p     kernels.Params
	plant func(pr problem)
}

// nonFiniteCases exercise the rules of the kernels package doc (Masking
// convention). Each runs causal and not, with 200 queries and keys so
// that rows and keys span several tiles of any backend and causal tiles
// are cut by the mask; head 1 keeps finite inputs where head 0 gets them,
// or gets its own, so that one head's NaN cannot pass for another's.
func nonFiniteCases() []nonFiniteCase {
	base := kernels.Params{B: 1, H: 2, Nq: 200, Nk: 200, D: 32, Scale: 0.2}
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	at := func(p kernels.Params, bh, row, col, rows int) int { return (bh*rows+row)*p.D + col }
	return []nonFiniteCase{{
		// One element of one query row: its scores, O, LSE and dQ are NaN,
		// and NaN spreads into dK and dV of the keys it sees, only.
		name: "nan-query-row",
		p:    base,
		plant: func(pr problem) {
			pr.q[at(pr.p, 0, 150, 3, pr.p.Nq)] = nan
			pr.q[at(pr.p, 1, 10, 0, pr.p.Nq)] = nan
		},
	}, {
		// Head 0: every key NaN (every row NaN). Head 1: one element of key
		// 70, which makes the rows that see it NaN and leaves the others.
		name: "nan-keys",
		p:    base,
		plant: func(pr problem) {
			for j := range pr.p.Nk * pr.p.D {
				pr.k[j] = nan
			}
			pr.k[at(pr.p, 1, 70, 5, pr.p.Nk)] = nan
		},
	}, {
		// Column 0 of head 0's keys is positive, so a query holding −Inf
		// there scores −Inf against every key (O NaN, LSE −Inf) and one
		// holding +Inf scores +Inf (O NaN, LSE +Inf).
		name: "infinite-scores",
		p:    base,
		plant: func(pr problem) {
			for j := range pr.p.Nk {
				i := at(pr.p, 0, j, 0, pr.p.Nk)
				pr.k[i] = float32(math.Abs(float64(pr.k[i]))) + 0.5
			}
			pr.q[at(pr.p, 0, 20, 0, pr.p.Nq)] = -inf
			pr.q[at(pr.p, 0, 120, 0, pr.p.Nq)] = inf
		},
	}, {
		// +Inf in one element of key 90 of head 0: the rows whose query is
		// positive in that column score +Inf against it (O NaN, LSE +Inf),
		// the others −Inf (the key weighs nothing). dV of every other key
		// stays finite, since P = exp(S − ∞) = 0 in the +Inf rows; a
		// kernel whose sum exp(∞ − ∞) makes the LSE NaN gets it NaN.
		name: "infinite-key",
		p:    base,
		plant: func(pr problem) {
			pr.k[at(pr.p, 0, 90, 4, pr.p.Nk)] = inf
		},
	}, {
		// +Inf in one value: column 7 of O is +Inf in every row that sees
		// key 5. The scale keeps every probability far from underflow, so
		// no 0·Inf arises from rounding P to 0 in a low precision.
		name: "infinite-value",
		p:    kernels.Params{B: 1, H: 2, Nq: 200, Nk: 200, D: 32, Scale: 0.05},
		plant: func(pr problem) {
			pr.v[at(pr.p, 0, 5, 7, pr.p.Nk)] = inf
			pr.v[at(pr.p, 1, 150, 2, pr.p.Nk)] = -inf
		},
	}, {
		// Causal with Nq > Nk: rows 0 … 129 see no key. NaN in a key, in a
		// query row that sees keys and in dO of a row that sees none, +Inf
		// in dO of another: the empty rows stay O = 0, LSE = +Inf, dQ = 0
		// and add nothing to dK and dV.
		name: "rows-without-keys",
		p:    kernels.Params{B: 1, H: 2, Nq: 150, Nk: 20, D: 32, Scale: 0.2},
		plant: func(pr problem) {
			pr.k[at(pr.p, 0, 3, 1, pr.p.Nk)] = nan
			pr.q[at(pr.p, 1, 140, 4, pr.p.Nq)] = nan
			pr.do[at(pr.p, 0, 5, 2, pr.p.Nq)] = nan
			pr.do[at(pr.p, 1, 2, 9, pr.p.Nq)] = inf
		},
	}}
}

// testNonFinite runs every non-finite case through both paths: the pattern
// of NaN and ±Inf of O, LSE, dQ, dK and dV must be the float64
// reference's, and finite elements meet the usual tolerances (maxAbsErr
// enforces both). With maskedNaN, NaN is also accepted where the reference
// is finite in the causal cases (MaskedNaNMayPropagate).
func testNonFinite(t *testing.T, b kernels.Backend, prec kernels.Precision, maskedNaN bool) {
	for i, c := range nonFiniteCases() {
		for _, causal := range []bool{false, true} {
			p := c.p
			p.Causal = causal
			if !causal && p.Nq > p.Nk {
				continue // the empty rows exist only under the causal mask
			}
			t.Run(fmt.Sprintf("%s/causal=%v", c.name, causal), func(t *testing.T) {
				t.Parallel()
				pr := randomProblem(p, uint64(500+i))
				pr.leak = maskedNaN && causal
				c.plant(pr)
				checkProblem(t, b, prec, pr)
				checkEmptyRows(t, p, runPass(t, b, p, pr.q, pr.k, pr.v, pr.do, nil), !pr.leak)
				checkEmptyRows(t, p, runPass(t, b, p, widen(pr.q), widen(pr.k), widen(pr.v), widen(pr.do), nil), !pr.leak)
			})
		}
	}
}

// checkEmptyRows requires O = 0 and LSE = +Inf exactly for every row that
// sees no key, whatever the inputs hold, and with grads dQ = 0 too.
func checkEmptyRows[T kernels.Float](t *testing.T, p kernels.Params, r result[T], grads bool) {
	t.Helper()
	for bh := range p.B * p.H {
		mask := p.Mask(bh / p.H)
		for i := range p.Nq {
			if mask.VisibleKeys(i) > 0 {
				continue
			}
			row := (bh*p.Nq + i) * p.D
			for d := range p.D {
				if r.o[row+d] != 0 || (grads && r.dq[row+d] != 0) {
					t.Fatalf("%T: head %d row %d sees no key: O %v, dQ %v, want 0", r.o[0], bh, i, r.o[row+d], r.dq[row+d])
				}
			}
			if l := float64(r.lse[bh*p.Nq+i]); !math.IsInf(l, 1) {
				t.Fatalf("%T: head %d row %d sees no key: LSE %v, want +Inf", r.o[0], bh, i, l)
			}
		}
	}
}
