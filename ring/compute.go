package ring

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// Forward computes this rank's rows of attention over the whole sequence
// of the ring: o = softmax(scale·q·Kᵀ + mask)·V with K and V the keys and
// values of every rank, and the log-sum-exp of each row. q is [B, H, Len,
// D] and k, v are [B, Hkv, Len, D], Len = rg.Layout.Len(rank), in the
// rank's local order; o has q's shape and lse is [B, H, Len]. Every rank
// of the ring must call it at the same time, with the same Problem and
// Layout. Errors wrap op.ErrInvalidInput for bad arguments, ErrTimeout or
// ErrAborted when the ring broke; a rank that fails fails the ring, so
// that the others return too.
func Forward[T kernels.Float](ctx context.Context, rg Ring, p Problem, q, k, v []T) (o, lse []T, err error) {
	r, err := newRank[T](rg, p)
	if err != nil {
		return nil, nil, failEarly(rg, err)
	}
	if err := r.checkLocal([]int{len(q)}, []int{len(k), len(v)}); err != nil {
		return nil, nil, r.fail(err, nil)
	}
	if err := r.handshake(ctx, forwardPhase); err != nil {
		return nil, nil, r.fail(err, nil)
	}
	r.resetStats()
	d, chunks := p.D, r.Layout.ranks[r.me]
	qc := r.queryChunks(q, d)
	oAcc, lAcc := make([][]T, len(chunks)), make([][]float64, len(chunks))
	for j, c := range chunks {
		oAcc[j] = make([]T, r.bh*c.Len*d)
		lAcc[j] = make([]float64, r.bh*c.Len)
		for i := range lAcc[j] {
			lAcc[j][i] = math.Inf(-1) // no key seen yet: the identity of logaddexp
		}
	}
	longest := r.longestChunk()
	tmpO, tmpL := make([]T, r.bh*longest*d), make([]T, r.bh*longest)
	cur := make([]T, r.maxKVLen())
	var next []T
	if r.size > 1 {
		next = make([]T, r.maxKVLen())
	}
	r.toBlock(k, v, cur)
	for s := range r.size {
		src := r.src(s)
		var t transfer
		bytes := 0
		if s < r.size-1 {
			// The block moves on while this rank computes with it.
			send := [][]T{cur[:r.kvLen(src)]}
			t = r.start(ctx, send, [][]T{next[:r.kvLen(r.src(s+1))]})
			bytes = sent(send)
		}
		begin := time.Now()
		err := r.forwardBlock(src, cur, qc, oAcc, lAcc, tmpO, tmpL)
		r.record(time.Since(begin), bytes)
		if err != nil {
			return nil, nil, r.fail(err, t)
		}
		if t != nil {
			if err := <-t; err != nil {
				return nil, nil, r.fail(err, nil)
			}
			cur, next = next, cur
		}
	}
	o, lse = make([]T, len(q)), make([]T, r.bh*r.Layout.Len(r.me))
	r.fromChunks(oAcc, o, d)
	lc := make([][]T, len(chunks))
	for j := range lc {
		lc[j] = make([]T, len(lAcc[j]))
		for i, l := range lAcc[j] {
			lc[j][i] = T(l)
		}
	}
	r.fromChunks(lc, lse, 1)
	return o, lse, nil
}

// forwardBlock merges into oAcc and lAcc the attention of this rank's
// query chunks qc to the chunks of rank src's block buf.
func (r *rank[T]) forwardBlock(src int, buf []T, qc, oAcc [][]T, lAcc [][]float64, tmpO, tmpL []T) error {
	for i, qch := range r.Layout.ranks[r.me] {
		for j, kch := range r.Layout.ranks[src] {
			m := meet(r.p.Causal, qch, kch)
			if m == skip {
				continue
			}
			k, v := r.chunkKV(src, j, buf)
			p := r.p.block(qch.Len, kch.Len, m == diagonal)
			o, l := tmpO[:p.QLen()], tmpL[:p.LSELen()]
			if err := r.fwd(p, qc[i], k, v, o, l); err != nil {
				return fmt.Errorf("ring: rank %d, keys of rank %d on %s: %w", r.me, src, r.Backend.Name(), err)
			}
			merge(oAcc[i], lAcc[i], o, l, r.p.D)
		}
	}
	return nil
}

