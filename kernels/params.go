package kernels

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Params describes one attention problem. The zero Scale is not special:
// callers resolve the default 1/√D before building Params.
//
// The variant fields are chosen so that their zero values mean plain
// attention: Hkv 0 is H (one key head per query head), a zero Window is
// off, Softcap 0 is off, and nil ALiBi, lengths and Bias are off. The
// package documentation (Variants) gives their exact semantics.
type Params struct {
	B, H   int // batch size and number of query heads
	Nq, Nk int // query and key sequence lengths
	D      int // head dimension, shared by queries, keys and values
	Scale  float64
	Causal bool

	// Hkv is the number of key and value heads (grouped-query attention):
	// query head h reads key head h / (H/Hkv). It must divide H; 0 means H.
	Hkv int
	// Window limits each row to the keys near its aligned position.
	Window Window
	// Softcap, when not 0, replaces each score s by Softcap·tanh(s/Softcap)
	// after the scale. It must be finite and not negative.
	Softcap float64
	// ALiBi, when not nil, holds one slope per query head: the score of row
	// i and key j is lowered by ALiBi[h]·|a − j| after the softcap. The
	// slice is read, never written; Params sharing it must not change it.
	ALiBi []float64
	// QLens and KLens, when not nil, hold one length per batch entry: rows
	// i ≥ QLens[b] and keys j ≥ KLens[b] of entry b are padding, each in
	// [0, Nq] and [0, Nk]. nil means every row (key) is real. The masks
	// align each entry on its own lengths (Mask). Read, never written.
	QLens, KLens []int
	// Dropout, when On, drops each attention probability P_ij with
	// probability Dropout.P and scales the kept ones by 1/(1−P), drawing
	// its mask from (Seed, Offset, b·H+h, i, j) (see Dropout).
	Dropout Dropout
	// Bias, when not nil, is an additive bias [Bb, Hb, Nq, Nk] on the
	// scores, after ALiBi and before the masks; Backward writes its
	// gradient into Bias's Grad of the call's element type, when not nil
	// (see Bias). It is a pointer so that Params stays small to copy and
	// nil is off.
	Bias *Bias
	// Pages, when not nil, says that k and v are page pools read through
	// block tables (see Pages); nil is the dense [B, Hkv, Nk, D]. Only
	// forwards take it.
	Pages *Pages
}

// Window is a local attention window: with On, row i sees keys j with
// a − Left ≤ j ≤ a + Right, a = i + Nk − Nq. A bound of −1 leaves that side
// unbounded; smaller values are invalid. Its zero value is off, so that
// Window{On: true} (0, 0) is the diagonal alone, not "no window".
type Window struct {
	On          bool
	Left, Right int
}

// Equal reports whether p and o describe the same problem. Params holds
// slices (ALiBi, lengths, the bias), so it cannot be compared with ==. Two
// biases are equal when their shapes and data are (NaN matching NaN),
// wherever the data lives; their gradient slices, outputs, are not
// compared.
func (p Params) Equal(o Params) bool {
	return p.B == o.B && p.H == o.H && p.Nq == o.Nq && p.Nk == o.Nk && p.D == o.D &&
		p.Scale == o.Scale && p.Causal == o.Causal && p.Hkv == o.Hkv && p.Window == o.Window &&
		p.Softcap == o.Softcap && sameSlice(p.ALiBi, o.ALiBi) && sameSlice(p.QLens, o.QLens) && sameSlice(p.KLens, o.KLens) &&
		p.Dropout == o.Dropout && sameBias(p.Bias, o.Bias) && samePages(p.Pages, o.Pages)
}

// samePages reports whether a and b are both nil or describe the same
// pool and block tables.
func samePages(a, b *Pages) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Size == b.Size && a.Count == b.Count && slices.EqualFunc(a.Table, b.Table, sameSlice[int])
}

// sameSlice is slices.Equal that also tells nil (off) from empty.
func sameSlice[E comparable](a, b []E) bool {
	return (a == nil) == (b == nil) && slices.Equal(a, b)
}

// KVHeads is the number of key and value heads: Hkv, or H when Hkv is 0.
func (p Params) KVHeads() int {
	if p.Hkv == 0 {
		return p.H
	}
	return p.Hkv
}

