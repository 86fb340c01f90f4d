package kernels

import (
	"errors"
	"fmt"
	"math"
)

// Params describes one attention problem. The zero Scale is not special:
// callers resolve the default 1/√D before building Params.
type Params struct {
	B, H   int // batch size and number of heads
	Nq, Nk int // query and key sequence lengths
	D      int // head dimension, shared by queries, keys and values
	Scale  float64
	Causal bool
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
	for _, t := range []struct {
		name string
		rows int
	}{{"q", p.Nq}, {"k", p.Nk}} {
		if n := float64(p.B) * float64(p.H) * float64(t.rows) * float64(p.D); n > MaxElements {
			return fmt.Errorf("%w: %s has %.0f elements, more than the supported %d", ErrInvalidParams, t.name, n, MaxElements)
		}
	}
	return nil
}

// QLen is the number of elements of q, o, dq and do.
func (p Params) QLen() int { return p.B * p.H * p.Nq * p.D }

// KLen is the number of elements of k, v, dk and dv.
func (p Params) KLen() int { return p.B * p.H * p.Nk * p.D }

// LSELen is the number of elements of lse.
func (p Params) LSELen() int { return p.B * p.H * p.Nq }

// VisibleKeys returns how many keys query row i sees: keys 0 … n−1. It is Nk
// without a causal mask and may be 0 for the leading rows when Nq > Nk.
func (p Params) VisibleKeys(i int) int {
	if !p.Causal {
		return p.Nk
	}
	return min(p.Nk, max(0, i+p.Nk-p.Nq+1))
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
			return fmt.Errorf("%w: lse has %d elements, want %d", ErrInvalidParams, n, p.LSELen())
		}
	}
	return nil
}

// CheckForward validates p and the slice lengths of a forward call.
func CheckForward[T Float](p Params, q, k, v, o, lse []T) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return p.checkLens([]int{len(q), len(o)}, []int{len(k), len(v)}, []int{len(lse)})
}

// CheckBackward validates p and the slice lengths of a backward call.
func CheckBackward[T Float](p Params, q, k, v, o, lse, do, dq, dk, dv []T) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return p.checkLens([]int{len(q), len(o), len(do), len(dq)}, []int{len(k), len(v), len(dk), len(dv)}, []int{len(lse)})
}