// merge folds a block's partial result (o, lse) into the running one
// (acc, accLSE), row by row: L = logaddexp(L1, L2) and O = e^(L1−L)·O1 +
// e^(L2−L)·O2, in float64. A part whose LSE is −Inf has no weight (its
// keys all have probability 0) and is left out, rather than multiplied by
// 0: the running result before any block is O = 0, LSE = −Inf, and a
// block whose scores are all −Inf (O NaN) must not hide the rows' other
// keys, as it does not in a softmax over the whole row. NaN and +Inf
// propagate as IEEE arithmetic makes them.
func merge[T kernels.Float](acc []T, accLSE []float64, o, lse []T, d int) {
	for i, lt := range lse {
		l1, l2 := accLSE[i], float64(lt)
		l := logAddExp(l1, l2)
		w1, w2 := math.Exp(l1-l), math.Exp(l2-l)
		a, b := acc[i*d:(i+1)*d], o[i*d:(i+1)*d]
		for x := range a {
			var y float64
			if !math.IsInf(l1, -1) {
				y = w1 * float64(a[x])
			}
			if !math.IsInf(l2, -1) {
				y += w2 * float64(b[x])
			}
			a[x] = T(y)
		}
		accLSE[i] = l
	}
}

// logAddExp is log(e^a + e^b) without overflow; NaN if either is NaN.
func logAddExp(a, b float64) float64 {
	m := max(a, b) // NaN if either is
	if math.IsInf(m, 0) {
		return m
	}
	return m + math.Log1p(math.Exp(-math.Abs(a-b)))
}

// Backward computes this rank's share of the gradients of the ring's
// attention, recomputing the probabilities block by block from q, k, v,
// the forward's o and lse and do, the gradient of the loss with respect to
// o, with no Nq×Nk buffer: dq, of q's shape, for this rank's queries, and
// dk, dv, of k's shape, for this rank's keys and values, summed over the
// queries of every rank. The arguments are those of Forward and its
// results, on every rank at the same time.
//
// K and V go around the ring again, and with them dK and dV: each rank
// adds its queries' contribution to the block it holds and passes the
// sums on, so that they come home complete after a full turn.
func Backward[T kernels.Float](ctx context.Context, rg Ring, p Problem, q, k, v, o, lse, do []T) (dq, dk, dv []T, err error) {
	r, err := newRank[T](rg, p)
	if err != nil {
		return nil, nil, nil, failEarly(rg, err)
	}
	if err := r.checkLocal([]int{len(q), len(o), len(do)}, []int{len(k), len(v)}); err != nil {
		return nil, nil, nil, r.fail(err, nil)
	}
	if n := r.bh * r.Layout.Len(r.me); len(lse) != n {
		return nil, nil, nil, r.fail(invalid("rank %d: lse has %d elements, want B·H·Len = %d", r.me, len(lse), n), nil)
	}
	if err := r.handshake(ctx, backwardPhase); err != nil {
		return nil, nil, nil, r.fail(err, nil)
	}
	r.resetStats()
	d := p.D
	b := &backwardState[T]{q: r.queryChunks(q, d), o: r.queryChunks(o, d), do: r.queryChunks(do, d), lse: r.queryChunks(lse, 1)}
	longest := r.longestChunk()
	b.dq = make([][]T, len(b.q))
	for j := range b.dq {
		b.dq[j] = make([]T, len(b.q[j]))
	}
	b.tq, b.tk, b.tv = make([]T, r.bh*longest*d), make([]T, r.bhkv*longest*d), make([]T, r.bhkv*longest*d)
	n := r.maxKVLen()
	kvCur, contrib, accOut := make([]T, n), make([]T, n), make([]T, n)
	var kvNext, accIn []T
	if r.size > 1 {
		kvNext, accIn = make([]T, n), make([]T, n)
	}
	r.toBlock(k, v, kvCur)
	for s := range r.size {
		src := r.src(s)
		// One transfer per step, begun before the step's compute: the next
		// step's K and V, and the dK and dV sums of the previous step's
		// block, which the next rank needs for its own.
		var send, recv [][]T
		if s < r.size-1 {
			send, recv = append(send, kvCur[:r.kvLen(src)]), append(recv, kvNext[:r.kvLen(r.src(s+1))])
		}
		if s > 0 {
			send, recv = append(send, accOut[:r.kvLen(r.src(s-1))]), append(recv, accIn[:r.kvLen(src)])
		}
		var t transfer
		if len(send) > 0 {
			t = r.start(ctx, send, recv)
		}
		begin := time.Now()
		clear(contrib[:r.kvLen(src)])
		err := r.backwardBlock(src, kvCur, contrib, b)
		r.record(time.Since(begin), sent(send))
		if err != nil {
			return nil, nil, nil, r.fail(err, t)
		}
		if t != nil {
			if err := <-t; err != nil {
				return nil, nil, nil, r.fail(err, nil)
			}
		}
		if s > 0 {
			add(accIn[:r.kvLen(src)], contrib[:r.kvLen(src)])
			accIn, accOut = accOut, accIn
		} else {
			contrib, accOut = accOut, contrib
		}
		if s < r.size-1 {
			kvCur, kvNext = kvNext, kvCur
		}
	}
	home := accOut
	if r.size > 1 {
		// The last block's sums go to its owner, the next rank, and this
		// rank's own come back from the previous one.
		send := [][]T{accOut[:r.kvLen(r.src(r.size-1))]}
		if err := <-r.start(ctx, send, [][]T{accIn[:r.kvLen(r.me)]}); err != nil {
			return nil, nil, nil, r.fail(err, nil)
		}
		r.record(0, sent(send))
		home = accIn
	}
	dq, dk, dv = make([]T, len(q)), make([]T, len(k)), make([]T, len(v))
	r.fromChunks(b.dq, dq, d)
	r.fromBlock(home, dk, dv)
	return dq, dk, dv, nil
}

