package hostmem

import (
	"fmt"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
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
	if avail, from := available(need); need > avail {
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
	return available(math.MaxInt64)
}

// available is Available as a request of need bytes sees it: the Go
// memory limit's budget afresh (it costs a metrics read), the operating
// system's from osBudget.
func available(need int64) (int64, string) {
	b := noBudget()
	if limit := debug.SetMemoryLimit(-1); limit != math.MaxInt64 {
		b.consider(limit-goRuntimeMemory(), fmt.Sprintf("the Go memory limit of %d bytes", limit))
	}
	osb := osBudget(need)
	b.consider(osb.avail, osb.from)
	return max(b.avail, 0), b.from
}

// Reading the operating system's figures takes a few file reads (0.19 ms
// a Check on the dev machine, 2026-12-04: /proc/meminfo and the cgroup
// files), more than a small kernel call itself, and every call checks its
// allocations. So a reading is kept: a request below 1/smallShare of what
// the last one found passes on it while it is younger than staleAfter,
// and any other request reads afresh. A request that small beside what is
// left is not the one that ends a process; one of a size that could is
// always checked against fresh figures.
const (
	smallShare = 16
	staleAfter = time.Second
)

// osReading is the last reading of the operating system's budgets.
var osReading struct {
	sync.Mutex
	b  budget
	at time.Time // zero: none yet
}

// readOS reads the operating system's budgets (a variable so that tests
// can count the readings and set the figures).
var readOS = func() budget {
	b := noBudget()
	osBudgets("/", &b)
	return b
}

// osBudget returns the operating system's budget for a request of need
// bytes: the last reading's if it is recent and need is a small share of
// it, else a fresh one, which it keeps.
func osBudget(need int64) budget {
	osReading.Lock()
	defer osReading.Unlock()
	if !osReading.at.IsZero() && time.Since(osReading.at) < staleAfter && need < osReading.b.avail/smallShare {
		return osReading.b
	}
	osReading.b, osReading.at = readOS(), time.Now()
	return osReading.b
}

// noBudget is a budget before any is considered.
func noBudget() budget { return budget{avail: math.MaxInt64, from: "no limit"} }

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
