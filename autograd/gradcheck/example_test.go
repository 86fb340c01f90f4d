package gradcheck_test

import (
	"fmt"
	"log"

	"github.com/gorgonia-flash/flashattention/autograd/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Check the gradients of cost = Σ tanh(x·W) with respect to x and W, first
// with gorgonia.Grad on a TapeMachine, then with the LispMachine's DoDiff.
func ExampleCheck() {
	g := G.NewGraph()
	x := G.NewMatrix(g, tensor.Float64, G.WithShape(2, 3), G.WithName("x"),
		G.WithValue(tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float64{0.1, -0.2, 0.3, 0.4, -0.5, 0.6}))))
	W := G.NewMatrix(g, tensor.Float64, G.WithShape(3, 2), G.WithName("W"),
		G.WithValue(tensor.New(tensor.WithShape(3, 2), tensor.WithBacking([]float64{0.7, -0.8, 0.9, 1.0, -1.1, 1.2}))))
	cost := G.Must(G.Sum(G.Must(G.Tanh(G.Must(G.Mul(x, W))))))

	for _, opts := range [][]gradcheck.Option{nil, {gradcheck.WithLispMachine()}} {
		report, err := gradcheck.Check(cost, G.Nodes{x, W}, opts...)
		if err != nil {
			log.Fatal(err) // the graph could not be checked
		}
		fmt.Printf("%s: cost %.6f, mismatch: %v\n", report.Machine, report.Cost, report.Err())
		for _, in := range report.Inputs {
			fmt.Printf("  %s %v: %d elements checked, %d failed\n", in.Name, in.Shape, in.Checked, in.Failed)
		}
	}

	// W's gradient at the original inputs stays available after the check.
	dW, err := W.Grad()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("dcost/dW[0 1] = %.6f\n", dW.(tensor.Tensor).Data().([]float64)[1])
	// Output:
	// TapeMachine: cost -1.113959, mismatch: <nil>
	//   x (2, 3): 6 elements checked, 0 failed
	//   W (3, 2): 6 elements checked, 0 failed
	// LispMachine: cost -1.113959, mismatch: <nil>
	//   x (2, 3): 6 elements checked, 0 failed
	//   W (3, 2): 6 elements checked, 0 failed
	// dcost/dW[0 1] = 0.495389
}
