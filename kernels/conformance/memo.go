package conformance

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"sync"
	"unsafe"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// The float64 references and the naive baselines cost more than the rest of
// a run of the suite together, on a GPU backend nearly all of it: the
// backend answers in milliseconds, the reference and the baseline take
// O(N²·D) scalar work on one core for every problem. A process that runs
// the suite on several backends, as the GPU tests do for each kernel set,
// computes the same ones again for each, unless it asks the suite to keep
// them (KeepReferences). A kept result is found by its parameters
// (Params.Equal) and the SHA-256 digest of its inputs' bits, never by a
// test's name, so a hit is the same computation's answer. Digests rather
// than copies of the inputs: the suite's float32 run on the CPU kept 3.2 GB
// of references and 2.0 GB of baselines with copies (dev, 2026-12-05).

// KeepReferences makes reference and naive32 keep their results, up to
// limit bytes each (least recently used out), for every later call with
// the same inputs, parameters and precision; release drops them and
// returns to computing each afresh. Tests that run the suite on more than
// one backend call it around the runs. The results are shared, so no
// caller may write into one.
func KeepReferences(limit int64) (release func()) {
	references.setLimit(limit)
	baselines.setLimit(limit)
	return func() {
		references.setLimit(0)
		baselines.setLimit(0)
	}
}

var (
	references memo[float64, result[float64]]
	baselines  memo[float32, result[float32]]
)

// float64Reference stands for the precision of the float64 references in
// their memo: they have none of the float32 modes.
const float64Reference = kernels.Precision(-1)

// memo holds results of type R computed from inputs of type T, least
// recently used first; limit 0 keeps none.
type memo[T kernels.Float, R any] struct {
	mu           sync.Mutex
	limit, bytes int64
	entries      []*memoEntry[T, R]
}

type memoEntry[T kernels.Float, R any] struct {
	p      kernels.Params
	prec   kernels.Precision
	digest [sha256.Size]byte // of the inputs (inputDigest)
	r      R
	bytes  int64
}

func (m *memo[T, R]) setLimit(limit int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.limit = limit
	m.trim()
}

// trim drops the least recently used entries until the rest fit limit.
func (m *memo[T, R]) trim() {
	for len(m.entries) > 0 && m.bytes > m.limit {
		m.bytes -= m.entries[0].bytes
		m.entries = slices.Delete(m.entries, 0, 1)
	}
}

// get returns the result kept for p, prec and in, if any, and the digest
// of in for put (none while limit is 0).
func (m *memo[T, R]) get(p kernels.Params, prec kernels.Precision, in [][]T) (r R, digest [sha256.Size]byte, ok bool) {
	m.mu.Lock()
	on := m.limit > 0
	m.mu.Unlock()
	if !on {
		return r, digest, false
	}
	// Hashed outside the lock: megabytes of inputs, which parallel tests
	// need not wait on each other for.
	digest = inputDigest(in)
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, e := range m.entries {
		if e.prec == prec && e.digest == digest && e.p.Equal(p) {
			m.entries = append(slices.Delete(m.entries, i, i+1), e)
			return e.r, digest, true
		}
	}
	return r, digest, false
}

// put keeps r, the result for p, prec and the inputs of digest, which
// takes bytes of memory, when limit allows.
func (m *memo[T, R]) put(p kernels.Params, prec kernels.Precision, digest [sha256.Size]byte, r R, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.limit == 0 {
		return
	}
	p = cloneParams(p)
	if p.Bias != nil {
		bytes += int64(len(p.Bias.Data32))*4 + int64(len(p.Bias.Data64))*8
	}
	m.entries = append(m.entries, &memoEntry[T, R]{p: p, prec: prec, digest: digest, r: r, bytes: bytes})
	m.bytes += bytes
	m.trim()
}

// inputDigest is the SHA-256 of in: each slice's length (−1 for nil), then
// its elements' bits, so that -0 differs from +0 and a NaN matches only
// its own bits.
func inputDigest[T kernels.Float](in [][]T) [sha256.Size]byte {
	h := sha256.New()
	for _, x := range in {
		n := int64(len(x))
		if x == nil {
			n = -1
		}
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(n)))
		if len(x) > 0 {
			h.Write(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), len(x)*int(unsafe.Sizeof(x[0]))))
		}
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// cloneParams returns p with copies of the slices Equal reads (the bias
// without its gradients), so that what the caller does with its own later
// cannot make a kept entry match other inputs.
func cloneParams(p kernels.Params) kernels.Params {
	p.ALiBi, p.QLens, p.KLens = slices.Clone(p.ALiBi), slices.Clone(p.QLens), slices.Clone(p.KLens)
	if p.Bias != nil {
		p.Bias = &kernels.Bias{Bb: p.Bias.Bb, Hb: p.Bias.Hb, Data32: slices.Clone(p.Bias.Data32), Data64: slices.Clone(p.Bias.Data64)}
	}
	if p.Pages != nil {
		pages := *p.Pages
		pages.Table = make([][]int, len(p.Pages.Table))
		for i, row := range p.Pages.Table {
			pages.Table[i] = slices.Clone(row)
		}
		p.Pages = &pages
	}
	return p
}

// resultBytes is the memory r's slices take.
func resultBytes[T kernels.Float](r result[T]) int64 {
	var n int64
	for _, x := range [][]T{r.o, r.lse, r.dq, r.dk, r.dv, r.dbias} {
		n += int64(len(x)) * int64(unsafe.Sizeof(x[0]))
	}
	return n
}
