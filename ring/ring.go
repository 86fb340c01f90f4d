package ring

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"time"
	"unsafe"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// DefaultTimeout bounds each transfer of a ring whose Timeout is 0.
const DefaultTimeout = time.Minute

// Problem is what every rank of a ring agrees on: the attention problem
// apart from the sequence, which the Layout cuts.
type Problem struct {
	B, H    int // batch size and query heads
	Hkv     int // key and value heads, dividing H; 0 means H
	D       int // head dimension
	Scale   float64
	Causal  bool    // causal over global positions
	Softcap float64 // kernels.Params.Softcap; 0 is off
}

// kvHeads is Hkv, or H when Hkv is 0.
func (p Problem) kvHeads() int {
	if p.Hkv == 0 {
		return p.H
	}
	return p.Hkv
}

// block returns the kernels' problem of nq query rows against nk keys,
// with the causal mask when diagonal.
func (p Problem) block(nq, nk int, diagonal bool) kernels.Params {
	kp := kernels.Params{B: p.B, H: p.H, Nq: nq, Nk: nk, D: p.D, Scale: p.Scale, Causal: diagonal, Softcap: p.Softcap}
	if p.kvHeads() != p.H {
		kp.Hkv = p.Hkv
	}
	return kp
}

// Ring is one rank's place in a ring: the transport that links it to its
// neighbours, the layout of the sequence (the same on every rank), the
// backend that computes its blocks, and the timeout of each transfer.
type Ring struct {
	Transport Transport
	Layout    Layout
	Backend   kernels.Backend
	Timeout   time.Duration // per transfer; 0 means DefaultTimeout
	// Stats, when not nil, receives the figures of each call's steps.
	Stats *Stats
}

// Stats are the figures of the last Forward or Backward of a Ring.
type Stats struct {
	// Compute is the time each step spent in the backend and the merge,
	// not waiting for its transfer.
	Compute []time.Duration
	// Sent is the number of bytes each step's transfer sent (0 for a step
	// without one); Backward has one more entry than steps, the dK and
	// dV going home.
	Sent []int
}

// pair says how a query chunk and a key chunk meet under the mask.
type pair int

const (
	skip     pair = iota // the keys all follow the queries: nothing visible
	full                 // every key visible to every query
	diagonal             // the same chunk: the causal mask of the kernels
)

// meet returns how query chunk qc sees key chunk kc. Chunks are disjoint
// ranges of global positions, so under the causal mask two different
// chunks are either wholly before one another or wholly after, and only a
// chunk against itself needs the mask, whose bottom-right alignment is the
// global one when Nq = Nk.
func meet(causal bool, qc, kc Chunk) pair {
	switch {
	case !causal:
		return full
	case qc == kc:
		return diagonal
	case kc.Start+kc.Len <= qc.Start:
		return full
	}
	return skip
}

// rank is the state of one call on one rank, for element type T.
type rank[T kernels.Float] struct {
	Ring
	p        Problem
	me, size int
	fwd      kernels.ForwardFunc[T]
	bwd      kernels.BackwardFunc[T]
	bh, bhkv int // B·H and B·Hkv
}

// newRank checks the ring and the problem and returns the call's state.
func newRank[T kernels.Float](rg Ring, p Problem) (*rank[T], error) {
	if rg.Transport == nil || rg.Backend == nil {
		return nil, invalid("the ring needs a transport and a backend")
	}
	me, size := rg.Transport.Rank(), rg.Transport.Size()
	if rg.Layout.Ranks() != size || me < 0 || me >= size {
		return nil, invalid("rank %d of a transport of %d ranks, layout for %d", me, size, rg.Layout.Ranks())
	}
	// The kernels validate everything else of a problem; ask them about
	// one of the rank's own blocks.
	c := rg.Layout.ranks[me][0]
	if err := p.block(c.Len, c.Len, false).Validate(); err != nil {
		return nil, fmt.Errorf("ring: %w", err)
	}
	if rg.Timeout == 0 {
		rg.Timeout = DefaultTimeout
	}
	fwd, bwd := kernels.EntryPoints[T](rg.Backend)
	return &rank[T]{Ring: rg, p: p, me: me, size: size, fwd: fwd, bwd: bwd, bh: p.B * p.H, bhkv: p.B * p.kvHeads()}, nil
}