// KVHead returns the index, among the B·KVHeads() key heads, of the key
// head that query head bh (among the B·H) reads.
func (p Params) KVHead(bh int) int {
	hkv := p.KVHeads()
	return bh/p.H*hkv + bh%p.H/(p.H/hkv)
}

// IsPlain reports whether p uses none of the variants (grouped heads,
// window, softcap, ALiBi, lengths, dropout, bias, pages): the problem
// every backend computes.
func (p Params) IsPlain() bool {
	return p.KVHeads() == p.H && !p.Window.On && p.Softcap == 0 && p.ALiBi == nil && p.QLens == nil && p.KLens == nil &&
		!p.Dropout.On() && p.Bias == nil && p.Pages == nil
}

// MaxElements bounds every tensor a backend touches so that index arithmetic
// in int32 (GPU kernels) and int (CPU) can never overflow.
const MaxElements = math.MaxInt32

// ErrInvalidParams is wrapped by every error Validate returns.
var ErrInvalidParams = errors.New("invalid attention parameters")

// ErrOutOfMemory is wrapped by the errors a backend returns when the memory
// a call needs (host or device) cannot be had. The call then has written
// nothing, and the process goes on.
var ErrOutOfMemory = errors.New("out of memory")

// Validate reports the first problem that makes p unusable.
func (p Params) Validate() error {
	dims := []struct {
		name string
		n    int
	}{{"B", p.B}, {"H", p.H}, {"Nq", p.Nq}, {"Nk", p.Nk}, {"D", p.D}}
	for _, d := range dims {
		if d.n < 1 {
			return fmt.Errorf("%w: %s = %d, must be at least 1", ErrInvalidParams, d.name, d.n)
		}
	}
	if math.IsNaN(p.Scale) || math.IsInf(p.Scale, 0) {
		return fmt.Errorf("%w: scale = %v, must be finite", ErrInvalidParams, p.Scale)
	}
	if err := p.validateVariants(); err != nil {
		return err
	}
	for _, t := range []struct {
		name        string
		heads, rows int
	}{{"q", p.H, p.Nq}, {"k", p.KVHeads(), p.Nk}} {
		if t.name == "k" && p.Pages != nil {
			continue // the pool's size is checked with the pages
		}
		if n := float64(p.B) * float64(t.heads) * float64(t.rows) * float64(p.D); n > MaxElements {
			return fmt.Errorf("%w: %s has %.0f elements, more than the supported %d", ErrInvalidParams, t.name, n, MaxElements)
		}
	}
	return nil
}

// validateVariants checks the variant fields.
func (p Params) validateVariants() error {
	if p.Hkv < 0 || p.KVHeads() > p.H || p.H%p.KVHeads() != 0 {
		return fmt.Errorf("%w: Hkv = %d key heads must divide H = %d query heads", ErrInvalidParams, p.Hkv, p.H)
	}
	if p.Window.On && (p.Window.Left < -1 || p.Window.Right < -1) {
		return fmt.Errorf("%w: window (%d, %d): each bound must be −1 (unbounded) or at least 0", ErrInvalidParams, p.Window.Left, p.Window.Right)
	}
	if !p.Window.On && (p.Window.Left != 0 || p.Window.Right != 0) {
		return fmt.Errorf("%w: window bounds (%d, %d) set but the window is off", ErrInvalidParams, p.Window.Left, p.Window.Right)
	}
	if math.IsNaN(p.Softcap) || math.IsInf(p.Softcap, 0) || p.Softcap < 0 {
		return fmt.Errorf("%w: softcap = %v, must be finite and not negative (0 is off)", ErrInvalidParams, p.Softcap)
	}
	for _, l := range []struct {
		name string
		lens []int
		n    int
	}{{"QLens", p.QLens, p.Nq}, {"KLens", p.KLens, p.Nk}} {
		if l.lens == nil {
			continue
		}
		if len(l.lens) != p.B {
			return fmt.Errorf("%w: %d %s for B = %d batch entries", ErrInvalidParams, len(l.lens), l.name, p.B)
		}
		for b, n := range l.lens {
			if n < 0 || n > l.n {
				return fmt.Errorf("%w: %s[%d] = %d, must be in [0, %d]", ErrInvalidParams, l.name, b, n, l.n)
			}
		}
	}
	if err := p.Dropout.Validate(); err != nil {
		return err
	}
	if err := p.validateBias(); err != nil {
		return err
	}
	if err := p.validatePages(); err != nil {
		return err
	}
	if p.ALiBi != nil {
		if len(p.ALiBi) != p.H {
			return fmt.Errorf("%w: %d ALiBi slopes for H = %d query heads", ErrInvalidParams, len(p.ALiBi), p.H)
		}
		for h, m := range p.ALiBi {
			if math.IsNaN(m) || math.IsInf(m, 0) {
				return fmt.Errorf("%w: ALiBi slope %d is %v, must be finite", ErrInvalidParams, h, m)
			}
		}
	}
	return nil
}

