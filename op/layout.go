package op

import "fmt"

// Layout is the order of the axes of q, k, v and the output.
type Layout int

const (
	// BHND is [B, H, N, D]: heads before positions. The default, and the
	// order the kernels work in.
	BHND Layout = iota
	// BNHD is [B, N, H, D]: positions before heads, what a projection to
	// H·D features reshaped without a transpose gives, and FlashAttention's
	// own layout. k and v are then [B, Nk, Hkv, D] and the output
	// [B, Nq, H, D]; AttentionLSE's LSE stays [B, H, Nq].
	BNHD
)

func (l Layout) String() string {
	switch l {
	case BHND:
		return "BHND"
	case BNHD:
		return "BNHD"
	}
	return fmt.Sprintf("Layout(%d)", int(l))
}

// WithLayout gives the axis order of q, k, v and the result: BHND (the
// default) or BNHD. With BNHD the op copies q, k and v to BHND for the
// kernels and the output (and the gradients) back, a row of D elements at
// a time: O(N) memory and a copy at memory speed, not a kernel that reads
// the strides in place.
func WithLayout(l Layout) Option { return func(c *config) { c.layout = l } }

// check refuses a Layout that is not one of the constants.
func (l Layout) check() error {
	if l != BHND && l != BNHD {
		return invalid("layout %v: want BHND or BNHD", l)
	}
	return nil
}