// src is the rank whose block this rank holds at step s.
func (r *rank[T]) src(s int) int { return (r.me - s + r.size) % r.size }

// kvLen is the number of elements of rank b's K and V (or dK and dV) in
// block form: for each of its chunks, K then V, [B·Hkv, Len, D] each.
func (r *rank[T]) kvLen(b int) int { return 2 * r.bhkv * r.Layout.Len(b) * r.p.D }

// maxKVLen is the largest kvLen of any rank.
func (r *rank[T]) maxKVLen() int {
	n := 0
	for b := range r.size {
		n = max(n, r.kvLen(b))
	}
	return n
}

// longestChunk is the length of the layout's longest chunk: the kernels'
// scratch results are sized for it.
func (r *rank[T]) longestChunk() int {
	n := 0
	for _, cs := range r.Layout.ranks {
		for _, c := range cs {
			n = max(n, c.Len)
		}
	}
	return n
}

// chunkKV returns the K and V of chunk j of rank b in its block buf.
func (r *rank[T]) chunkKV(b, j int, buf []T) (k, v []T) {
	off := 0
	for _, c := range r.Layout.ranks[b][:j] {
		off += 2 * r.bhkv * c.Len * r.p.D
	}
	n := r.bhkv * r.Layout.ranks[b][j].Len * r.p.D
	return buf[off : off+n], buf[off+n : off+2*n]
}

// toBlock packs this rank's local k and v, [B·Hkv, Len, D], into block
// form in buf; fromBlock unpacks them.
func (r *rank[T]) toBlock(k, v, buf []T) {
	for j := range r.Layout.ranks[r.me] {
		kc, vc := r.chunkKV(r.me, j, buf)
		r.chunkRows(k, kc, r.bhkv, j, false)
		r.chunkRows(v, vc, r.bhkv, j, false)
	}
}

func (r *rank[T]) fromBlock(buf, k, v []T) {
	for j := range r.Layout.ranks[r.me] {
		kc, vc := r.chunkKV(r.me, j, buf)
		r.chunkRows(k, kc, r.bhkv, j, true)
		r.chunkRows(v, vc, r.bhkv, j, true)
	}
}

// chunkRows copies the rows of local chunk j between x, [heads, Len, D]
// in local order, and c, [heads, chunk length, D]: from x to c, or back
// with toLocal.
func (r *rank[T]) chunkRows(x, c []T, heads, j int, toLocal bool) {
	n, d := r.Layout.Len(r.me), r.p.D
	off := 0
	for _, ch := range r.Layout.ranks[r.me][:j] {
		off += ch.Len
	}
	m := r.Layout.ranks[r.me][j].Len
	for h := range heads {
		xs, cs := x[(h*n+off)*d:(h*n+off+m)*d], c[h*m*d:(h+1)*m*d]
		if toLocal {
			copy(xs, cs)
		} else {
			copy(cs, xs)
		}
	}
}

// queryChunks returns this rank's rows of x, [B·H, Len, D] (or [B·H,
// Len] with d = 1), chunk by chunk.
func (r *rank[T]) queryChunks(x []T, d int) [][]T {
	n := r.Layout.Len(r.me)
	out := make([][]T, len(r.Layout.ranks[r.me]))
	off := 0
	for j, c := range r.Layout.ranks[r.me] {
		out[j] = make([]T, r.bh*c.Len*d)
		for h := range r.bh {
			copy(out[j][h*c.Len*d:(h+1)*c.Len*d], x[(h*n+off)*d:(h*n+off+c.Len)*d])
		}
		off += c.Len
	}
	return out
}

// fromChunks is the inverse of queryChunks, into x.
func (r *rank[T]) fromChunks(chunks [][]T, x []T, d int) {
	n := r.Layout.Len(r.me)
	off := 0
	for j, c := range r.Layout.ranks[r.me] {
		for h := range r.bh {
			copy(x[(h*n+off)*d:(h*n+off+c.Len)*d], chunks[j][h*c.Len*d:(h+1)*c.Len*d])
		}
		off += c.Len
	}
}

