package cpukernels

import (
	"sync"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// Large per-call buffers (the forward's Kᵀ, the backward's packed query
// sides and dQᵀ partials, each O(N) and sized like an input) are recycled
// from call to call through a sync.Pool per element type. A training loop
// calls the kernels on the same shapes every step; fresh buffers of tens of
// megabytes cost a page fault per 4 KiB on first touch and collections,
// recycled ones neither. The pool keeps nothing alive across collections
// that nothing uses, so memory stays bounded by what calls in flight need.
var (
	pool32 sync.Pool // *[]float32
	pool64 sync.Pool // *[]float64
)

func poolFor[T kernels.Float]() *sync.Pool {
	var zero T
	if _, ok := any(zero).(float32); ok {
		return &pool32
	}
	return &pool64
}

// takeBuffer returns a buffer of n elements whose contents are undefined:
// a recycled one when the pool holds one large enough, else a new one.
// Callers that need zeros clear it.
func takeBuffer[T kernels.Float](n int) []T {
	if b, ok := poolFor[T]().Get().(*[]T); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	return make([]T, n)
}

// giveBuffer hands b back for a later call; nothing may use it afterwards.
func giveBuffer[T kernels.Float](b []T) {
	poolFor[T]().Put(&b)
}
