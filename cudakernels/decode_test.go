package cudakernels

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestDecodeSplits pins the GPU's split choice: the H200's 132
// multiprocessors, units of the bf16 D = 128 tensor-core kernel (26112
// bytes, four to a block: two blocks, eight units per multiprocessor).
func TestDecodeSplits(t *testing.T) {
	resident := decodeResident(132, 227<<10, 26112, 4)
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
		{"64 key heads: 16 splits, not 17 (1088 units, 32 in a second wave)", 64, 128 << 10, 16},
		{"one key head, 128k keys: the cap", 1, 128 << 10, decodeMaxSplits},
		{"8 key heads, 1k keys: 64 keys per split", 8, 1 << 10, 16},
		{"short cache: no split below 64 keys", 8, 100, 1},
		{"no keys", 8, 0, 1},
		{"64 sequences of 32 key heads fill it", 2048, 4 << 10, 1},
		{"a third of the device: three splits", 352, 1 << 20, 3},
		{"two splits where 3 units per multiprocessor would idle", 395, 1 << 20, 2},
		{"none from 3 units per multiprocessor on", 396, 1 << 20, 1},
		{"half the device: one", 528, 1 << 20, 1},
		{"8 key heads, 128 keys: two splits of 64, the device being empty", 8, 128, 2},
	} {
		if got := decodeSplits(tc.units, tc.keys, resident, 132); got != tc.want {
			t.Errorf("%s: decodeSplits(%d, %d, %d, 132) = %d, want %d", tc.name, tc.units, tc.keys, resident, got, tc.want)
		}
	}
}

// TestDecodeLayoutMirror checks that decodeLayout's constants and compiled
// shapes are csrc/decode.cuh's and decode.cu's: the kernels trap at launch
// when the host's shape is not theirs, but only on a GPU.
func TestDecodeLayoutMirror(t *testing.T) {
	cuh, err := os.ReadFile("csrc/decode.cuh")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"kChunk": decodeChunk, "kPad": decodePad, "kSmemBudget": decodeSmemBudget,
		"kMaxMergeSplits": decodeMaxSplits, "kMergeThreads": decodeMergeThreads} {
		m := regexp.MustCompile(`constexpr int ` + name + ` = ([0-9]+)(?: \* ([0-9]+))?;`).FindSubmatch(cuh)
		if m == nil {
			t.Errorf("csrc/decode.cuh: no constexpr int %s", name)
			continue
		}
		got, _ := strconv.Atoi(string(m[1]))
		if len(m[2]) > 0 {
			f, _ := strconv.Atoi(string(m[2]))
			got *= f
		}
		if got != want {
			t.Errorf("csrc/decode.cuh: %s = %d, decode.go has %d", name, got, want)
		}
	}
	cu, err := os.ReadFile("csrc/decode.cu")
	if err != nil {
		t.Fatal(err)
	}
	var dims []int
	for _, m := range regexp.MustCompile(`FLASH_DECODE_UNIT\(NAME, F, S, ([0-9]+), R\)`).FindAllSubmatch(cu, -1) {
		n, _ := strconv.Atoi(string(m[1]))
		dims = append(dims, n)
	}
	if !slices.Equal(dims, decodeDims[:]) {
		t.Errorf("csrc/decode.cu compiles head dimensions %v; decode.go has %v", dims, decodeDims)
	}
	tiles := map[string][]int{}
	for _, m := range regexp.MustCompile(`(?m)^FLASH_DECODE_DIMS\((\w+), \w+, \w+, ([0-9]+)\)`).FindAllSubmatch(cu, -1) {
		n, _ := strconv.Atoi(string(m[2]))
		tiles[string(m[1])] = append(tiles[string(m[1])], n)
	}
	for s := range storeKind(len(storeNames)) {
		if !slices.Equal(tiles[s.String()], decodeTiles(s)) {
			t.Errorf("csrc/decode.cu compiles row tiles %v for %v; decode.go has %v", tiles[s.String()], s, decodeTiles(s))
		}
	}
	if m := regexp.MustCompile(`constexpr int kTensorRows = ([0-9]+);`).FindSubmatch(cuh); m == nil || string(m[1]) != strconv.Itoa(decodeTensorRows) {
		t.Errorf("csrc/decode.cuh: kTensorRows is not decode.go's decodeTensorRows = %d", decodeTensorRows)
	}
	for _, s := range storeNames {
		if !strings.Contains(string(cu), "FLASH_CACHE_APPEND("+s+",") {
			t.Errorf("csrc/decode.cu has no FLASH_CACHE_APPEND(%s, …)", s)
		}
	}
}

