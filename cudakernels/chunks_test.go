package cudakernels

import "testing"

// TestCapScratch: chunk sizes drop only where a pair's scratch outgrows
// its data, and then keep the scratch of a chunk within the cap.
func TestCapScratch(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name                         string
		hc                           int
		scratchPerHead, bytesPerHead int64
		want                         int
	}{
		{"long sequences: scratch below the data", 4, 3 * mib, 8 * mib, 4},
		{"scratch twice the data", 100, 2 * 1024, 1024, 100},
		{"N = 1 in BF16 images", 262144, 147456, 2304, 8192},
		{"a pair larger than the cap", 10, 100 * mib, 1 * mib, 1},
		{"small call: the floor of 64 MiB holds it", 16, 147456, 2304, 16},
	} {
		got := capScratch(c.hc, c.scratchPerHead, c.bytesPerHead)
		if got != c.want {
			t.Errorf("%s: capScratch(%d, %d, %d) = %d, want %d", c.name, c.hc, c.scratchPerHead, c.bytesPerHead, got, c.want)
		}
		if got < 1 || got > c.hc {
			t.Errorf("%s: %d pairs out of [1, %d]", c.name, got, c.hc)
		}
		if c.scratchPerHead > maxScratchPerData*c.bytesPerHead && got > 1 {
			if s := int64(got) * c.scratchPerHead; s > max(maxScratchPerData*c.bytesPerHead*int64(c.hc), minScratchCap) {
				t.Errorf("%s: %d bytes of scratch past the cap", c.name, s)
			}
		}
	}
}
