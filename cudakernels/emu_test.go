package cudakernels

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// emuCompiler returns the C++20 compiler that builds the programs of emu/,
// which run kernels of csrc/ on the host through emu/cuda_emu.h, and
// skips the test without one, with -short or under the race detector. It also reads every source:
// g++ reads them, not this process, so go test's cache would not see them
// change otherwise.
func emuCompiler(t *testing.T) string {
	t.Helper()
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("g++ not found: the host emulation of the kernels needs a C++20 compiler")
	}
	if testing.Short() {
		t.Skip("-short: the emulated kernels take minutes")
	}
	if raceEnabled {
		t.Skip("race detector on: it does not see into the emulated kernels' C++, which the run without it checks")
	}
	for _, pattern := range []string{"csrc/*", "emu/*"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if _, err := os.ReadFile(f); err != nil {
				t.Fatal(err)
			}
		}
	}
	return gxx
}

// buildEmu compiles emu/<prog>.cc into a temporary directory and returns
// the program's path. -fno-strict-aliasing: CUDA code reads registers'
// bits through other types (a packed bf16 pair as a 32-bit word), which
// nvcc allows.
func buildEmu(t *testing.T, gxx, prog string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), prog)
	build := exec.Command(gxx, "-std=c++20", "-O2", "-fno-strict-aliasing", "-Wall", "-Wextra", "-Wno-unknown-pragmas",
		"-Werror", "-DFLASH_EMU", "-include", "emu/cuda_emu.h", "-o", bin, "emu/"+prog+".cc")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building emu/%s.cc: %v\n%s", prog, err, out)
	}
	return bin
}

// TestCUDACoreKernelsOnHost runs simt_forward.cc and simt_backward.cc:
// the first holds fwd_blocked within twice fwd_1rowblock's float32 error
// against its float64 instantiation, the second holds dkdv_blocked and
// dq_blocked to the bits of dkdv_1colblock and dq_1rowblock (they sum in
// the same order), both with the same NaNs and infinities, over the masks,
// lengths, GQA, the softcap, ALiBi, the bias, dropout and non-finite inputs
// (emu/cases.h). This runs the kernels' own source on a machine without a
// GPU; it says nothing of their speed or of what only a GPU does (see
// cuda_emu.h).
func TestCUDACoreKernelsOnHost(t *testing.T) {
	gxx := emuCompiler(t)
	for _, prog := range []string{"simt_forward", "simt_backward"} {
		t.Run(prog, func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command(buildEmu(t, gxx, prog)).CombinedOutput()
			t.Logf("emu/%s:\n%s", prog, out)
			if err != nil {
				t.Fatalf("emu/%s: %v", prog, err)
			}
		})
	}
}

// caseName names a problem by its shape and the variants it has.
func caseName(p kernels.Params) string {
	s := fmt.Sprintf("B%dH%dHkv%d_Nq%d_Nk%d_D%d", p.B, p.H, p.KVHeads(), p.Nq, p.Nk, p.D)
	for _, v := range []struct {
		on   bool
		name string
	}{{p.Causal, "causal"}, {p.Window.On, "window"}, {p.QLens != nil, "lengths"}, {p.Softcap != 0, "softcap"},
		{p.ALiBi != nil, "alibi"}, {p.Dropout.On(), "dropout"}, {p.Bias != nil, "bias"}} {
		if v.on {
			s += "_" + v.name
		}
	}
	return s
}

// widen returns x in float64.
func widen[T kernels.Float](x []T) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// narrow returns x rounded to float32.
func narrow(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

// emuBlob is the memory an emulated launch sees: the tensors one after
// another, each 16-byte aligned, addressed as offset + 1 (0 is no tensor).
type emuBlob []byte

func put[T any](b *emuBlob, x []T) uint64 {
	for len(*b)%16 != 0 {
		*b = append(*b, 0)
	}
	addr := uint64(len(*b)) + 1
	if len(x) > 0 {
		*b = append(*b, unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*int(unsafe.Sizeof(x[0])))...)
	}
	return addr
}

func get[T any](b emuBlob, addr uint64, n int) []T {
	x := make([]T, n)
	if n > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), n*int(unsafe.Sizeof(x[0]))), b[addr-1:])
	}
	return x
}

// unitNormals returns a source of n unit-normal float32s drawn from rng.
func unitNormals(rng *rand.Rand) func(n int) []float32 {
	return func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
}

// lens32 returns lengths as the kernels read them.
func lens32(x []int) []int32 {
	y := make([]int32, len(x))
	for i, n := range x {
		y[i] = int32(n)
	}
	return y
}

// runEmu runs an emulation program on one problem: its header words, the
// kernels' Params and the blob in, the blob after the run out.
func runEmu(t *testing.T, bin string, head [8]int64, kp kernelParams, blob emuBlob) emuBlob {
	t.Helper()
	var in bytes.Buffer
	for _, x := range []any{head, kp} {
		if err := binary.Write(&in, binary.LittleEndian, x); err != nil {
			t.Fatal(err)
		}
	}
	in.Write(blob)
	cmd := exec.Command(bin)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", filepath.Base(bin), err, stderr.Bytes())
	}
	if len(out) != len(blob) {
		t.Fatalf("%s wrote %d bytes, want %d", filepath.Base(bin), len(out), len(blob))
	}
	return out
}

// boolWord is a header word's 1 or 0.
func boolWord(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
