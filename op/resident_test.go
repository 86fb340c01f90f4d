package op

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/gorgonia-flash/flashattention/autograd"
	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/kernels"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// fakeResident is the CPU backend dressed as a kernels.Resident, counting the
// device states alive, so that the op's handling of their lifetime can be
// tested without a device.
type fakeResident struct {
	cpukernels.Backend
	mu                  sync.Mutex
	live, kept, fromKep int
}

type fakeState struct {
	b             *fakeResident
	p             kernels.Params
	q, k, v, o, l []float32
	released      bool
}

func (s *fakeState) Release() error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if !s.released {
		s.released = true
		s.b.live--
	}
	return nil
}

func (b *fakeResident) Name() string { return "fake-resident" }

func (b *fakeResident) ForwardKeep32(p kernels.Params, q, k, v, o, lse []float32) (kernels.DeviceState, error) {
	if err := b.Forward32(p, q, k, v, o, lse); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.live++
	b.kept++
	return &fakeState{b: b, p: p, q: slices.Clone(q), k: slices.Clone(k), v: slices.Clone(v), o: slices.Clone(o), l: slices.Clone(lse)}, nil
}

func (b *fakeResident) ForwardKeep64(p kernels.Params, q, k, v, o, lse []float64) (kernels.DeviceState, error) {
	return nil, errors.New("fake: float32 only")
}

func (b *fakeResident) BackwardKept32(st kernels.DeviceState, p kernels.Params, do, dlse, dq, dk, dv []float32) error {
	s := st.(*fakeState)
	if s.released || !s.p.Equal(p) {
		return errors.New("fake: state released or of other params")
	}
	b.mu.Lock()
	b.fromKep++
	b.mu.Unlock()
	return b.Backward32(p, s.q, s.k, s.v, s.o, s.l, do, dlse, dq, dk, dv)
}

func (b *fakeResident) BackwardKept64(kernels.DeviceState, kernels.Params, []float64, []float64, []float64, []float64, []float64) error {
	return errors.New("fake: float32 only")
}

func (b *fakeResident) counts() (live, kept, fromKept int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.live, b.kept, b.fromKep
}

// residentGraph builds sum(Attention(q, k, v)) on backend with values.
func residentGraph(t *testing.T, backend kernels.Backend) (*gorgonia.ExprGraph, *gorgonia.Node, gorgonia.Nodes) {
	t.Helper()
	g := gorgonia.NewGraph()
	rng := rand.New(rand.NewPCG(3, 3))
	var in gorgonia.Nodes
	for _, name := range []string{"q", "k", "v"} {
		data := make([]float32, 2*3*17*8)
		for i := range data {
			data[i] = float32(rng.NormFloat64())
		}
		val := tensor.New(tensor.WithShape(2, 3, 17, 8), tensor.WithBacking(data))
		in = append(in, gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(2, 3, 17, 8), gorgonia.WithName(name), gorgonia.WithValue(val)))
	}
	o, err := Attention(in[0], in[1], in[2], WithCausal(true), WithBackend(backend))
	if err != nil {
		t.Fatal(err)
	}
	return g, gorgonia.Must(gorgonia.Sum(o)), in
}

// TestDeviceStateLifetime checks, on a fake resident backend, that a
// training step uses the forward's state in the backward and ends holding
// none, that gradients equal the plain backend's, that a forward-only graph
// keeps nothing, and that a re-run forward and Release free what is held.
func TestDeviceStateLifetime(t *testing.T) {
	grads := func(backend kernels.Backend) [][]float32 {
		g, cost, in := residentGraph(t, backend)
		if _, err := gorgonia.Grad(cost, in...); err != nil {
			t.Fatal(err)
		}
		m := gorgonia.NewTapeMachine(g)
		defer m.Close()
		var out [][]float32
		for step := range 3 {
			if err := m.RunAll(); err != nil {
				t.Fatal(err)
			}
			if f, ok := backend.(*fakeResident); ok {
				if live, kept, used := f.counts(); live != 0 || kept != step+1 || used != step+1 {
					t.Fatalf("after step %d: %d states alive, %d kept, %d used by the backward; want 0, %d, %d", step, live, kept, used, step+1, step+1)
				}
			}
			if step < 2 {
				m.Reset()
			}
		}
		for _, n := range in {
			gv, err := n.Grad()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, slices.Clone(gv.Data().([]float32)))
		}
		return out
	}
	want := grads(cpukernels.Backend{})
	got := grads(&fakeResident{})
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("gradient %d differs from the plain backend's", i)
		}
	}

	// No backward nodes: nothing is kept.
	f := &fakeResident{}
	g, _, _ := residentGraph(t, f)
	m := gorgonia.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	if _, kept, _ := f.counts(); kept != 0 {
		t.Errorf("a forward-only graph kept %d states", kept)
	}

	// Backward nodes exist but only the forward runs (as when a later node
	// fails): each run replaces the last state, and Release frees it.
	f = &fakeResident{}
	g, cost, in := residentGraph(t, f)
	if _, err := gorgonia.Grad(cost, in...); err != nil {
		t.Fatal(err)
	}
	var a *autograd.Op
	for _, n := range g.AllNodes() {
		if op, ok := n.Op().(*autograd.Op); ok {
			a = op
		}
	}
	vals := []gorgonia.Value{in[0].Value(), in[1].Value(), in[2].Value()}
	for range 2 {
		if _, err := a.Do(vals...); err != nil {
			t.Fatal(err)
		}
	}
	if live, kept, _ := f.counts(); live != 1 || kept != 2 {
		t.Errorf("two forwards: %d states alive of %d kept, want 1 of 2", live, kept)
	}
	if err := Release(g); err != nil {
		t.Fatal(err)
	}
	if live, _, _ := f.counts(); live != 0 {
		t.Errorf("after Release: %d states alive", live)
	}
}
