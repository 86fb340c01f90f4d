package autograd

import (
	"github.com/gorgonia-flash/flashattention/internal/hostmem"
	"github.com/gorgonia-flash/flashattention/kernels"
	"gorgonia.org/tensor"
)

// With Config.BNHD, q, k, v, O and their gradients are [B, N, H, D] in the
// graph and [B, H, N, D] for the kernels. The Op moves them between the two
// in Do, a whole row of D elements at a time: a copy at memory speed and
// O(N) memory. (Gorgonia transposes around the op went element by element,
// and made a forward and backward at N = 2048 1.5–1.9× slower.)

// headsFirst returns the BNHD shape s as BHND.
func headsFirst(s tensor.Shape) tensor.Shape {
	return tensor.Shape{s[0], s[2], s[1], s[3]}
}

// relayout returns a copy of x in which part i, the tensor parts[i] =
// [a, b, c, d] stored after the parts before it, becomes [a, c, b, d];
// elements after the last part are copied as they are. The copy is flat
// (shape [len]); callers reshape it.
func relayout[T kernels.Float](x *tensor.Dense, parts ...[4]int) (*tensor.Dense, error) {
	src := x.Data().([]T)
	if err := hostmem.CheckElems[T](len(src)); err != nil {
		return nil, err
	}
	dst := make([]T, len(src))
	at := 0
	for _, s := range parts {
		a, b, c, d := s[0], s[1], s[2], s[3]
		for i := range a {
			for j := range b {
				for k := range c {
					copy(dst[at+((i*c+k)*b+j)*d:][:d], src[at+((i*b+j)*c+k)*d:][:d])
				}
			}
		}
		at += a * b * c * d
	}
	copy(dst[at:], src[at:])
	return tensor.New(tensor.WithShape(len(dst)), tensor.WithBacking(dst)), nil
}
