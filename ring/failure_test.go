package ring

import (
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/gorgonia-flash/flashattention/cpukernels"
	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/tensor"
)

// errDevice stands for a backend's failure.
var errDevice = errors.New("device on fire")

// failing is the CPU backend but for the forward or the backward, which
// fails.
type failing struct {
	cpukernels.Backend
	backward bool
}

func (f failing) Forward64(p kernels.Params, q, k, v, o, lse []float64) error {
	if !f.backward {
		return errDevice
	}
	return f.Backend.Forward64(p, q, k, v, o, lse)
}

func (f failing) Backward64(p kernels.Params, q, k, v, o, lse, do, dlse, dq, dk, dv []float64) error {
	if f.backward {
		return errDevice
	}
	return f.Backend.Backward64(p, q, k, v, o, lse, do, dlse, dq, dk, dv)
}

// TestFailingRankFailsTheRing makes one rank's backend fail, in the
// forward and in the backward: that rank returns the backend's error,
// every other an error wrapping ErrAborted, all at once rather than after
// the timeout.
func TestFailingRankFailsTheRing(t *testing.T) {
	l, err := ZigZag(20, 4)
	if err != nil {
		t.Fatal(err)
	}
	c := ringCase{"R=4", Problem{B: 1, H: 2, D: 4, Scale: 0.5, Causal: true}, l}
	before := runtime.NumGoroutine()
	for _, backward := range []bool{false, true} {
		g := randomGlobal[float64](c, 1)
		begin := time.Now()
		errs := runRing(c, g, func(r int) kernels.Backend {
			if r == 2 {
				return failing{backward: backward}
			}
			return cpukernels.Backend{}
		})
		if d := time.Since(begin); d > 5*time.Second {
			t.Errorf("backward=%v: the ring took %v to fail, its timeout is 10 s", backward, d)
		}
		for r, err := range errs {
			switch {
			case r == 2 && !errors.Is(err, errDevice):
				t.Errorf("backward=%v: failing rank: %v, want the backend's error", backward, err)
			case r != 2 && !errors.Is(err, ErrAborted):
				t.Errorf("backward=%v: rank %d: %v, want ErrAborted", backward, r, err)
			}
		}
	}
	// No transfer is left running: the goroutines come back to their
	// number before the runs (the backends' own end as their calls do).
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("%d goroutines after the failed runs, %d before", runtime.NumGoroutine(), before)
			break
		}
	}
}

// TestMissingRankTimesOut runs two ranks of a ring of three: both return
// within about the timeout, with errors wrapping ErrTimeout or ErrAborted.
func TestMissingRankTimesOut(t *testing.T) {
	l, err := Contiguous(9, 3)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := LocalRing(3)
	if err != nil {
		t.Fatal(err)
	}
	p := Problem{B: 1, H: 1, D: 2, Scale: 1}
	errs := make(chan error, 2)
	begin := time.Now()
	for r := range 2 {
		go func() {
			x := make([]float64, 3*2)
			rg := Ring{Transport: ts[r], Layout: l, Backend: cpukernels.Backend{}, Timeout: 100 * time.Millisecond}
			_, _, err := Forward(t.Context(), rg, p, x, x, x)
			errs <- err
		}()
	}
	timedOut := false
	for range 2 {
		err := <-errs
		if !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrAborted) {
			t.Errorf("got %v, want ErrTimeout or ErrAborted", err)
		}
		timedOut = timedOut || errors.Is(err, ErrTimeout)
	}
	if !timedOut {
		t.Error("no rank reported the timeout")
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Errorf("took %v with a timeout of 100 ms", d)
	}
}

// TestBadInputFailsTheRing gives one rank a q of the wrong length, in
// another run a different scale, in a third has it run its backward while
// the others run their forward: the rank that finds the problem returns
// an error wrapping op.ErrInvalidInput, the others ErrAborted.
func TestBadInputFailsTheRing(t *testing.T) {
	l, err := Contiguous(9, 3)
	if err != nil {
		t.Fatal(err)
	}
	p := Problem{B: 1, H: 1, D: 2, Scale: 1}
	for _, bad := range []string{"q too short", "another scale", "backward"} {
		ts, err := LocalRing(3)
		if err != nil {
			t.Fatal(err)
		}
		errs := make([]error, 3)
		done := make(chan struct{})
		for r := range 3 {
			go func() {
				defer func() { done <- struct{}{} }()
				x, q, pr := make([]float64, 3*2), make([]float64, 3*2), p
				if r == 1 && bad == "q too short" {
					q = q[:4]
				}
				if r == 1 && bad == "another scale" {
					pr.Scale = 2
				}
				rg := Ring{Transport: ts[r], Layout: l, Backend: cpukernels.Backend{}, Timeout: 10 * time.Second}
				if r == 1 && bad == "backward" {
					_, _, _, errs[r] = Backward(t.Context(), rg, pr, q, x, x, x, make([]float64, 3), x)
					return
				}
				_, _, errs[r] = Forward(t.Context(), rg, pr, q, x, x)
			}()
		}
		for range 3 {
			<-done
		}
		invalid := 0
		for r, err := range errs {
			switch {
			case errors.Is(err, op.ErrInvalidInput):
				invalid++
			case !errors.Is(err, ErrAborted):
				t.Errorf("%s: rank %d: %v, want ErrInvalidInput or ErrAborted", bad, r, err)
			}
		}
		if invalid == 0 {
			t.Errorf("%s: no rank reported the invalid input: %v", bad, errs)
		}
	}
}

// TestLayouts checks the splits and their refusals.
func TestLayouts(t *testing.T) {
	zz, err := ZigZag(10, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Chunks of 3, 3, 2, 2: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
	if got := zz.Chunks(0); len(got) != 2 || got[0] != (Chunk{0, 3}) || got[1] != (Chunk{8, 2}) {
		t.Errorf("rank 0 of ZigZag(10, 2): %v", got)
	}
	if got := zz.Chunks(1); len(got) != 2 || got[0] != (Chunk{3, 3}) || got[1] != (Chunk{6, 2}) {
		t.Errorf("rank 1 of ZigZag(10, 2): %v", got)
	}
	// Split and Unsplit are inverses, and Split gives rank 1 of the
	// zig-zag positions 3, 4, 5, 6, 7 of every head.
	x := tensor.New(tensor.WithShape(1, 2, 10, 1), tensor.WithBacking(make([]float64, 20)))
	for i := range 20 {
		x.Float64s()[i] = float64(i)
	}
	parts, err := zz.Split(x)
	if err != nil {
		t.Fatal(err)
	}
	if got := parts[1].Float64s(); !slices.Equal(got, []float64{3, 4, 5, 6, 7, 13, 14, 15, 16, 17}) {
		t.Errorf("rank 1's part %v", got)
	}
	back, err := zz.Unsplit(parts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Float64s(), x.Float64s()) {
		t.Errorf("Unsplit(Split(x)) = %v", back.Float64s())
	}
	for _, f := range []func() (Layout, error){
		func() (Layout, error) { return ZigZag(3, 2) },
		func() (Layout, error) { return Contiguous(1, 2) },
		func() (Layout, error) { return FromChunks(4, [][]Chunk{{{0, 2}}, {{1, 3}}}) },
		func() (Layout, error) { return FromChunks(4, [][]Chunk{{{0, 2}}, {{2, 1}}}) },
		func() (Layout, error) { return FromChunks(4, [][]Chunk{{{0, 4}}, {}}) },
	} {
		if _, err := f(); !errors.Is(err, op.ErrInvalidInput) {
			t.Errorf("got %v, want ErrInvalidInput", err)
		}
	}
}
