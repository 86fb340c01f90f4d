package autograd

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gorgonia-flash/flashattention/internal/hostmem"
	"github.com/gorgonia-flash/flashattention/kernels"
	"gorgonia.org/tensor"
)

// Cache is the storage of a key/value cache in host memory: for each of
// batch sequences, up to capacity keys and values of heads key heads of
// dim elements. An Op built with Config.Cache appends its k and v (the
// new tokens) at every run and attends to everything cached.
//
// Dense, it holds [batch, heads, capacity, dim] for K and for V from the
// start. Paged (pageSize > 0), it holds one pool [pages, heads, pageSize,
// dim] per tensor that sequences take pages from as they grow, through a
// block table each (kernels.Pages); the pool grows on demand, by doubling
// up to what batch sequences of capacity keys could use, and a reset hands
// a sequence's pages back for the next to take. Its methods are safe for
// concurrent use; runs of the Ops that use one cache are serialised by it.
type Cache struct {
	mu                                    sync.Mutex
	batch, heads, dim, capacity, pageSize int
	dtype                                 tensor.Dtype
	id                                    uint64 // names the cache in an Op's hash
	closed                                bool
	lens                                  []int
	k, v                                  any     // []float32 or []float64
	table                                 [][]int // paged: each sequence's pages, in key order
	free                                  []int   // paged: pages no sequence holds
	pages                                 int     // paged: the pool's size in pages
	// device: the keys and values live in a backend's memory (a GPU's),
	// in store, which the first run makes on its Op's backend (storeOf);
	// k and v then stay nil, and the lengths, tables and free list here
	// say what the store holds.
	device  bool
	store   kernels.CacheStore
	storeOf kernels.Backend
}

// ErrCacheClosed is wrapped by the errors of a closed cache's use.
var ErrCacheClosed = errors.New("the key/value cache is closed")

var cacheIDs atomic.Uint64

// NewCache returns an empty cache; pageSize 0 makes it dense. A dense
// cache allocates all its memory here, after asking internal/hostmem
// whether it can (kernels.ErrOutOfMemory if not). Errors wrap
// kernels.ErrInvalidParams for bad sizes or dtypes.
func NewCache(batch, heads, dim, capacity, pageSize int, dt tensor.Dtype) (*Cache, error) {
	return newCache(batch, heads, dim, capacity, pageSize, dt, false)
}

// NewDeviceCache is NewCache for a cache whose keys and values live in a
// device's memory: the first run of an Op that uses it makes the storage
// on the Op's backend, which must be a kernels.CacheBackend (the GPU's),
// and every Op that uses the cache after that must run on the same
// backend. Until that run it holds no memory (Bytes is 0).
func NewDeviceCache(batch, heads, dim, capacity, pageSize int, dt tensor.Dtype) (*Cache, error) {
	return newCache(batch, heads, dim, capacity, pageSize, dt, true)
}

func newCache(batch, heads, dim, capacity, pageSize int, dt tensor.Dtype, device bool) (*Cache, error) {
	for _, d := range []struct {
		name string
		n    int
	}{{"batch", batch}, {"kvHeads", heads}, {"headDim", dim}, {"capacity", capacity}} {
		if d.n < 1 {
			return nil, invalid("key/value cache: %s = %d, must be at least 1", d.name, d.n)
		}
	}
	if pageSize < 0 {
		return nil, invalid("key/value cache: page size %d, must be at least 1 (0: not paged)", pageSize)
	}
	if dt != tensor.Float32 && dt != tensor.Float64 {
		return nil, invalid("key/value cache: dtype %v, want Float32 or Float64", dt)
	}
	c := &Cache{batch: batch, heads: heads, dim: dim, capacity: capacity, pageSize: pageSize, dtype: dt,
		id: cacheIDs.Add(1), lens: make([]int, batch), device: device}
	if n := float64(batch) * float64(heads) * float64(c.keyRows()) * float64(dim); n > kernels.MaxElements {
		return nil, invalid("key/value cache: %.0f elements per tensor, more than the supported %d", n, kernels.MaxElements)
	}
	if pageSize > 0 {
		c.table = make([][]int, batch)
	}
	if device {
		return c, nil
	}
	if pageSize > 0 {
		c.k, c.v = alloc(dt, 0), alloc(dt, 0)
		return c, nil
	}
	n := batch * heads * capacity * dim
	if err := hostmem.Check(2 * int64(n) * int64(dt.Size())); err != nil {
		return nil, fmt.Errorf("key/value cache: %w", err)
	}
	c.k, c.v = alloc(dt, n), alloc(dt, n)
	return c, nil
}

