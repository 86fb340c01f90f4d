package hostmem

import (
	"errors"
	"math"
	"runtime/debug"
	"testing"
	"time"

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

// fakeOS replaces the operating system's figures with avail bytes for the
// test, counting the readings, and forgets any earlier reading.
func fakeOS(t *testing.T, avail *int64) *int {
	t.Helper()
	reads := new(int)
	old := readOS
	readOS = func() budget {
		*reads++
		return budget{avail: *avail, from: "the test's figures"}
	}
	forget := func() {
		osReading.Lock()
		osReading.at = time.Time{}
		osReading.Unlock()
	}
	forget()
	t.Cleanup(func() { readOS = old; forget() })
	return reads
}

// TestCheckReusesRecentReading: requests under a sixteenth of the last
// reading pass on it while it is recent; a larger one, or any request once
// the reading is stale, reads the figures again.
func TestCheckReusesRecentReading(t *testing.T) {
	old := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	avail := int64(1 << 30)
	reads := fakeOS(t, &avail)
	for range 3 {
		if err := Check(4 << 20); err != nil {
			t.Fatal(err)
		}
	}
	if *reads != 1 {
		t.Fatalf("three small requests read the figures %d times, want once", *reads)
	}
	if err := Check(avail / smallShare); err != nil {
		t.Fatal(err)
	}
	if *reads != 2 {
		t.Fatalf("a request of a sixteenth of the reading: %d readings, want 2", *reads)
	}
	osReading.Lock()
	osReading.at = osReading.at.Add(-staleAfter)
	osReading.Unlock()
	if err := Check(4 << 20); err != nil {
		t.Fatal(err)
	}
	if *reads != 3 {
		t.Fatalf("a small request after a stale reading: %d readings, want 3", *reads)
	}
	Available()
	if *reads != 4 {
		t.Fatalf("Available: %d readings, want 4 (it always reads)", *reads)
	}
}

// TestCheckSeesShrinkingMemory: once the memory left falls, a request that
// is no longer small beside the last reading is checked against fresh
// figures, and fails.
func TestCheckSeesShrinkingMemory(t *testing.T) {
	old := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	avail := int64(64 << 20)
	fakeOS(t, &avail)
	if err := Check(2 << 20); err != nil {
		t.Fatal(err)
	}
	avail = 3 << 20
	err := Check(4 << 20) // 4 MiB ≥ 64 MiB / 16: read again
	if !errors.Is(err, kernels.ErrOutOfMemory) {
		t.Fatalf("Check(4 MiB) with 3 MiB left: got %v, want kernels.ErrOutOfMemory", err)
	}
}