// TestDecodeLayout pins the shared memory of the units and how many a
// block holds, and the storage format of each precision.
func TestDecodeLayout(t *testing.T) {
	for _, tc := range []struct {
		s                   storeKind
		dp, rows            int
		unitBytes, perBlock int
	}{
		{storeBF16, 128, 16, 26112, 4}, // 3·2·16·(256+16): three buffers, no query or probability rows
		{storeFP16, 256, 16, 50688, 4},
		{storeF32, 128, 1, 34368, 4}, // 2·2·16·(512+16) + 128·4 + 16·4
		{storeF32, 128, 4, 36096, 4}, // 2·2·16·(512+16) + 4·128·4 + 4·16·4
		{storeF32, 128, 8, 38400, 4},
		{storeF32, 256, 8, 75264, 2},
		{storeF64, 256, 8, 149504, 1},
		{storeF64, 64, 1, 34432, 4},
	} {
		unit, per := decodeLayout(tc.s, tc.dp, tc.rows)
		if unit != tc.unitBytes || per != tc.perBlock {
			t.Errorf("decodeLayout(%v, %d, %d) = %d bytes, %d per block; want %d, %d", tc.s, tc.dp, tc.rows, unit, per, tc.unitBytes, tc.perBlock)
		}
		if unit*per > decodeSmemBudget {
			t.Errorf("decodeLayout(%v, %d, %d): a block takes %d bytes, over the budget %d", tc.s, tc.dp, tc.rows, unit*per, decodeSmemBudget)
		}
	}
	for prec, want := range map[Precision]storeKind{FP32: storeF32, TF32: storeF32, BF16: storeBF16, FP16: storeFP16} {
		if got := storeFor(prec, false); got != want {
			t.Errorf("storeFor(%v) = %v, want %v", prec, got, want)
		}
		if got := storeFor(prec, true); got != storeF64 {
			t.Errorf("storeFor(%v, float64) = %v, want f64", prec, got)
		}
	}
	if _, err := decodeDim(257); err == nil {
		t.Error("decodeDim(257) passed; decoding compiles up to 256")
	}
	for _, tc := range []struct {
		s          storeKind
		rows, want int
	}{{storeF32, 1, 1}, {storeF32, 2, 4}, {storeF32, 4, 4}, {storeF32, 5, 8}, {storeF64, 3, 4}, {storeF64, 32, 8}, {storeBF16, 1, 16}, {storeFP16, 4, 16}} {
		if got := decodeTile(tc.s, tc.rows); got != tc.want {
			t.Errorf("decodeTile(%v, %d) = %d, want %d", tc.s, tc.rows, got, tc.want)
		}
	}
	if dp, err := decodeDim(40); err != nil || dp != 64 {
		t.Errorf("decodeDim(40) = %d, %v; want 64", dp, err)
	}
}

// TestDecodeMergeBlock checks the merge's block for every split count it
// takes: whole warps, at most kMergeThreads, and a thread per split for
// the weights (the kernel traps otherwise).
func TestDecodeMergeBlock(t *testing.T) {
	for splits := 2; splits <= decodeMaxSplits; splits++ {
		n := decodeMergeBlock(splits)
		if n%32 != 0 || n > decodeMergeThreads || n < splits || (splits <= 8 && n != 32*splits) {
			t.Errorf("%d splits: a merge block of %d threads", splits, n)
		}
	}
}
