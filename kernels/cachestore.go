package kernels

// CacheSpec describes the storage of a key/value cache: Batch sequences
// of up to Capacity tokens with KVHeads key heads of D elements, dense
// ([Batch, KVHeads, Capacity, D] per tensor) when PageSize is 0, else pools
// of pages [pages, KVHeads, PageSize, D] that grow on demand (Pages); the
// caller's element type is float64 when Float64, else float32.
type CacheSpec struct {
	Batch, KVHeads, D, Capacity, PageSize int
	Float64                               bool
}

// A CacheStore holds a key/value cache's keys and values in a backend's own
// memory (a GPU's), so that a decode step moves only its new rows there and
// its output back. Its owner (the cache) keeps the lengths and block tables
// and says where each new row goes; the store holds the rows.
//
// Forward32 and Forward64 append and attend in one call: new row n of k
// and v ([B, KVHeads, Nq, D]: the step's tokens) is written to storage row
// dest[n] (a row index of the layout Params.KeyRow describes, divided by
// D; −1: not stored), then q attends to the stored keys as p describes them
// (p.Nk and p.KLens the lengths after the append, p.Pages the block tables
// when paged), writing o and lse as a Backend's forward does. Grow makes a
// paged store hold pages pages, keeping what it holds. Bytes is the device
// memory the rows take.
type CacheStore interface {
	Grow(pages int) error
	Forward32(p Params, dest []int64, q, k, v, o, lse []float32) error
	Forward64(p Params, dest []int64, q, k, v, o, lse []float64) error
	Bytes() int64
	Close() error
}

// A CacheBackend is a Backend that can hold key/value caches in its own
// memory. NewCacheStore allocates a dense store whole, a paged one empty;
// the error wraps ErrOutOfMemory when the memory cannot be had.
type CacheBackend interface {
	Backend
	NewCacheStore(spec CacheSpec) (CacheStore, error)
}

// CacheStoreForward returns s's Forward for the element type T.
func CacheStoreForward[T Float](s CacheStore) func(p Params, dest []int64, q, k, v, o, lse []T) error {
	var zero T
	if _, ok := any(zero).(float32); ok {
		return any(s.Forward32).(func(Params, []int64, []T, []T, []T, []T, []T) error)
	}
	return any(s.Forward64).(func(Params, []int64, []T, []T, []T, []T, []T) error)
}
