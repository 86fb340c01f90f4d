package cudakernels

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestCUDACoreKernelsOnHost builds the programs of emu/, which run the
// CUDA-core kernels of csrc/ on the host through emu/cuda_emu.h, and
// requires them to pass: simt_forward.cc holds fwd_blocked within twice
// fwd_1rowblock's float32 error against its float64 instantiation, and
// simt_backward.cc holds dkdv_blocked and dq_blocked to the bits of
// dkdv_1colblock and dq_1rowblock (they sum in the same order), both with
// the same NaNs and infinities, over the masks, lengths, GQA, the softcap,
// ALiBi, the bias, dropout and non-finite inputs (cases.h). This runs the
// kernels' own source on a machine without a GPU; it says nothing of their
// speed or of what only a GPU does (see cuda_emu.h). It needs a C++20 g++,
// and skips without one.
func TestCUDACoreKernelsOnHost(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("g++ not found: the host emulation of the CUDA-core kernels needs a C++20 compiler")
	}
	if testing.Short() {
		t.Skip("-short: the emulated kernels take about a minute")
	}
	// g++ reads the sources, not this process, so go test's cache would
	// not see them change: opening them here makes them part of the key.
	sources, err := filepath.Glob("csrc/*")
	if err != nil {
		t.Fatal(err)
	}
	emu, err := filepath.Glob("emu/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(sources, emu...) {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
	for _, prog := range []string{"simt_forward", "simt_backward"} {
		t.Run(prog, func(t *testing.T) {
			t.Parallel()
			bin := filepath.Join(t.TempDir(), prog)
			build := exec.Command(gxx, "-std=c++20", "-O2", "-Wall", "-Wextra", "-Wno-unknown-pragmas", "-Werror",
				"-DFLASH_EMU", "-include", "emu/cuda_emu.h", "-o", bin, "emu/"+prog+".cc", "-pthread")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("building emu/%s.cc: %v\n%s", prog, err, out)
			}
			out, err := exec.Command(bin).CombinedOutput()
			t.Logf("emu/%s:\n%s", prog, out)
			if err != nil {
				t.Fatalf("emu/%s: %v", prog, err)
			}
		})
	}
}
