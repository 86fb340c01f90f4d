package ring

import (
	"fmt"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/tensor"
)

// A Chunk is a contiguous range [Start, Start+Len) of global sequence
// positions.
type Chunk struct{ Start, Len int }

// A Layout says which chunks of a global sequence of N positions each rank
// holds. A rank's local sequence is its chunks concatenated in the order
// the Layout lists them; together the chunks of all ranks tile [0, N)
// exactly once. Every rank of a ring must use the same Layout.
type Layout struct {
	n     int
	ranks [][]Chunk
}

// Contiguous cuts n positions into ranks consecutive chunks, one per rank,
// whose lengths differ by at most 1 (the first n mod ranks ranks get one
// more). Each rank must get at least one position.
func Contiguous(n, ranks int) (Layout, error) {
	if ranks < 1 || n < ranks {
		return Layout{}, invalid("contiguous layout of %d positions over %d ranks: want ranks ≥ 1 and at least one position per rank", n, ranks)
	}
	chunks := evenChunks(n, ranks)
	l := Layout{n: n, ranks: make([][]Chunk, ranks)}
	for r := range ranks {
		l.ranks[r] = []Chunk{chunks[r]}
	}
	return l, nil
}

// ZigZag cuts n positions into 2·ranks consecutive chunks whose lengths
// differ by at most 1 and gives rank r chunks r and 2·ranks−1−r, in that
// order. Under a causal mask every rank then does about the same work: the
// early chunk sees few keys, the late one many. n must be at least
// 2·ranks.
func ZigZag(n, ranks int) (Layout, error) {
	if ranks < 1 || n < 2*ranks {
		return Layout{}, invalid("zig-zag layout of %d positions over %d ranks: want ranks ≥ 1 and n ≥ 2·ranks", n, ranks)
	}
	chunks := evenChunks(n, 2*ranks)
	l := Layout{n: n, ranks: make([][]Chunk, ranks)}
	for r := range ranks {
		l.ranks[r] = []Chunk{chunks[r], chunks[2*ranks-1-r]}
	}
	return l, nil
}

// ForMask is the recommended layout of n positions over ranks: ZigZag
// under the causal mask, which balances the ranks' work, Contiguous
// otherwise, where every split does the same work and one chunk per rank
// makes the fewest kernel calls.
func ForMask(n, ranks int, causal bool) (Layout, error) {
	if causal {
		return ZigZag(n, ranks)
	}
	return Contiguous(n, ranks)
}

// evenChunks cuts [0, n) into parts consecutive chunks, the first n mod
// parts one position longer than the others.
func evenChunks(n, parts int) []Chunk {
	out := make([]Chunk, parts)
	start := 0
	for i := range out {
		size := n / parts
		if i < n%parts {
			size++
		}
		out[i] = Chunk{start, size}
		start += size
	}
	return out
}

// FromChunks is the Layout in which rank r holds chunks[r], in that order:
// any partition of [0, n) into non-empty chunks, at least one per rank,
// for unequal shares or layouts of one's own.
func FromChunks(n int, chunks [][]Chunk) (Layout, error) {
	if len(chunks) < 1 {
		return Layout{}, invalid("a layout needs at least one rank")
	}
	covered := make([]bool, n)
	l := Layout{n: n, ranks: make([][]Chunk, len(chunks))}
	for r, cs := range chunks {
		if len(cs) == 0 {
			return Layout{}, invalid("rank %d holds no chunk", r)
		}
		for _, c := range cs {
			if c.Len < 1 || c.Start < 0 || c.Start+c.Len > n {
				return Layout{}, invalid("rank %d: chunk %+v is empty or outside [0, %d)", r, c, n)
			}
			for i := c.Start; i < c.Start+c.Len; i++ {
				if covered[i] {
					return Layout{}, invalid("position %d is in two chunks", i)
				}
				covered[i] = true
			}
		}
		l.ranks[r] = append([]Chunk(nil), cs...)
	}
	for i, c := range covered {
		if !c {
			return Layout{}, invalid("position %d of [0, %d) is in no chunk", i, n)
		}
	}
	return l, nil
}

// N is the global sequence length.
func (l Layout) N() int { return l.n }

// Ranks is the number of ranks the layout is for.
func (l Layout) Ranks() int { return len(l.ranks) }

// Chunks returns the chunks rank r holds, in local order.
func (l Layout) Chunks(r int) []Chunk { return append([]Chunk(nil), l.ranks[r]...) }

