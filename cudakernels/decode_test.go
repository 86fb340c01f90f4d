package cudakernels

import "testing"

// TestDecodeSplits pins the GPU's split choice: the H200's 132
// multiprocessors, units of the bf16 D = 128 eight-row kernel (22016
// bytes, four to a block: two blocks, eight units per multiprocessor).
func TestDecodeSplits(t *testing.T) {
	resident := decodeResident(132, 227<<10, 22016, 4)
	if resident != 1056 {
		t.Fatalf("resident units %d, want 1056", resident)
	}
	if got := decodeResident(132, 227<<10, 1000, 4); got != 132*decodeUnitsPerSM {
		t.Errorf("small units: %d resident, want the cap %d", got, 132*decodeUnitsPerSM)
	}
	for _, tc := range []struct {
		name              string
		units, keys, want int
	}{
		{"one sequence, 8 key heads, 16k keys: fills the device", 8, 16 << 10, 132},
		{"one sequence, 8 key heads, 128k keys", 8, 128 << 10, 132},
		{"one key head, 128k keys: the cap", 1, 128 << 10, decodeMaxSplits},
		{"8 key heads, 1k keys: 64 keys per split", 8, 1 << 10, 16},
		{"short cache: no split below 64 keys", 8, 100, 1},
		{"no keys", 8, 0, 1},
		{"64 sequences of 32 key heads fill it", 2048, 4 << 10, 1},
		{"just below full", 1055, 1 << 20, 2},
	} {
		if got := decodeSplits(tc.units, tc.keys, resident); got != tc.want {
			t.Errorf("%s: decodeSplits(%d, %d, %d) = %d, want %d", tc.name, tc.units, tc.keys, resident, got, tc.want)
		}
	}
}
