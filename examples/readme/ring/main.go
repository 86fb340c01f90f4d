// Command ring is the README's ring attention program: causal attention
// over one sequence split across R ranks of this process, each rank with
// its own Gorgonia graph over its own positions and its own machine,
// forward and backward.
package main

import (
	"errors"
	"fmt"
	"log"
	"sync"

	"github.com/gorgonia-flash/flashattention/op"
	"github.com/gorgonia-flash/flashattention/ring"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

const B, H, N, D, R = 1, 2, 256, 32, 2 // batch, heads, whole sequence, head dimension, ranks

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

// run builds the R ranks' graphs one after the other, then runs their
// machines concurrently, one goroutine each. (gorgonia.Grad is not safe
// for concurrent use: it shares package-level constant nodes between
// graphs.)
func run() error {
	layout, err := ring.ForMask(N, R, true) // zig-zag: balanced under the causal mask
	if err != nil {
		return err
	}
	ts, err := ring.LocalRing(R) // one transport per rank, in this process
	if err != nil {
		return err
	}
	ranks := make([]*rank, R)
	for r := range R {
		if ranks[r], err = build(ts[r], layout); err != nil {
			return err
		}
		defer ranks[r].m.Close()
	}
	errs := make([]error, R)
	var wg sync.WaitGroup
	for r := range R {
		wg.Go(func() { errs[r] = ranks[r].run() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// rank is one rank's graph and machine.
type rank struct {
	t      ring.Transport
	layout ring.Layout
	q      *gorgonia.Node
	m      gorgonia.VM
}

// build makes rank t.Rank()'s graph: its queries, keys and values [B, H,
// layout.Len(rank), D], and the gradients of sum(out).
func build(t ring.Transport, layout ring.Layout) (*rank, error) {
	g := gorgonia.NewGraph()
	n := layout.Len(t.Rank()) // this rank's positions (layout.Split cuts a whole tensor)
	input := func(name string) *gorgonia.Node {
		return gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(B, H, n, D),
			gorgonia.WithName(name), gorgonia.WithInit(gorgonia.GlorotN(1)))
	}
	q, k, v := input("q"), input("k"), input("v")

	out, err := ring.Attention(q, k, v, ring.Ring{Transport: t, Layout: layout},
		op.WithCausal(true)) // [B, H, n, D]: this rank's rows of the whole attention
	if err != nil {
		return nil, err
	}
	loss := gorgonia.Must(gorgonia.Sum(out))
	if _, err := gorgonia.Grad(loss, q, k, v); err != nil {
		return nil, err
	}
	return &rank{t: t, layout: layout, q: q, m: gorgonia.NewTapeMachine(g)}, nil
}

// run runs the rank's forward and backward, which exchange blocks with
// the other ranks as they run.
func (rk *rank) run() error {
	if err := rk.m.RunAll(); err != nil {
		return err
	}
	dq, err := rk.q.Grad()
	if err != nil {
		return err
	}
	r := rk.t.Rank()
	fmt.Printf("rank %d: %d positions %v, dQ %v\n", r, rk.layout.Len(r), rk.layout.Chunks(r), dq.Shape())
	return nil
}
