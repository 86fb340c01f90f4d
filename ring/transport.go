package ring

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gorgonia-flash/flashattention/op"
)

// A Transport moves messages one step around a ring of Size() ranks: from
// each rank to rank+1, from the last to rank 0. The algorithm sees only
// this interface; LocalRing implements it with goroutines and channels, and
// in a flashgpu build NCCL over NCCL and DeviceRing through one GPU's
// memory.
//
// SendRecv sends the parts of send to rank (Rank()+1) mod Size() and
// receives into the parts of recv what rank (Rank()−1) mod Size() sends in
// its matching call. Calls are matched in order: the k-th call of a rank
// pairs with the k-th call of each neighbour, so every rank must make the
// same sequence of calls. recv must have as many parts as the sender's
// send, each of the same length; a mismatch is an error on both sides.
// SendRecv returns once its send has been delivered and its receive
// completed; until then the caller must not write send nor read recv, and
// after it returns the transport keeps no reference to either. Size 1 is
// a ring of one rank: SendRecv copies send into recv.
//
// SendRecv must return when ctx is done, with an error wrapping
// ErrTimeout (and ctx.Err()) on a deadline, and must return promptly with
// an error wrapping ErrAborted once any rank of the ring has called Fail.
// A transport that gives up on a call for either reason fails the whole
// ring, so that no rank is left waiting for it. A failed ring stays
// failed: every later call returns ErrAborted, and the ranks need a new
// ring.
//
// Fail tells every rank that this rank cannot go on, with the reason
// cause; the first call wins, later ones are ignored. A Transport is used
// by one goroutine at a time, but Fail may be called from any goroutine.
type Transport interface {
	Rank() int
	Size() int
	SendRecv(ctx context.Context, send, recv [][]byte) error
	Fail(cause error)
}

var (
	// ErrAborted is wrapped by the errors of every rank once a rank of the
	// ring has failed; the error names the rank and its reason.
	ErrAborted = errors.New("ring aborted")
	// ErrTimeout is wrapped by the error of a transfer that did not
	// complete within the ring's timeout.
	ErrTimeout = errors.New("ring transfer timed out")
)

// LocalRing returns the transports of a ring of size ranks in this
// process, one per rank, to be used by one goroutine each. Messages are
// copied once, from the sender's buffers into the receiver's.
func LocalRing(size int) ([]Transport, error) {
	if size < 1 {
		return nil, invalid("a ring of %d ranks", size)
	}
	g := &localGroup{inbox: make([]chan *parcel, size), failed: make(chan struct{})}
	ts := make([]Transport, size)
	for r := range size {
		// Room for one parcel: a rank's next send can only start after its
		// previous one was taken, so one slot is never full when sending.
		g.inbox[r] = make(chan *parcel, 1)
		ts[r] = &local{g: g, rank: r}
	}
	return ts, nil
}

// localGroup is what the ranks of a LocalRing share.
type localGroup struct {
	inbox    []chan *parcel // inbox[r]: the parcel rank r is to receive
	failOnce sync.Once
	failed   chan struct{} // closed by the first Fail
	cause    error         // set before failed is closed
}

// parcel is one SendRecv's outgoing message. The receiver copies it under
// mu unless the sender withdrew it first, so that a sender that gives up
// can return knowing no one reads its buffers any more.
type parcel struct {
	mu        sync.Mutex
	parts     [][]byte
	withdrawn bool
	done      chan error // the receiver's verdict, sent once
}

// local is one rank of a LocalRing.
type local struct {
	g    *localGroup
	rank int
}

func (t *local) Rank() int { return t.rank }
func (t *local) Size() int { return len(t.g.inbox) }

func (t *local) Fail(cause error) {
	t.g.failOnce.Do(func() {
		t.g.cause = fmt.Errorf("%w by rank %d: %v", ErrAborted, t.rank, cause)
		close(t.g.failed)
	})
}

// SendRecv implements Transport.
func (t *local) SendRecv(ctx context.Context, send, recv [][]byte) error {
	size := t.Size()
	p := &parcel{parts: send, done: make(chan error, 1)}
	select {
	case t.g.inbox[(t.rank+1)%size] <- p:
	case <-t.g.failed:
		return t.g.cause
	case <-ctx.Done():
		return t.giveUp(ctx, "sending to", (t.rank+1)%size)
	}
	if err := t.receive(ctx, recv); err != nil {
		t.withdraw(p)
		return err
	}
	select {
	case err := <-p.done:
		return err
	case <-t.g.failed:
		t.withdraw(p)
		return t.g.cause
	case <-ctx.Done():
		// Fail first, so that a receiver finding the parcel withdrawn
		// finds the ring's cause set too.
		err := t.giveUp(ctx, "waiting for", (t.rank+1)%size)
		t.withdraw(p)
		return err
	}
}

// receive takes the previous rank's parcel and copies it into recv.
func (t *local) receive(ctx context.Context, recv [][]byte) error {
	prev := (t.rank + t.Size() - 1) % t.Size()
	var p *parcel
	select {
	case p = <-t.g.inbox[t.rank]:
	case <-t.g.failed:
		return t.g.cause
	case <-ctx.Done():
		return t.giveUp(ctx, "receiving from", prev)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.withdrawn {
		return t.g.cause
	}
	if err := sameSizes(p.parts, recv); err != nil {
		err = fmt.Errorf("ring: rank %d receiving from rank %d: %w", t.rank, prev, err)
		t.Fail(err)
		p.done <- t.g.cause
		return err
	}
	for i := range recv {
		copy(recv[i], p.parts[i])
	}
	p.done <- nil
	return nil
}

// withdraw makes sure no one reads p's buffers after this returns.
func (t *local) withdraw(p *parcel) {
	p.mu.Lock()
	p.withdrawn = true
	p.mu.Unlock()
}

// giveUp fails the ring because ctx ended while this rank waited on peer,
// and returns the error saying so.
func (t *local) giveUp(ctx context.Context, what string, peer int) error {
	err := fmt.Errorf("ring: rank %d %s rank %d: %w", t.rank, what, peer, ctx.Err())
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	t.Fail(err)
	return err
}

// sameSizes reports whether recv can take sent: as many parts, each of
// the same length.
func sameSizes(sent, recv [][]byte) error {
	if len(sent) != len(recv) {
		return fmt.Errorf("%w: %d parts sent, %d expected", op.ErrInvalidInput, len(sent), len(recv))
	}
	for i := range sent {
		if len(sent[i]) != len(recv[i]) {
			return fmt.Errorf("%w: part %d has %d bytes, %d expected (do the ranks agree on the problem and the layout?)", op.ErrInvalidInput, i, len(sent[i]), len(recv[i]))
		}
	}
	return nil
}
