package op

import (
	"fmt"

	"github.com/gorgonia-flash/flashattention/autograd"
	"github.com/gorgonia-flash/flashattention/kernels"
	"gorgonia.org/tensor"
)

// KVCache holds the keys and values of batch sequences for generation:
// an Attention node built WithKVCache(cache) appends its k and v, the new
// tokens, at every run and attends its q to everything the cache holds
// (see WithKVCache and the package documentation, Generation). A cache
// serves one attention layer; a model with L layers uses L caches.
//
// Its methods are safe for concurrent use. Close it when done: its memory
// is batch·kvHeads·capacity·headDim elements per tensor when dense, the
// pages in use (rounded up to the pool's growth) when paged.
type KVCache struct{ c *autograd.Cache }

// CacheOption configures NewKVCache.
type CacheOption func(*cacheConfig)

type cacheConfig struct {
	pageSize    int
	pageSizeSet bool // CachePageSize(0) is an error, not "dense"
	device      Device
}

// CachePageSize pages the cache: sequences take pages of n tokens from one
// pool shared by the batch as they grow, and a reset sequence hands its
// pages back, so a batch of sequences of very different lengths holds the
// pages of its tokens rather than batch × capacity. n must be at least 1;
// without the option the cache is dense. The CPU reads the pages where
// they are; a few hundred tokens per page read at nearly the dense speed,
// very small pages slower (bench/RESULTS.md).
func CachePageSize(n int) CacheOption {
	return func(c *cacheConfig) { c.pageSize, c.pageSizeSet = n, true }
}

// CacheDevice selects where the cache lives: CPU (host memory, the
// default), for ops on the CPU, or GPU (device memory of CUDA device 0,
// in a binary built with the flashgpu tag), for ops on the GPU. A GPU
// cache stores keys and values in its op's precision's format (bf16 for
// BF16, fp16 for FP16, float32 for FP32 and TF32, float64 for Float64
// tensors); its memory is allocated at the first run of an op that uses
// it, on that op's backend, and every later op must run on the same one
// (the same precision). A decode step then moves only its new q, k and v
// to the device and its output back (see the package documentation,
// Generation).
func CacheDevice(d Device) CacheOption { return func(c *cacheConfig) { c.device = d } }

// NewKVCache returns an empty cache for batch sequences of up to capacity
// tokens each, with kvHeads key heads of headDim elements (k and v of the
// attention that uses it are [batch, kvHeads, T, headDim]), of dtype
// Float32 or Float64. A dense cache allocates its memory here. Errors wrap
// ErrInvalidInput for bad sizes, dtypes, page sizes or devices (a GPU
// cache: ErrNoGPU too), and ErrOutOfMemory when its memory cannot be had.
func NewKVCache(batch, kvHeads, headDim, capacity int, dtype tensor.Dtype, opts ...CacheOption) (*KVCache, error) {
	var cfg cacheConfig
	for _, o := range opts {
		o(&cfg)
	}
	newCache := autograd.NewCache
	switch cfg.device {
	case CPU:
	case GPU:
		if err := gpuPresent(); err != nil {
			return nil, fmt.Errorf("op.NewKVCache: %w: %w", ErrInvalidInput, err)
		}
		newCache = autograd.NewDeviceCache
	default:
		return nil, invalid("cache device %v, want CPU or GPU", cfg.device)
	}
	if cfg.pageSizeSet && cfg.pageSize < 1 {
		return nil, invalid("cache page size %d, must be at least 1", cfg.pageSize)
	}
	c, err := newCache(batch, kvHeads, headDim, capacity, cfg.pageSize, dtype)
	if err != nil {
		return nil, fmt.Errorf("op.NewKVCache: %w", err)
	}
	return &KVCache{c}, nil
}

// Len returns the number of tokens sequence b holds (0 for a b outside
// the batch, and after Close).
func (c *KVCache) Len(b int) int { return c.c.Len(b) }

// Reset empties every sequence.
func (c *KVCache) Reset() { c.c.Reset() }

// ResetSequence empties sequence b alone (its pages go back to the pool),
// so that a finished sequence's slot takes a new prompt while the others
// go on: continuous batching. A b outside the batch, or a closed cache, is
// an error.
func (c *KVCache) ResetSequence(b int) error {
	if err := c.c.ResetSequence(b); err != nil {
		return fmt.Errorf("op.KVCache: %w", err)
	}
	return nil
}

// Close frees the cache's memory. Graphs built with it then fail to run
// with an error (wrapping ErrInvalidInput), and so does building one.
func (c *KVCache) Close() error { return c.c.Close() }

// Bytes is the memory the cache's keys and values hold now.
func (c *KVCache) Bytes() int64 { return c.c.Bytes() }

// Capacity is the most tokens a sequence can hold.
func (c *KVCache) Capacity() int { return c.c.Capacity() }

// cacheFor checks the cache of WithKVCache against the resolved backend:
// a cache in host memory takes a host backend (not a kernels.Resident
// one, which keeps state on its device), a GPU cache a backend that holds
// caches (kernels.CacheBackend).
func (cfg *config) cacheFor(b kernels.Backend) (*autograd.Cache, error) {
	if !cfg.cacheSet {
		return nil, nil
	}
	if cfg.cache == nil || cfg.cache.c == nil {
		return nil, invalid("WithKVCache(nil)")
	}
	if cfg.cache.c.Device() {
		if _, ok := b.(kernels.CacheBackend); !ok {
			return nil, invalid("the key/value cache is in GPU memory and the op runs on %s; run cached attention on the GPU (WithDevice(GPU))", b.Name())
		}
		return cfg.cache.c, nil
	}
	if _, device := b.(kernels.Resident); device {
		return nil, invalid("the key/value cache is in host memory and the op runs on %s; run cached attention on the CPU, or make the cache with CacheDevice(GPU)", b.Name())
	}
	return cfg.cache.c, nil
}
