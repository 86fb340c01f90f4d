package ring_test

import (
	"fmt"
	"log"
	"math"
	"sync"

	"github.com/gorgonia-flash/flashattention/op"
	"github.com/gorgonia-flash/flashattention/ring"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Causal attention over a sequence of 12 positions split across 2 ranks,
// each with its own graph and machine, against op.Attention on the whole
// sequence.
func Example() {
	const b, h, n, d, ranks = 1, 2, 12, 4, 2
	full := func(seed float64) *tensor.Dense {
		x := make([]float64, b*h*n*d)
		for i := range x {
			x[i] = math.Sin(seed * float64(i+1))
		}
		return tensor.New(tensor.WithShape(b, h, n, d), tensor.WithBacking(x))
	}
	q, k, v := full(1), full(2), full(3)

	layout, err := ring.ForMask(n, ranks, true) // zig-zag
	if err != nil {
		log.Fatal(err)
	}
	ts, err := ring.LocalRing(ranks)
	if err != nil {
		log.Fatal(err)
	}
	parts := make([][]*tensor.Dense, 3)
	for i, x := range []*tensor.Dense{q, k, v} {
		if parts[i], err = layout.Split(x); err != nil {
			log.Fatal(err)
		}
	}
	outs := make([]*tensor.Dense, ranks)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() {
			g := gorgonia.NewGraph()
			node := func(name string, x *tensor.Dense) *gorgonia.Node {
				return gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(x.Shape()...), gorgonia.WithName(name), gorgonia.WithValue(x))
			}
			out, err := ring.Attention(node("q", parts[0][r]), node("k", parts[1][r]), node("v", parts[2][r]),
				ring.Ring{Transport: ts[r], Layout: layout}, op.WithCausal(true))
			if err != nil {
				log.Fatal(err)
			}
			m := gorgonia.NewTapeMachine(g)
			defer m.Close()
			if err := m.RunAll(); err != nil {
				log.Fatal(err)
			}
			outs[r] = out.Value().(*tensor.Dense)
		})
	}
	wg.Wait()
	got, err := layout.Unsplit(outs)
	if err != nil {
		log.Fatal(err)
	}

	g := gorgonia.NewGraph()
	node := func(name string, x *tensor.Dense) *gorgonia.Node {
		return gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(x.Shape()...), gorgonia.WithName(name), gorgonia.WithValue(x))
	}
	want, err := op.Attention(node("q", q), node("k", k), node("v", v), op.WithCausal(true))
	if err != nil {
		log.Fatal(err)
	}
	m := gorgonia.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		log.Fatal(err)
	}
	var diff float64
	for i, x := range want.Value().Data().([]float64) {
		diff = max(diff, math.Abs(x-got.Float64s()[i]))
	}
	fmt.Println("ring equals single-device attention:", diff < 1e-12)
	// Output: ring equals single-device attention: true
}
