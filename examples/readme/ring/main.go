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

// run starts the R ranks, one goroutine each, and waits for them.
func run() error {
	layout, err := ring.ForMask(N, R, true) // zig-zag: balanced under the causal mask
	if err != nil {
		return err
	}
	ts, err := ring.LocalRing(R) // one transport per rank, in this process
	if err != nil {
		return err
	}
	errs := make([]error, R)
	var wg sync.WaitGroup
	for r := range R {
		wg.Go(func() { errs[r] = runRank(ts[r], layout) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runRank builds and runs rank t.Rank()'s graph: its queries, keys and
// values [B, H, layout.Len(rank), D], and the gradients of sum(out).
func runRank(t ring.Transport, layout ring.Layout) error {
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
		return err
	}
	loss := gorgonia.Must(gorgonia.Sum(out))
	if _, err := gorgonia.Grad(loss, q, k, v); err != nil {
		return err
	}
	m := gorgonia.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		return err
	}
	dq, err := q.Grad()
	if err != nil {
		return err
	}
	fmt.Printf("rank %d: %d positions %v, dQ %v\n", t.Rank(), n, layout.Chunks(t.Rank()), dq.Shape())
	return nil
}
