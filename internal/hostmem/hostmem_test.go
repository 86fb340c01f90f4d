package hostmem

import (
	"errors"
	"math"
	"runtime/debug"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// TestCheckGoMemoryLimit sets the Go memory limit 64 MiB above what the
// runtime holds, so the outcome does not depend on the machine: 1 GiB must
// fail and 16 MiB must pass (no other budget on a test machine is that small).
func TestCheckGoMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	debug.SetMemoryLimit(goRuntimeMemory() + 64<<20)

	err := Check(1 << 30)
	if !errors.Is(err, kernels.ErrOutOfMemory) {
		t.Fatalf("Check(1 GiB) under a 64 MiB margin: got %v, want an error wrapping kernels.ErrOutOfMemory", err)
	}
	t.Log(err)
	if err := Check(16 << 20); err != nil {
		t.Fatalf("Check(16 MiB) under a 64 MiB margin: %v", err)
	}
	if avail, from := Available(); avail > 64<<20 || from == "no limit" {
		t.Fatalf("Available() = %d (%s), want at most the 64 MiB margin", avail, from)
	}
}

func TestCheckSmallRequestsPass(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	debug.SetMemoryLimit(1) // below what the runtime already holds
	if err := Check(minChecked - 1); err != nil {
		t.Fatalf("Check below minChecked: %v", err)
	}
	if err := Check(minChecked); !errors.Is(err, kernels.ErrOutOfMemory) {
		t.Fatalf("Check(minChecked) above the limit: got %v, want kernels.ErrOutOfMemory", err)
	}
}

func TestAvailableWithoutGoLimit(t *testing.T) {
	old := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	if avail, from := Available(); avail <= 0 {
		t.Fatalf("Available() = %d (%s), want a positive figure", avail, from)
	}
}
