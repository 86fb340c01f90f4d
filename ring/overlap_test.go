package ring

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/kernels"
)

// signalling is the CPU backend that reports each call's start on
// started before computing.
type signalling struct {
	cpukernels.Backend
	started chan struct{}
}

func (s signalling) Forward64(p kernels.Params, q, k, v, o, lse []float64) error {
	s.started <- struct{}{}
	return s.Backend.Forward64(p, q, k, v, o, lse)
}

func (s signalling) Backward64(p kernels.Params, q, k, v, o, lse, do, dlse, dq, dk, dv []float64) error {
	s.started <- struct{}{}
	return s.Backend.Backward64(p, q, k, v, o, lse, do, dlse, dq, dk, dv)
}

// gated is a transport whose step transfers (the calls gate says) do not
// begin before the rank's compute of that step has: a ring that waited for
// its transfer before computing would never get past its first step.
type gated struct {
	Transport
	started <-chan struct{}
	gate    func(call int) bool
	calls   int
}

func (g *gated) SendRecv(ctx context.Context, send, recv [][]byte) error {
	g.calls++
	if g.gate(g.calls) {
		select {
		case <-g.started:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Transport.SendRecv(ctx, send, recv)
}

// TestTransferOverlapsCompute checks that each step's transfer runs while
// the step computes: the transport holds every step's transfer until the
// step's kernel call has begun. The contiguous layout without a mask makes
// one kernel call per step. Calls: 1 is the handshake, then one per step
// with a transfer (R−1 in the forward, R in the backward, whose last call
// brings dK, dV home after the last step).
func TestTransferOverlapsCompute(t *testing.T) {
	const ranks = 3
	l, err := Contiguous(9, ranks)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := LocalRing(ranks)
	if err != nil {
		t.Fatal(err)
	}
	p := Problem{B: 1, H: 1, D: 2, Scale: 1}
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() {
			started := make(chan struct{}, 2*ranks)
			g := &gated{Transport: ts[r], started: started}
			rg := Ring{Transport: g, Layout: l, Backend: signalling{started: started}, Timeout: 2 * time.Second}
			x := make([]float64, 3*2)
			g.gate = func(call int) bool { return call >= 2 && call <= ranks }
			o, lse, err := Forward(t.Context(), rg, p, x, x, x)
			if err != nil {
				errs[r] = err
				return
			}
			g.calls = 0
			g.gate = func(call int) bool { return call >= 2 && call <= ranks+1 }
			_, _, _, errs[r] = Backward(t.Context(), rg, p, x, x, x, o, lse, x)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
