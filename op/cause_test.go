package op_test

import (
	"errors"
	"testing"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
)

var errBoom = errors.New("boom")

// failingBackend is the CPU backend with its float64 forward or backward
// failing with an error that wraps errBoom, as a device might fail.
type failingBackend struct {
	cpukernels.Backend
	forward bool
}

func (b failingBackend) Forward64(p kernels.Params, q, k, v, o, lse []float64) error {
	if b.forward {
		return errors.Join(errors.New("device lost"), errBoom)
	}
	return b.Backend.Forward64(p, q, k, v, o, lse)
}

func (b failingBackend) Backward64(p kernels.Params, q, k, v, o, lse, do, dlse, dq, dk, dv []float64) error {
	return errors.Join(errors.New("device lost"), errBoom)
}

// TestCause checks that op.Cause recovers the backend's error from what
// either machine returns, whether the forward or the backward failed.
func TestCause(t *testing.T) {
	c := graphCase{1, 2, 5, 7, 4, false}
	for _, forward := range []bool{true, false} {
		for _, lisp := range []bool{false, true} {
			if lisp && raceDetector {
				continue // gorgonia's own race on this path; see raceDetector
			}
			gr := buildGraph(t, c, tensor.Float64, randomInputs(c.params(), 1), op.WithBackend(failingBackend{forward: forward}))
			var m gorgonia.VM
			if lisp {
				m = gorgonia.NewLispMachine(gr.g)
			} else {
				if _, err := gorgonia.Grad(gr.c, gr.q, gr.k, gr.v); err != nil {
					t.Fatal(err)
				}
				m = gorgonia.NewTapeMachine(gr.g)
			}
			err := m.RunAll()
			m.Close()
			if err == nil {
				t.Fatalf("forward fails=%v lisp=%v: RunAll succeeded", forward, lisp)
			}
			if !errors.Is(op.Cause(err), errBoom) {
				t.Errorf("forward fails=%v lisp=%v: op.Cause(%v) does not wrap the backend's error", forward, lisp, err)
			}
		}
	}
	if err := errors.New("plain"); op.Cause(err) != err {
		t.Error("op.Cause changed an error that no machine wrapped")
	}
}