// QLen is the number of elements of q, o, dq and do.
func (p Params) QLen() int { return p.B * p.H * p.Nq * p.D }

// KLen is the number of elements of k, v, dk and dv: B·KVHeads()·Nk·D,
// or with Pages the pool's Count·KVHeads()·Size·D.
func (p Params) KLen() int {
	if p.Pages != nil {
		return p.Pages.Count * p.KVHeads() * p.Pages.Size * p.D
	}
	return p.B * p.KVHeads() * p.Nk * p.D
}

// LSELen is the number of elements of lse.
func (p Params) LSELen() int { return p.B * p.H * p.Nq }

// Mask is what the masks of Params leave visible in batch entry b: its
// real rows and keys, and the causal mask and window aligned on them. Row i
// has the aligned position a = i + Lk − Lq (bottom-right, as FlashAttention
// aligns the causal mask), from which the window and ALiBi are measured.
// Every backend asks it once per batch entry (or per work unit), not per
// row.
type Mask struct {
	Lq, Lk int // real rows and keys: QLens[b] and KLens[b], or Nq and Nk
	shift  int // Lk − Lq: row i's aligned position is i + shift
	// How far before and after its aligned position a row sees, −1 when
	// unbounded: the window's, narrowed on the right by the causal mask.
	left, right int
}

// Mask returns batch entry b's Mask.
func (p Params) Mask(b int) Mask {
	m := Mask{Lq: p.Nq, Lk: p.Nk, left: -1, right: -1}
	if p.QLens != nil {
		m.Lq = p.QLens[b]
	}
	if p.KLens != nil {
		m.Lk = p.KLens[b]
	}
	m.shift = m.Lk - m.Lq
	if p.Window.On {
		m.left, m.right = p.Window.Left, p.Window.Right
	}
	if p.Causal {
		m.right = 0 // the window's right bound is never negative here but −1
	}
	return m
}

// Aligned returns row i's aligned position a = i + Lk − Lq.
func (m Mask) Aligned(i int) int { return i + m.shift }

// Full reports whether every row of [0, Nq) sees every key of [0, Nk): no
// mask and no padding reaches the entry.
func (m Mask) Full(nq, nk int) bool {
	return m.Lq == nq && m.Lk == nk && m.left < 0 && m.right < 0
}

// KeyRange returns the keys query row i sees: every j with lo ≤ j < hi,
// and no other. Every mask leaves a row a contiguous range, so that a
// backend can skip the key blocks outside it. Both lo and hi are
// non-decreasing in i; lo == hi when the row sees no key, as padding rows
// (i ≥ Lq) do, which get lo = hi = Lk to keep the order.
func (m Mask) KeyRange(i int) (lo, hi int) {
	if i >= m.Lq {
		return m.Lk, m.Lk
	}
	a := i + m.shift
	lo, hi = 0, m.Lk
	if m.left >= 0 {
		lo = min(m.Lk, max(0, a-m.left))
	}
	if m.right >= 0 {
		hi = max(lo, min(m.Lk, a+m.right+1))
	}
	return lo, hi
}

// VisibleKeys returns how many keys query row i sees, hi − lo of KeyRange.
// It may be 0: for padding rows, for the leading rows of a causal mask when
// Lq > Lk, or for rows whose window lies outside [0, Lk).
func (m Mask) VisibleKeys(i int) int {
	lo, hi := m.KeyRange(i)
	return hi - lo
}

// QueryRange returns the query rows that see key j: every i with lo ≤ i <
// hi. It is KeyRange seen from the key side, and contiguous for the same
// reason; both bounds are non-decreasing in j, and padding keys (j ≥ Lk)
// get lo = hi = Lq.
func (m Mask) QueryRange(j int) (lo, hi int) {
	if j >= m.Lk {
		return m.Lq, m.Lq
	}
	lo, hi = 0, m.Lq
	if m.right >= 0 {
		lo = min(m.Lq, max(0, j-m.right-m.shift))
	}
	if m.left >= 0 {
		hi = max(lo, min(m.Lq, j+m.left-m.shift+1))
	}
	return lo, hi
}

