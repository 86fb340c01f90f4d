package op_test

import (
	"math"
	"runtime"
	"testing"

	"github.com/gorgonia-flash/flashattention/internal/naivegraph"
	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// allocatedBytes builds cost = sum(attention(q, k, v)²) with N = Nq = Nk,
// takes its gradients and runs it once on a TapeMachine, and returns the
// bytes allocated on the heap meanwhile.
func allocatedBytes(t *testing.T, n int, naive bool) uint64 {
	t.Helper()
	const b, h, d = 1, 2, 32
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g := gorgonia.NewGraph()
	input := func(name string) *gorgonia.Node {
		return gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(b, h, n, d),
			gorgonia.WithName(name), gorgonia.WithInit(gorgonia.Gaussian(0, 1)))
	}
	q, k, v := input("q"), input("k"), input("v")
	var o *gorgonia.Node
	var err error
	if naive {
		o, err = naivegraph.Attention(q, k, v, 1/math.Sqrt(d), true)
	} else {
		o, err = op.Attention(q, k, v, op.WithCausal(true))
	}
	if err != nil {
		t.Fatal(err)
	}
	cost := gorgonia.Must(gorgonia.Sum(gorgonia.Must(gorgonia.Square(o))))
	if _, err := gorgonia.Grad(cost, q, k, v); err != nil {
		t.Fatal(err)
	}
	m := gorgonia.NewTapeMachine(g)
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	m.Close()
	return after.TotalAlloc - before.TotalAlloc
}

// TestMemoryIsLinear shows that forward+backward through a graph allocates
// O(N) bytes with op.Attention and O(N²) with the naive graph: from N to
// 4N, about 4× against about 16×.
func TestMemoryIsLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 300 MB for the naive graph")
	}
	const n = 512
	for _, c := range []struct {
		name     string
		naive    bool
		min, max float64 // accepted growth from N to 4N
	}{
		// Linear terms give 4×; fixed per-graph costs can only lower it.
		{"flash", false, 2.5, 5},
		// Quadratic terms give 16×; the linear ones lower it a little.
		{"naive", true, 12, 17},
	} {
		small, large := allocatedBytes(t, n, c.naive), allocatedBytes(t, 4*n, c.naive)
		growth := float64(large) / float64(small)
		t.Logf("%s: N=%d %.2f MiB, N=%d %.2f MiB, growth %.2f×", c.name, n, float64(small)/(1<<20), 4*n, float64(large)/(1<<20), growth)
		if growth < c.min || growth > c.max {
			t.Errorf("%s: allocation grew %.2f× from N=%d to N=%d, want between %v× and %v×", c.name, growth, n, 4*n, c.min, c.max)
		}
	}
}
