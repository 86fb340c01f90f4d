package autograd

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gorgonia-flash/flashattention/kernels"
	"gorgonia.org/tensor"
)

// Config is what fixes an attention op's result, apart from its inputs.
type Config struct {
	Backend kernels.Backend
	Scale   float64 // already resolved: never the "default" placeholder
	Causal  bool
}

// String identifies the configuration completely; ops hash it, because
// gorgonia merges nodes whose hashes are equal.
func (c Config) String() string {
	return fmt.Sprintf("scale=%v causal=%v backend=%s", c.Scale, c.Causal, c.Backend.Name())
}

// Params combines c with the shapes of q ([B,H,Nq,D]) and k ([B,H,Nk,D]).
func (c Config) Params(q, k tensor.Shape) (kernels.Params, error) {
	if q.Dims() != 4 || k.Dims() != 4 {
		return kernels.Params{}, fmt.Errorf("%w: q has shape %v and k %v, want [B, H, N, D]", kernels.ErrInvalidParams, q, k)
	}
	return kernels.Params{B: q[0], H: q[1], Nq: q[2], Nk: k[2], D: q[3], Scale: c.Scale, Causal: c.Causal}, nil
}

// Saved carries the forward's LSE to the backward of the same op. Its zero
// value is empty; the forward stores into it at every run.
type Saved struct {
	mu  sync.Mutex
	lse tensor.Tensor // [B, H, Nq], the dtype of the inputs
}

// Store records the LSE of the latest forward run.
func (s *Saved) Store(lse tensor.Tensor) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lse = lse
}

// errNoForward reports a backward run without its forward.
var errNoForward = errors.New("attention backward ran before its forward: no saved LSE")

// load returns the saved LSE, checking it fits p.
func (s *Saved) load(p kernels.Params, dt tensor.Dtype) (tensor.Tensor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lse == nil {
		return nil, errNoForward
	}
	if s.lse.Dtype() != dt || s.lse.Shape().TotalSize() != p.LSELen() {
		return nil, fmt.Errorf("attention backward: saved LSE is %v %v, want %v of %d elements (was the forward run on these inputs?)",
			s.lse.Dtype(), s.lse.Shape(), dt, p.LSELen())
	}
	return s.lse, nil
}

// Dense returns the contiguous backing of a Gorgonia value, copying a view
// that is not contiguous.
func Dense(v any) (*tensor.Dense, error) {
	d, ok := v.(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("attention: got a %T, want a *tensor.Dense", v)
	}
	if d.RequiresIterator() {
		return d.Materialize().(*tensor.Dense), nil
	}
	return d, nil
}
