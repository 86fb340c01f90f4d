package main

import (
	"fmt"
	"log"

	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

// run computes causal self-attention in a Gorgonia graph, and its gradients.
func run() error {
	const B, H, N, D = 1, 2, 128, 64 // batch, heads, sequence length, head dimension
	g := gorgonia.NewGraph()
	input := func(name string) *gorgonia.Node {
		// Distinct names: Gorgonia merges unnamed nodes of equal type and shape.
		return gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(B, H, N, D),
			gorgonia.WithName(name), gorgonia.WithInit(gorgonia.GlorotN(1)))
	}
	q, k, v := input("q"), input("k"), input("v")

	out, err := op.Attention(q, k, v, op.WithCausal(true)) // [B, H, N, D]
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
	fmt.Println("loss", loss.Value(), "dQ", dq.Shape())
	return nil
}