// keyRows is the most key rows per sequence and head the storage can
// come to: capacity, or capacity rounded up to whole pages.
func (c *Cache) keyRows() int {
	if c.pageSize == 0 {
		return c.capacity
	}
	return (c.capacity + c.pageSize - 1) / c.pageSize * c.pageSize
}

func alloc(dt tensor.Dtype, n int) any {
	if dt == tensor.Float32 {
		return make([]float32, n)
	}
	return make([]float64, n)
}

// Capacity is the most tokens a sequence can hold.
func (c *Cache) Capacity() int { return c.capacity }

// Len returns the number of tokens sequence b holds; 0 for a b outside
// [0, batch) and for a closed cache.
func (c *Cache) Len(b int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b < 0 || b >= c.batch || c.closed {
		return 0
	}
	return c.lens[b]
}

// Reset empties every sequence (and hands every page back to the pool).
func (c *Cache) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for b := range c.batch {
		c.resetLocked(b)
	}
}

// ResetSequence empties sequence b alone, so that its slot can take a new
// prompt while the others go on.
func (c *Cache) ResetSequence(b int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrCacheClosed
	}
	if b < 0 || b >= c.batch {
		return invalid("key/value cache: sequence %d of %d", b, c.batch)
	}
	c.resetLocked(b)
	return nil
}

func (c *Cache) resetLocked(b int) {
	c.lens[b] = 0
	if c.table != nil {
		c.free = append(c.free, c.table[b]...)
		c.table[b] = nil
	}
}

// Close frees the cache's memory; every later use is an error wrapping
// ErrCacheClosed. Closing twice is not an error.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.k, c.v, c.table, c.free, c.lens, c.pages = nil, nil, nil, nil, make([]int, c.batch), 0
	if c.store == nil {
		return nil
	}
	err := c.store.Close()
	c.store = nil
	return err
}

// Device reports whether the keys and values live in a device's memory.
func (c *Cache) Device() bool { return c.device }

// Closed reports whether Close was called.
func (c *Cache) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Bytes is the memory the cache's keys and values hold now: all of it for
// a dense cache, the pool for a paged one.
func (c *Cache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.device {
		if c.store == nil {
			return 0
		}
		return c.store.Bytes()
	}
	n := 0
	switch x := c.k.(type) {
	case []float32:
		n = len(x)
	case []float64:
		n = len(x)
	}
	return 2 * int64(n) * int64(c.dtype.Size())
}

// check refuses an Op of another shape or dtype than the cache: k of
// shape [B, Hkv, T, D] (kernel layout) and element type dt.
func (c *Cache) check(p kernels.Params, dt tensor.Dtype) error {
	switch {
	case p.B != c.batch:
		return invalid("key/value cache of batch %d for a batch of %d", c.batch, p.B)
	case p.KVHeads() != c.heads:
		return invalid("key/value cache of %d key heads for k and v of %d", c.heads, p.KVHeads())
	case p.D != c.dim:
		return invalid("key/value cache of head dimension %d for D = %d", c.dim, p.D)
	case dt != c.dtype:
		return invalid("key/value cache of %v for %v tensors", c.dtype, dt)
	case c.Closed():
		return fmt.Errorf("attention: %w: %w", kernels.ErrInvalidParams, ErrCacheClosed)
	}
	return nil
}

// cacheUndo is what one append changed, for undoing it: the lengths
// before it. Every sequence holds exactly the pages its length needs, so
// the lengths say which pages to hand back too.
type cacheUndo struct{ lens []int }

