//go:build flashgpu

package ring

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ncclDevices are the CUDA devices of the NCCL tests: RING_NCCL_DEVICES,
// a comma-separated list of ordinals, else device 0 alone (one rank, which
// sends to and receives from itself).
func ncclDevices(t *testing.T) []int {
	s := os.Getenv("RING_NCCL_DEVICES")
	if s == "" {
		return []int{0}
	}
	var ds []int
	for _, f := range strings.Split(s, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("RING_NCCL_DEVICES=%q: %v", s, err)
		}
		ds = append(ds, d)
	}
	return ds
}

// TestNCCLRing runs the ring over NCCL, one rank per device, against naive
// attention on the whole sequence; it skips where NCCL cannot be loaded.
func TestNCCLRing(t *testing.T) {
	if err := loadNCCL(); err != nil {
		t.Skip(err)
	}
	devices := ncclDevices(t)
	ts, err := NCCLRing(devices, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, tr := range ts {
			if err := tr.(*NCCL).Close(); err != nil {
				t.Error(err)
			}
		}
	}()
	// A send/receive around the ring, to itself with one rank.
	r := len(devices)
	l, err := ZigZag(7*2*r, r)
	if err != nil {
		t.Fatal(err)
	}
	c := ringCase{"nccl", Problem{B: 1, H: 4, Hkv: 2, D: 8, Scale: 0.3, Causal: true}, l}
	g := randomGlobal[float64](c, 5)
	checkRan(t, runRingOn(ts, c, g, cpu))
	g.checkReference(t, 1e-10)
}

// TestNCCLMissing checks the error a missing library gives, where it is
// missing.
func TestNCCLMissing(t *testing.T) {
	err := loadNCCL()
	if err == nil {
		t.Skip(LibNCCL + " is present")
	}
	if !errors.Is(err, ErrNoNCCL) || !strings.Contains(err.Error(), LibNCCL) {
		t.Errorf("got %v, want ErrNoNCCL naming %s", err, LibNCCL)
	}
}
