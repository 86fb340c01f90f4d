package hostmem

import (
	"fmt"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"unsafe"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// minChecked is the smallest request Check looks at (see the package doc).
const minChecked = 1 << 20

// Check returns nil if need bytes fit within every budget of the package
// policy, and otherwise an error wrapping kernels.ErrOutOfMemory that names
// the budget they exceed.
func Check(need int64) error {
	if need < minChecked {
		return nil
	}
	if avail, from := Available(); need > avail {
		return fmt.Errorf("%w: %d bytes of host memory needed, %d left under %s",
			kernels.ErrOutOfMemory, need, avail, from)
	}
	return nil
}

// CheckElems is Check for n elements of T: the form every caller needs,
// since what they allocate are slices of attention's element type.
func CheckElems[T kernels.Float](n int) error {
	var zero T
	return Check(int64(n) * int64(unsafe.Sizeof(zero)))
}

// Available returns the bytes the process can still allocate under the
// package policy, never negative, and a description of the budget that
// sets it. It returns math.MaxInt64 when no budget applies.
func Available() (int64, string) {
	b := budget{avail: math.MaxInt64, from: "no limit"}
	if limit := debug.SetMemoryLimit(-1); limit != math.MaxInt64 {
		b.consider(limit-goRuntimeMemory(), fmt.Sprintf("the Go memory limit of %d bytes", limit))
	}
	osBudgets("/", &b)
	return max(b.avail, 0), b.from
}

// budget keeps the smallest of the budgets considered.
type budget struct {
	avail int64
	from  string
}

func (b *budget) consider(avail int64, from string) {
	if avail < b.avail {
		b.avail, b.from = avail, from
	}
}

// goRuntimeMemory is the memory the Go runtime compares with its memory
// limit: everything it has mapped, less heap it has returned to the OS.
func goRuntimeMemory() int64 {
	s := []metrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	metrics.Read(s)
	return int64(s[0].Value.Uint64()) - int64(s[1].Value.Uint64())
}
