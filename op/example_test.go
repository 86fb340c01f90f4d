package op_test

import (
	"fmt"
	"log"

	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Causal self-attention over 4 positions with 2 heads of dimension 8, and
// its gradients through gorgonia.Grad.
func Example() {
	g := gorgonia.NewGraph()
	shape := []int{1, 2, 4, 8} // [B, H, N, D]
	input := func(name string) *gorgonia.Node {
		// Give inputs distinct names: gorgonia merges identical unnamed nodes.
		return gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(shape...),
			gorgonia.WithName(name), gorgonia.WithInit(gorgonia.Ones()))
	}
	q, k, v := input("q"), input("k"), input("v")

	out, err := op.Attention(q, k, v, op.WithCausal(true))
	if err != nil {
		log.Fatal(err)
	}
	loss := gorgonia.Must(gorgonia.Sum(out))
	if _, err := gorgonia.Grad(loss, q, k, v); err != nil {
		log.Fatal(err)
	}
	m := gorgonia.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		log.Fatal(err)
	}
	dv, _ := v.Grad()
	fmt.Println("output shape:", out.Shape())
	fmt.Println("loss:", loss.Value())
	// With equal scores, query i spreads its weight evenly over keys 0…i,
	// so dV for key j is Σ_{i≥j} 1/(i+1) in every column.
	grad := dv.Data().([]float64)
	for j := range 4 {
		fmt.Printf("dV[key %d] = %.4f\n", j, grad[j*8])
	}
	// Output:
	// output shape: (1, 2, 4, 8)
	// loss: 64
	// dV[key 0] = 2.0833
	// dV[key 1] = 1.0833
	// dV[key 2] = 0.5833
	// dV[key 3] = 0.2500
}
