package cudakernels

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestCUDACoreForwardOnHost builds emu/simt_forward.cc, which runs the
// CUDA-core forward kernels of csrc/ on the host through emu/cuda_emu.h,
// and requires it to pass: fwd_blocked within twice fwd_1rowblock's float32
// error against its float64 instantiation, with the same NaNs and
// infinities, over the masks, lengths, GQA, the softcap, ALiBi, the bias,
// dropout and non-finite inputs (its cases). This runs the kernels' own
// source on a machine without a GPU; it says nothing of their speed or of
// what only a GPU does (see cuda_emu.h). It needs a C++20 g++, and skips
// without one.
func TestCUDACoreForwardOnHost(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("g++ not found: the host emulation of the CUDA-core kernels needs a C++20 compiler")
	}
	if testing.Short() {
		t.Skip("-short: the emulated kernels take about 20 s")
	}
	// g++ reads the sources, not this process, so go test's cache would
	// not see them change: opening them here makes them part of the key.
	sources, err := filepath.Glob("csrc/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(sources, "emu/cuda_emu.h", "emu/simt_forward.cc") {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(t.TempDir(), "simt_forward")
	build := exec.Command(gxx, "-std=c++20", "-O2", "-Wall", "-Wextra", "-Wno-unknown-pragmas", "-Werror",
		"-DFLASH_EMU", "-include", "emu/cuda_emu.h", "-o", bin, "emu/simt_forward.cc", "-pthread")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building emu/simt_forward.cc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	t.Logf("emu/simt_forward:\n%s", out)
	if err != nil {
		t.Fatalf("emu/simt_forward: %v", err)
	}
}
