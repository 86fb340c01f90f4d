package cpukernels

import (
	"math/bits"
	"sync"
	"unsafe"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// Large per-call buffers (the forward's Kᵀ, the backward's packed query
// sides, dQᵀ partials and workers' tiles, the decode's scratch, each O(N)
// or per worker) are recycled from call to call through sync.Pools. A
// training loop calls the kernels on the same shapes every step; fresh
// buffers of tens of megabytes cost a page fault per 4 KiB on first touch
// and collections, recycled ones neither. The pools keep nothing alive
// across collections that nothing uses, so memory stays bounded by what
// calls in flight need.
//
// There is a pool per element type and size class, eight classes per
// power of two (classAbove): a request takes the pool of the class at or
// above its size, at most an eighth more memory than it asked for, so
// that each of a call's buffers finds one of its own size again. With one
// pool for every size a request got whichever buffer Get returned and
// allocated anew when that was too small: the N = 2048 backward, which
// takes buffers of three sizes, allocated 2 MB a call that way (8 MB at D
// = 128; dev, 2026-12-04).
var pools sync.Map // poolKey → *sync.Pool of *[]T

type poolKey struct{ elem, class int }

func poolFor[T kernels.Float](class int) *sync.Pool {
	var zero T
	key := poolKey{int(unsafe.Sizeof(zero)), class}
	if p, ok := pools.Load(key); ok {
		return p.(*sync.Pool)
	}
	p, _ := pools.LoadOrStore(key, new(sync.Pool))
	return p.(*sync.Pool)
}

// minClass is the smallest size class; smaller requests take it.
const minClass = 16

// classAbove is the smallest size class of at least n elements: n rounded
// up to a multiple of 2^(⌊log₂(n−1)⌋ − 3), eight classes per power of two.
func classAbove(n int) int {
	if n <= minClass {
		return minClass
	}
	shift := bits.Len(uint(n-1)) - 4
	return ((n-1)>>shift + 1) << shift
}

// classBelow is the largest size class of at most c elements, 0 below the
// smallest: the pool a buffer of capacity c serves every request of.
func classBelow(c int) int {
	if c < minClass {
		return 0
	}
	shift := bits.Len(uint(c)) - 4
	return c >> shift << shift
}

// takeBuffer returns a buffer of n elements whose contents are undefined:
// a recycled one of n's size class when its pool holds one, else a new
// one of that class's capacity. Callers that need zeros clear it.
func takeBuffer[T kernels.Float](n int) []T {
	class := classAbove(n)
	if b, ok := poolFor[T](class).Get().(*[]T); ok {
		return (*b)[:n]
	}
	return make([]T, class)[:n]
}

// giveBuffer hands b back for a later call, to the pool of the largest
// class its capacity holds; nothing may use it afterwards.
func giveBuffer[T kernels.Float](b []T) {
	if class := classBelow(cap(b)); class > 0 {
		poolFor[T](class).Put(&b)
	}
}

// carver returns a function that hands out consecutive slices of tiles,
// each with its own capacity (so that no append runs into the next): how
// the workers' scratch is cut out of one recycled buffer.
func carver[T kernels.Float](tiles []T) func(n int) []T {
	return func(n int) []T {
		t := tiles[:n:n]
		tiles = tiles[n:]
		return t
	}
}