// ModifyScore applies the softcap, ALiBi and bias of p to the scaled score
// s of query row i of head bh (of the B·H) and key j, in the order of the
// package documentation, and returns the new score with its derivative with
// respect to s (the softcap's 1 − tanh², or 1). It reads the bias data of
// the element type T. It is the references' form, one score at a time.
func ModifyScore[T Float](p Params, bh, i, j int, s T) (score, grad T) {
	grad = 1
	if c := T(p.Softcap); c != 0 {
		t := T(math.Tanh(float64(s / c)))
		s, grad = c*t, 1-t*t
	}
	if p.ALiBi != nil {
		s -= T(p.ALiBi[bh%p.H]) * T(abs(p.Mask(bh/p.H).Aligned(i)-j))
	}
	if p.Bias != nil {
		s += BiasData[T](p.Bias)[p.BiasOffset(bh)+i*p.Nk+j]
	}
	return s, grad
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// ForwardFLOPs counts 4·B·H·Nq·Nk·D, halved under a causal mask, the usual
// convention for attention throughput (the exact masked count differs when
// Nq ≠ Nk, but published figures use this one).
func (p Params) ForwardFLOPs() float64 {
	f := 4 * float64(p.B) * float64(p.H) * float64(p.Nq) * float64(p.Nk) * float64(p.D)
	if p.Causal {
		f /= 2
	}
	return f
}

// VisibleFLOPs counts 4·D multiply-adds per (row, visible key) pair over
// all B·H heads: the forward's work on what the masks leave, for comparing
// the throughput of masked variants with that of plain attention.
func (p Params) VisibleFLOPs() float64 {
	var pairs float64
	for b := range p.B {
		m := p.Mask(b)
		for i := range m.Lq {
			pairs += float64(m.VisibleKeys(i))
		}
	}
	return 4 * float64(p.H) * pairs * float64(p.D)
}

// BackwardFLOPs counts 2.5× the forward, the FlashAttention convention.
func (p Params) BackwardFLOPs() float64 { return 2.5 * p.ForwardFLOPs() }

// checkLens verifies slice lengths for a backend entry point.
func (p Params) checkLens(qLike, kLike, lseLike []int) error {
	for _, n := range qLike {
		if n != p.QLen() {
			return fmt.Errorf("%w: a [B,H,Nq,D] slice has %d elements, want %d", ErrInvalidParams, n, p.QLen())
		}
	}
	for _, n := range kLike {
		if n != p.KLen() {
			return fmt.Errorf("%w: a [B,H,Nk,D] slice has %d elements, want %d", ErrInvalidParams, n, p.KLen())
		}
	}
	for _, n := range lseLike {
		if n != p.LSELen() {
			return fmt.Errorf("%w: lse (or dlse) has %d elements, want %d", ErrInvalidParams, n, p.LSELen())
		}
	}
	return nil
}

// CheckForward validates p and the slice lengths of a forward call, and
// that a bias has data of the element type T.
func CheckForward[T Float](p Params, q, k, v, o, lse []T) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if err := checkBias[T](p); err != nil {
		return err
	}
	return p.checkLens([]int{len(q), len(o)}, []int{len(k), len(v)}, []int{len(lse)})
}

// CheckBackward validates p and the slice lengths of a backward call, and
// that a bias has data of the element type T; dlse may be nil (no gradient
// reaches the LSE), and so may the bias's gradient.
func CheckBackward[T Float](p Params, q, k, v, o, lse, do, dlse, dq, dk, dv []T) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.Pages != nil {
		return fmt.Errorf("%w: a backward of paged keys: pages serve inference, forward only", ErrInvalidParams)
	}
	if err := checkBias[T](p); err != nil {
		return err
	}
	lseLike := []int{len(lse)}
	if dlse != nil {
		lseLike = append(lseLike, len(dlse))
	}
	return p.checkLens([]int{len(q), len(o), len(do), len(dq)}, []int{len(k), len(v), len(dk), len(dv)}, lseLike)
}
