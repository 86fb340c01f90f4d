package hostmem

import "testing"

// BenchmarkCheck is what every kernel call pays to check a request of a few
// MiB: the cost of reading the figures.
func BenchmarkCheck(b *testing.B) {
	for b.Loop() {
		if err := Check(4 << 20); err != nil {
			b.Fatal(err)
		}
	}
}