// forwardCached appends the new tokens k and v ([B, Hkv, T, D] of
// element type T; of sequence b the first p.QLens[b], or all T without
// lengths) to c, then runs b's forward of q (p: the Op's problem at this
// run, Nq = Nk = T) against everything c holds, writing o and lse. A
// failed run (capacity exceeded: before any append; a backend error:
// after) leaves c as it was.
func forwardCached[T kernels.Float](c *Cache, b kernels.Backend, p kernels.Params, q, k, v, o, lse []T) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("%w: %w", kernels.ErrInvalidParams, ErrCacheClosed)
	}
	if c.device {
		return forwardOnDevice(c, b, p, q, k, v, o, lse)
	}
	undo, err := c.appendLocked(p, k, v)
	if err != nil {
		return err
	}
	cp := c.params(p)
	fwd, _ := kernels.EntryPoints[T](b)
	if err := fwd(cp, q, c.k.([]T), c.v.([]T), o, lse); err != nil {
		c.undoLocked(undo)
		return err
	}
	return nil
}

// forwardOnDevice is forwardCached for a device cache, with c locked: the
// store is made on b at the first run (bindLocked), the append takes pages
// and checks capacity here, and the store writes the new rows to the
// destinations computed here and attends, in one call. A failed run
// leaves the lengths and tables as they were; rows it wrote past them are
// never read.
func forwardOnDevice[T kernels.Float](c *Cache, b kernels.Backend, p kernels.Params, q, k, v, o, lse []T) error {
	if err := c.bindLocked(b); err != nil {
		return err
	}
	undo, err := c.appendLocked(p, nil, nil)
	if err != nil {
		return err
	}
	cp := c.params(p)
	dest := make([]int64, c.batch*c.heads*p.Nq)
	for kvh := range c.batch * c.heads {
		bi := kvh / c.heads
		news := p.Nq
		if p.QLens != nil {
			news = p.QLens[bi]
		}
		for t := range p.Nq {
			at := kvh*p.Nq + t
			dest[at] = -1
			if t < news {
				dest[at] = int64(cp.KeyRow(kvh, undo.lens[bi]+t) / c.dim)
			}
		}
	}
	if err := kernels.CacheStoreForward[T](c.store)(cp, dest, q, k, v, o, lse); err != nil {
		c.undoLocked(undo)
		return err
	}
	return nil
}

// bindLocked makes the device store on b at the first run, and refuses
// another backend after it.
func (c *Cache) bindLocked(b kernels.Backend) error {
	if c.store != nil {
		if c.storeOf != b {
			return invalid("key/value cache: its memory is on %s, and this op runs on %s (a cache serves the ops of one backend)", c.storeOf.Name(), b.Name())
		}
		return nil
	}
	cb, ok := b.(kernels.CacheBackend)
	if !ok {
		return invalid("key/value cache: it lives in device memory, and this op runs on %s, which has none", b.Name())
	}
	st, err := cb.NewCacheStore(kernels.CacheSpec{Batch: c.batch, KVHeads: c.heads, D: c.dim, Capacity: c.capacity,
		PageSize: c.pageSize, Float64: c.dtype == tensor.Float64})
	if err != nil {
		return fmt.Errorf("key/value cache: %w", err)
	}
	c.store, c.storeOf = st, b
	return nil
}

// appendLocked copies the new tokens in, taking pages as needed, after
// checking that every sequence has room for them.
func (c *Cache) appendLocked(p kernels.Params, k, v any) (cacheUndo, error) {
	undo := cacheUndo{lens: slices.Clone(c.lens)}
	news := make([]int, c.batch)
	for b := range c.batch {
		news[b] = p.Nq
		if p.QLens != nil {
			news[b] = p.QLens[b]
		}
		if c.lens[b]+news[b] > c.capacity {
			return undo, fmt.Errorf("%w: key/value cache: sequence %d holds %d tokens, %d more exceed its capacity of %d",
				kernels.ErrInvalidParams, b, c.lens[b], news[b], c.capacity)
		}
	}
	if c.pageSize > 0 {
		need := 0
		for b := range c.batch {
			need += c.pagesFor(c.lens[b]+news[b]) - len(c.table[b])
		}
		if err := c.reserve(need); err != nil {
			return undo, err
		}
		for b := range c.batch {
			for len(c.table[b]) < c.pagesFor(c.lens[b]+news[b]) {
				last := len(c.free) - 1
				c.table[b] = append(c.table[b], c.free[last])
				c.free = c.free[:last]
			}
		}
	}
	switch k := k.(type) {
	case []float32:
		copyTokens(c, p, news, k, v.([]float32), c.k.([]float32), c.v.([]float32))
	case []float64:
		copyTokens(c, p, news, k, v.([]float64), c.k.([]float64), c.v.([]float64))
	case nil:
		// A device cache: the store writes the rows (forwardOnDevice).
	}
	for b, n := range news {
		c.lens[b] += n
	}
	return undo, nil
}

