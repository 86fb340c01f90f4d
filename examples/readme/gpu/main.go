// Command gpu is the README's program with attention on the GPU in BF16.
// Build it with -tags flashgpu; without the tag it exits with op.ErrNoGPU.
package main

import (
	"errors"
	"fmt"
	"log"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() (err error) {
	const B, H, N, D = 1, 2, 128, 64
	g := gorgonia.NewGraph()
	input := func(name string) *gorgonia.Node {
		return gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(B, H, N, D),
			gorgonia.WithName(name), gorgonia.WithInit(gorgonia.GlorotN(1)))
	}
	q, k, v := input("q"), input("k"), input("v")

	out, err := op.Attention(q, k, v, op.WithCausal(true),
		op.WithDevice(op.GPU), op.WithPrecision(kernels.BF16))
	if err != nil {
		return err // wraps op.ErrNoGPU: built without -tags flashgpu, or no device
	}
	// Frees the GPU backend that the op opened, and all its device memory.
	defer func() { err = errors.Join(err, op.CloseGPU()) }()

	loss := gorgonia.Must(gorgonia.Sum(out))
	if _, err := gorgonia.Grad(loss, q, k, v); err != nil {
		return err
	}
	m := gorgonia.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		return err
	}
	fmt.Println("loss", loss.Value())
	return nil
}