// Len is the number of positions rank r holds: its local sequence length.
func (l Layout) Len(r int) int {
	n := 0
	for _, c := range l.ranks[r] {
		n += c.Len
	}
	return n
}

// Split cuts x, [B, H, N, D] with N the layout's length, into one tensor
// per rank, [B, H, Len(r), D], holding the rank's chunks in local order.
func (l Layout) Split(x *tensor.Dense) ([]*tensor.Dense, error) {
	s := x.Shape()
	if s.Dims() != 4 || s[2] != l.n {
		return nil, invalid("Split of shape %v, want [B, H, %d, D]", s, l.n)
	}
	if x.RequiresIterator() {
		x = x.Materialize().(*tensor.Dense)
	}
	out := make([]*tensor.Dense, l.Ranks())
	for r := range out {
		var backing any
		switch data := x.Data().(type) {
		case []float32:
			backing = localRows(l, r, data, s[0]*s[1], s[3])
		case []float64:
			backing = localRows(l, r, data, s[0]*s[1], s[3])
		default:
			return nil, invalid("Split of dtype %v, want Float32 or Float64", x.Dtype())
		}
		out[r] = tensor.New(tensor.WithShape(s[0], s[1], l.Len(r), s[3]), tensor.WithBacking(backing))
	}
	return out, nil
}

// Unsplit is the inverse of Split: it puts the ranks' [B, H, Len(r), D]
// tensors back into one [B, H, N, D].
func (l Layout) Unsplit(parts []*tensor.Dense) (*tensor.Dense, error) {
	if len(parts) != l.Ranks() {
		return nil, invalid("Unsplit of %d parts for %d ranks", len(parts), l.Ranks())
	}
	for r, p := range parts {
		if p == nil {
			return nil, invalid("Unsplit: rank %d's part is nil", r)
		}
	}
	s, dt := parts[0].Shape(), parts[0].Dtype()
	if s.Dims() != 4 || (dt != tensor.Float32 && dt != tensor.Float64) {
		return nil, invalid("Unsplit of %v %v, want [B, H, N, D] of Float32 or Float64", s, dt)
	}
	out := tensor.New(tensor.Of(dt), tensor.WithShape(s[0], s[1], l.n, s[3]))
	for r, p := range parts {
		ps := p.Shape()
		if ps.Dims() != 4 || ps[0] != s[0] || ps[1] != s[1] || ps[2] != l.Len(r) || ps[3] != s[3] || p.Dtype() != dt {
			return nil, invalid("Unsplit: rank %d has %v %v, want [%d, %d, %d, %d] %v", r, ps, p.Dtype(), s[0], s[1], l.Len(r), s[3], dt)
		}
		if p.RequiresIterator() {
			p = p.Materialize().(*tensor.Dense)
		}
		switch dst := out.Data().(type) {
		case []float32:
			globalRows(l, r, p.Data().([]float32), dst, s[0]*s[1], s[3])
		case []float64:
			globalRows(l, r, p.Data().([]float64), dst, s[0]*s[1], s[3])
		}
	}
	return out, nil
}

// localRows copies rank r's rows out of global, [bh, N, d], into a new
// [bh, Len(r), d].
func localRows[T kernels.Float](l Layout, r int, global []T, bh, d int) []T {
	n, nr := l.n, l.Len(r)
	out := make([]T, bh*nr*d)
	for h := range bh {
		off := 0
		for _, c := range l.ranks[r] {
			copy(out[(h*nr+off)*d:(h*nr+off+c.Len)*d], global[(h*n+c.Start)*d:(h*n+c.Start+c.Len)*d])
			off += c.Len
		}
	}
	return out
}

// globalRows copies rank r's local [bh, Len(r), d] into its rows of global
// [bh, N, d].
func globalRows[T kernels.Float](l Layout, r int, local, global []T, bh, d int) {
	n, nr := l.n, l.Len(r)
	for h := range bh {
		off := 0
		for _, c := range l.ranks[r] {
			copy(global[(h*n+c.Start)*d:(h*n+c.Start+c.Len)*d], local[(h*nr+off)*d:(h*nr+off+c.Len)*d])
			off += c.Len
		}
	}
}

// invalid formats an error wrapping op.ErrInvalidInput.
func invalid(format string, args ...any) error {
	return fmt.Errorf("ring: %w: "+format, append([]any{op.ErrInvalidInput}, args...)...)
}