// pagesFor is the number of pages n keys take.
func (c *Cache) pagesFor(n int) int { return (n + c.pageSize - 1) / c.pageSize }

// reserve makes the free list hold at least n pages, growing the pool
// (doubling it, at most to what the batch can use) when it must.
func (c *Cache) reserve(n int) error {
	if n <= len(c.free) {
		return nil
	}
	most := c.batch * c.pagesFor(c.capacity)
	grown := min(most, max(c.pages+n-len(c.free), 2*c.pages))
	per := c.heads * c.pageSize * c.dim
	if c.device {
		if err := c.store.Grow(grown); err != nil {
			return fmt.Errorf("key/value cache: %w", err)
		}
	} else if err := hostmem.Check(2 * int64(grown*per) * int64(c.dtype.Size())); err != nil {
		return fmt.Errorf("key/value cache: %w", err)
	}
	// Exact allocations, not append's growth, so that Bytes is what the
	// pool holds.
	switch k := c.k.(type) {
	case []float32:
		c.k, c.v = grow(k, grown*per), grow(c.v.([]float32), grown*per)
	case []float64:
		c.k, c.v = grow(k, grown*per), grow(c.v.([]float64), grown*per)
	}
	// New pages go on the free list highest first, so that they are taken
	// in pool order.
	for pg := grown - 1; pg >= c.pages; pg-- {
		c.free = append(c.free, pg)
	}
	c.pages = grown
	return nil
}

// grow returns a copy of x extended to n elements.
func grow[T kernels.Float](x []T, n int) []T {
	y := make([]T, n)
	copy(y, x)
	return y
}

// undoLocked restores the lengths before an append and hands back the
// pages it took, the last taken first.
func (c *Cache) undoLocked(u cacheUndo) {
	copy(c.lens, u.lens)
	if c.table == nil {
		return
	}
	for b, n := range c.lens {
		keep := c.pagesFor(n)
		c.free = append(c.free, c.table[b][keep:]...)
		c.table[b] = c.table[b][:keep]
	}
}

// copyTokens copies news[b] new tokens of every sequence and key head
// from k and v ([B, Hkv, T, D]) to the cache's rows from lens[b] on.
func copyTokens[T kernels.Float](c *Cache, p kernels.Params, news []int, k, v, ck, cv []T) {
	cp := c.params(p)
	for kvh := range c.batch * c.heads {
		b := kvh / c.heads
		for t := range news[b] {
			from := (kvh*p.Nq + t) * c.dim
			to := cp.KeyRow(kvh, c.lens[b]+t)
			copy(ck[to:to+c.dim], k[from:from+c.dim])
			copy(cv[to:to+c.dim], v[from:from+c.dim])
		}
	}
}

// params returns the problem of the Op's problem p (Nq = T new rows)
// against what the cache holds: the lengths as KLens, and the pool and
// block tables when paged (Nk then the longest sequence, at least 1), or
// Nk = capacity, the dense storage's stride. The tables are the cache's
// own, valid while its lock is held.
func (c *Cache) params(p kernels.Params) kernels.Params {
	p.KLens = slices.Clone(c.lens)
	if c.pageSize == 0 {
		p.Nk = c.capacity
		return p
	}
	p.Nk = max(1, slices.Max(c.lens))
	p.Pages = &kernels.Pages{Size: c.pageSize, Count: c.pages, Table: c.table}
	return p
}
