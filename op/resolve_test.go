package op_test

import (
	"errors"
	"testing"

	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/op"
)

// TestResolve checks that Resolve reports the options as Attention reads
// them, defaults included, and refuses what Attention refuses.
func TestResolve(t *testing.T) {
	r, err := op.Resolve(16)
	if err != nil {
		t.Fatal(err)
	}
	if r.Params.Scale != 0.25 || r.Params.Causal || r.Backend.Name() != "cpu" || r.Layout != op.BHND || r.Lengths || r.Bias || r.KVCache {
		t.Errorf("defaults: %+v", r)
	}
	r, err = op.Resolve(16, op.WithCausal(true), op.WithScale(2), op.WithSoftcap(5), op.WithWindow(3, -1),
		op.WithBackend(cpukernels.Backend{Workers: 1}), op.WithLengths(nil, nil), op.WithLayout(op.BNHD))
	if err != nil {
		t.Fatal(err)
	}
	p := r.Params
	if p.Scale != 2 || !p.Causal || p.Softcap != 5 || !p.Window.On || p.Window.Left != 3 || p.Window.Right != -1 || r.Layout != op.BNHD || r.Lengths {
		t.Errorf("options: %+v", r)
	}
	if r, err := op.Resolve(16, op.WithKVCache(nil)); err != nil || !r.KVCache {
		t.Errorf("WithKVCache: %+v, %v", r, err)
	}
	if _, err := op.Resolve(16, op.WithBackend(nil)); !errors.Is(err, op.ErrInvalidInput) {
		t.Errorf("WithBackend(nil): %v, want ErrInvalidInput", err)
	}
	if _, err := op.Resolve(16, op.WithLayout(op.Layout(7))); !errors.Is(err, op.ErrInvalidInput) {
		t.Errorf("a bad layout: %v, want ErrInvalidInput", err)
	}
}