// checkLocal checks the lengths of this rank's [B, H, Len, D] tensors
// (qs) and [B, Hkv, Len, D] tensors (ks).
func (r *rank[T]) checkLocal(qs, ks []int) error {
	n := r.Layout.Len(r.me)
	for _, l := range qs {
		if l != r.bh*n*r.p.D {
			return invalid("rank %d: a [B, H, N, D] tensor has %d elements, want %d·%d·%d·%d", r.me, l, r.p.B, r.p.H, n, r.p.D)
		}
	}
	for _, l := range ks {
		if l != r.bhkv*n*r.p.D {
			return invalid("rank %d: a [B, Hkv, N, D] tensor has %d elements, want %d·%d·%d·%d", r.me, l, r.p.B, r.p.kvHeads(), n, r.p.D)
		}
	}
	return nil
}

// transfer is a SendRecv in flight.
type transfer chan error

// start begins a SendRecv of send and recv on its own goroutine, so that
// it overlaps the compute that follows, and returns what to wait on.
func (r *rank[T]) start(ctx context.Context, send, recv [][]T) transfer {
	sb, rb := make([][]byte, len(send)), make([][]byte, len(recv))
	for i := range send {
		sb[i] = bytesOf(send[i])
	}
	for i := range recv {
		rb[i] = bytesOf(recv[i])
	}
	done := make(transfer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, r.Timeout)
		defer cancel()
		done <- r.Transport.SendRecv(ctx, sb, rb)
	}()
	return done
}

// sent counts the bytes of send.
func sent[T kernels.Float](send [][]T) int {
	n := 0
	for _, s := range send {
		n += len(s) * int(unsafe.Sizeof(T(0)))
	}
	return n
}

// bytesOf views x as bytes, for the transport.
func bytesOf[T kernels.Float](x []T) []byte {
	if len(x) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), len(x)*int(unsafe.Sizeof(x[0])))
}

// fail tells the other ranks that this one stops, waits for the transfer
// in flight (if any) to give up, and returns err.
func (r *rank[T]) fail(err error, inFlight transfer) error {
	r.Transport.Fail(err)
	if inFlight != nil {
		<-inFlight
	}
	return err
}

// Phases of a call, in the handshake: a rank in its backward must not pair
// with one in its forward.
const (
	forwardPhase uint64 = iota + 1
	backwardPhase
)

// handshake checks, with one small transfer, that this rank and the one
// before it describe the same problem and are in the same phase: around a
// ring, all agree if each agrees with its predecessor.
func (r *rank[T]) handshake(ctx context.Context, phase uint64) error {
	if r.size == 1 {
		return nil
	}
	mine := r.fingerprint(phase)
	theirs := make([]uint64, len(mine))
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	if err := r.Transport.SendRecv(ctx, [][]byte{bytesOf64(mine[:])}, [][]byte{bytesOf64(theirs)}); err != nil {
		return err
	}
	if mine != [4]uint64(theirs) {
		return invalid("rank %d and rank %d describe different problems (shapes, dtype, scale, mask or layout) or are in different passes (forward, backward)", r.me, (r.me+r.size-1)%r.size)
	}
	return nil
}

// fingerprint sums up what all ranks must agree on in phase.
func (r *rank[T]) fingerprint(phase uint64) [4]uint64 {
	h := fnv.New64a()
	var b [8]byte
	put := func(x uint64) {
		binary.LittleEndian.PutUint64(b[:], x)
		h.Write(b[:])
	}
	for _, x := range []int{r.p.B, r.p.H, r.p.kvHeads(), r.p.D, r.Layout.N(), r.size} {
		put(uint64(x))
	}
	for _, cs := range r.Layout.ranks {
		put(uint64(len(cs)))
		for _, c := range cs {
			put(uint64(c.Start))
			put(uint64(c.Len))
		}
	}
	causal := uint64(0)
	if r.p.Causal {
		causal = 1
	}
	return [4]uint64{h.Sum64(), math.Float64bits(r.p.Scale), math.Float64bits(r.p.Softcap), phase<<16 | causal<<8 | uint64(unsafe.Sizeof(T(0)))}
}

// bytesOf64 views x as bytes.
func bytesOf64(x []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), len(x)*8)
}

// record stores a step's figures when the ring keeps stats.
func (r *rank[T]) record(compute time.Duration, bytes int) {
	if r.Stats != nil {
		r.Stats.Compute = append(r.Stats.Compute, compute)
		r.Stats.Sent = append(r.Stats.Sent, bytes)
	}
}

// resetStats empties the stats for a new call.
func (r *rank[T]) resetStats() {
	if r.Stats != nil {
		*r.Stats = Stats{}
	}
}
