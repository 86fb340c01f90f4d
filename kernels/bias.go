package kernels

import "fmt"

// Bias is an additive attention bias of shape [Bb, Hb, Nq, Nk], dense and
// row-major, with Bb either 1 or B and Hb either 1 or H: a dimension of
// size 1 is broadcast, so that query head h of batch entry b reads slice
// (b if Bb = B else 0, h if Hb = H else 0). The score of row i and key j
// gains bias[·, ·, i, j] after the softcap and ALiBi, before the masks
// (package documentation, Variants).
//
// The bias is the only Nq×Nk object of the problem, and the caller's: a
// CPU backend reads it where it is and never copies it whole (tiles of it
// at most); a device backend copies it to the device once per call. The entry of a masked (row, key) pair never reaches a result,
// whatever it holds, NaN included: a masked key stays masked. A −Inf entry
// removes its key from its row.
//
// A call reads the data of its own element type (Data32 in Forward32 and
// Backward32, Data64 in the 64-bit entry points), which must then be there;
// the other may be nil. Backward writes dBias, the gradient of the loss
// with respect to the bias, into the Grad of its element type when that is
// not nil (nil: nobody needs it): dS = P∘(dP − D) of every visible pair,
// summed over the query heads that share a slice (the broadcast
// dimensions), and 0 for the pairs no such head sees (masked, padding).
// Grad is overwritten, never accumulated into, and must not overlap any
// other argument. Data is read, never written; Params sharing a Bias must
// not change it.
type Bias struct {
	Bb, Hb int // 1 (broadcast) or B; 1 (broadcast) or H
	Data32 []float32
	Data64 []float64
	Grad32 []float32
	Grad64 []float64
}

// BiasLen is the number of elements of the bias, Bb·Hb·Nq·Nk; 0 without a
// bias.
func (p Params) BiasLen() int {
	if p.Bias == nil {
		return 0
	}
	return p.Bias.Bb * p.Bias.Hb * p.Nq * p.Nk
}

// BiasOffset returns where, in the bias and its gradient, the Nq×Nk slice
// that query head bh (of the B·H) reads begins. p.Bias must not be nil.
func (p Params) BiasOffset(bh int) int {
	b, h := bh/p.H, bh%p.H
	if p.Bias.Bb == 1 {
		b = 0
	}
	if p.Bias.Hb == 1 {
		h = 0
	}
	return (b*p.Bias.Hb + h) * p.Nq * p.Nk
}

// BiasData returns the bias data of the element type T (nil when there is
// no bias, or none of that type).
func BiasData[T Float](b *Bias) []T {
	if b == nil {
		return nil
	}
	var zero T
	if _, ok := any(zero).(float32); ok {
		return any(b.Data32).([]T)
	}
	return any(b.Data64).([]T)
}

// BiasGrad returns the gradient slice of the element type T (nil when there
// is no bias, or no gradient of that type is wanted).
func BiasGrad[T Float](b *Bias) []T {
	if b == nil {
		return nil
	}
	var zero T
	if _, ok := any(zero).(float32); ok {
		return any(b.Grad32).([]T)
	}
	return any(b.Grad64).([]T)
}

// validateBias checks the bias's shape and the lengths of the slices it
// holds; which of them a call needs is checkBias's business.
func (p Params) validateBias() error {
	b := p.Bias
	if b == nil {
		return nil
	}
	if b.Bb != 1 && b.Bb != p.B {
		return fmt.Errorf("%w: bias batch dimension Bb = %d, must be 1 (broadcast) or B = %d", ErrInvalidParams, b.Bb, p.B)
	}
	if b.Hb != 1 && b.Hb != p.H {
		return fmt.Errorf("%w: bias head dimension Hb = %d, must be 1 (broadcast) or H = %d", ErrInvalidParams, b.Hb, p.H)
	}
	if n := float64(b.Bb) * float64(b.Hb) * float64(p.Nq) * float64(p.Nk); n > MaxElements {
		return fmt.Errorf("%w: the bias has %.0f elements, more than the supported %d", ErrInvalidParams, n, MaxElements)
	}
	want := p.BiasLen()
	for _, s := range []struct {
		name string
		n    int
		set  bool
	}{
		{"bias Data32", len(b.Data32), b.Data32 != nil}, {"bias Data64", len(b.Data64), b.Data64 != nil},
		{"bias Grad32", len(b.Grad32), b.Grad32 != nil}, {"bias Grad64", len(b.Grad64), b.Grad64 != nil},
	} {
		if s.set && s.n != want {
			return fmt.Errorf("%w: %s has %d elements, want Bb·Hb·Nq·Nk = %d·%d·%d·%d = %d",
				ErrInvalidParams, s.name, s.n, b.Bb, b.Hb, p.Nq, p.Nk, want)
		}
	}
	return nil
}

// checkBias requires the bias data of the call's element type T, when p
// has a bias.
func checkBias[T Float](p Params) error {
	if p.Bias != nil && BiasData[T](p.Bias) == nil {
		var zero T
		return fmt.Errorf("%w: a bias without data of the call's element type %T", ErrInvalidParams, zero)
	}
	return nil
}

// sameValues reports whether a and b hold the same numbers, NaN matching NaN,
// and are both nil or both not.
func sameValues[T Float](a, b []T) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for i, x := range a {
		if x != b[i] && (x == x || b[i] == b[i]) {
			return false
		}
	}
	return true
}

// sameBias reports whether two biases (either nil) are the same problem's:
// shape and data, not the gradient slices, which are outputs.
func sameBias(a, b *Bias) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Bb == b.Bb && a.Hb == b.Hb && sameValues(a.Data32, b.Data32) && sameValues(a.Data64, b.Data64)
}