// backwardState is a backward's per-chunk copies of this rank's tensors,
// its dQ sums and the kernels' scratch results.
type backwardState[T kernels.Float] struct {
	q, o, do, lse, dq [][]T
	tq, tk, tv        []T
}

// backwardBlock adds the gradients of this rank's queries against rank
// src's block kv: dQ into b.dq, dK and dV into contrib (block form). The
// kernels' backward, given the global O and LSE, computes exactly the
// block's share: P = exp(S − LSE) is the block's part of the global
// softmax, and D = rowsum(dO∘O) is the global one.
func (r *rank[T]) backwardBlock(src int, kv, contrib []T, b *backwardState[T]) error {
	for i, qch := range r.Layout.ranks[r.me] {
		for j, kch := range r.Layout.ranks[src] {
			m := meet(r.p.Causal, qch, kch)
			if m == skip {
				continue
			}
			k, v := r.chunkKV(src, j, kv)
			dk, dv := r.chunkKV(src, j, contrib)
			p := r.p.block(qch.Len, kch.Len, m == diagonal)
			tq, tk, tv := b.tq[:p.QLen()], b.tk[:p.KLen()], b.tv[:p.KLen()]
			if err := r.bwd(p, b.q[i], k, v, b.o[i], b.lse[i], b.do[i], nil, tq, tk, tv); err != nil {
				return fmt.Errorf("ring: rank %d backward, keys of rank %d on %s: %w", r.me, src, r.Backend.Name(), err)
			}
			add(b.dq[i], tq)
			add(dk, tk)
			add(dv, tv)
		}
	}
	return nil
}

// add adds x into acc.
func add[T kernels.Float](acc, x []T) {
	for i, v := range x {
		acc[i] += v
	}
}

// failEarly fails the ring of a call that could not even start, when it
// has a transport to say so through.
func failEarly(rg Ring, err error) error {
	if rg.Transport != nil {
		rg.Transport.Fail(err)
	}
	return err
}
