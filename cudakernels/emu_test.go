package cudakernels

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/kernels/conformance"
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
		"-Werror", "-DFLASH_EMU", "-include", "emu/cuda_emu.h", "-o", bin, "emu/"+prog+".cc", "-pthread")
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

// mmaHostCases are the problems TestMMAKernelsOnHost runs: each variant
// the mma.sync kernels compute, at the three padded head dimensions.
func mmaHostCases() []kernels.Params {
	at := func(b, h, nq, nk, d int) kernels.Params {
		return kernels.Params{B: b, H: h, Nq: nq, Nk: nk, D: d, Scale: 1 / math.Sqrt(float64(d))}
	}
	causal := func(p kernels.Params) kernels.Params { p.Causal = true; return p }
	plain, fewKeys, fewRows := at(2, 2, 100, 100, 40), causal(at(2, 2, 70, 150, 40)), causal(at(1, 2, 150, 70, 40))
	window := at(1, 2, 160, 160, 40)
	window.Window = kernels.Window{On: true, Left: 20, Right: 5}
	lengths := causal(at(2, 2, 130, 140, 40))
	lengths.QLens, lengths.KLens = []int{127, 110}, []int{139, 110}
	gqa := at(1, 4, 100, 100, 40)
	gqa.Hkv = 2
	capped := causal(at(1, 2, 100, 100, 40))
	capped.Softcap, capped.ALiBi = 5, []float64{0.5, 0.25}
	dropout := causal(at(1, 2, 100, 100, 40))
	dropout.Dropout = kernels.Dropout{P: 0.2, Seed: 0x1234567887654321, Offset: 7}
	bias := causal(at(2, 2, 100, 100, 40))
	bias.Bias = &kernels.Bias{Bb: 2, Hb: 2}
	sharedBias := at(2, 2, 100, 90, 40)
	sharedBias.Bias = &kernels.Bias{Bb: 1, Hb: 2}
	wide := causal(at(1, 2, 90, 130, 128))
	widest := at(1, 2, 80, 90, 200)
	widest.Window = kernels.Window{On: true, Left: 30, Right: 10}
	return []kernels.Params{plain, causal(plain), fewKeys, fewRows, window, lengths, gqa, capped, dropout, bias,
		sharedBias, at(1, 2, 100, 100, 100), wide, widest}
}

// mmaKernel is the forward kernel pickMmaVariant launches for p: 2, the
// _full one, for a bias or dropout; 0, the plain one, for a plain or
// causal problem; 1, _var, for the rest.
func mmaKernel(p kernels.Params) int64 {
	switch {
	case p.Bias != nil || p.Dropout.On():
		return 2
	case p.IsPlain():
		return 0
	}
	return 1
}

// TestMMAKernelsOnHost runs the mma.sync kernels (csrc/fwd_mma.cuh and
// bwd_mma.cuh) on the host through emu/mma.cc: in BF16, FP16 and TF32 the
// forward, and in BF16 and FP16 up to DP = 128 the backward too (the
// backend's CUDA-core backward serves the rest), each held to the
// conformance suite's bounds against its float64 reference. Plain and
// causal problems run on the _var kernel as well as the plain one.
// Emulated tensor cores add in double, not in the hardware's order and
// rounding (emu/cuda_emu.h), so this checks the kernels' indexing, layouts
// and masks, not the device's rounding; the device's suite does that.
func TestMMAKernelsOnHost(t *testing.T) {
	bin := buildEmu(t, emuCompiler(t), "mma")
	for _, prec := range []Precision{BF16, FP16, TF32} {
		for i, p := range mmaHostCases() {
			dp, err := paddedDim(p.D)
			if err != nil {
				t.Fatal(err)
			}
			backward := prec != TF32 && dp <= mmaBwdMaxDim
			kinds := []int64{mmaKernel(p)}
			if kinds[0] == 0 {
				kinds = append(kinds, 1)
			}
			for _, kind := range kinds {
				name := fmt.Sprintf("%v/%s/kernel=%s", prec, caseName(p), []string{"plain", "var", "full"}[kind])
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					runMMAOnHost(t, bin, prec, kind, dp, backward, p, uint64(i))
				})
			}
		}
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

// runMMAOnHost runs problem p once through emu/mma.cc (kernel: 0 plain, 1
// _var, 2 _full) and checks what comes back.
func runMMAOnHost(t *testing.T, bin string, prec Precision, kernel int64, dp int, backward bool, p kernels.Params, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 12))
	normals := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	q, k, v, do := normals(p.QLen()), normals(p.KLen()), normals(p.KLen()), normals(p.QLen())
	var blob emuBlob
	dense := func(addr uint64, rows int) tensorAt { return tensorAt{ptr: addr, rows: int64(rows), ld: int64(p.D)} }
	ops := operands{q: dense(put(&blob, q), p.Nq), k: dense(put(&blob, k), p.Nk), v: dense(put(&blob, v), p.Nk),
		dout: dense(put(&blob, do), p.Nq)}
	ops.o, ops.lse = dense(put(&blob, make([]float32, p.QLen())), p.Nq), put(&blob, make([]float32, p.LSELen()))
	ops.dq = dense(put(&blob, make([]float32, p.QLen())), p.Nq)
	ops.dk, ops.dv = dense(put(&blob, make([]float32, p.KLen())), p.Nk), dense(put(&blob, make([]float32, p.KLen())), p.Nk)
	lens32 := func(x []int) []int32 {
		y := make([]int32, len(x))
		for i, n := range x {
			y[i] = int32(n)
		}
		return y
	}
	if p.QLens != nil {
		ops.vars.qLens, ops.vars.kLens = put(&blob, lens32(p.QLens)), put(&blob, lens32(p.KLens))
	}
	if p.ALiBi != nil {
		ops.vars.alibi = put(&blob, p.ALiBi)
	}
	var bias []float32
	if p.Bias != nil {
		bias = normals(p.BiasLen())
		unwritten := make([]float32, p.BiasLen())
		for i := range unwritten {
			unwritten[i] = float32(math.NaN()) // overwritten, never added into
		}
		ops.vars.bias, ops.vars.biasSlices = put(&blob, bias), int64(p.Bias.Bb*p.Bias.Hb)
		ops.vars.biasBatchStride, ops.vars.biasHeadStride = biasStrides(p)
		if backward {
			ops.vars.dbias = put(&blob, unwritten)
		}
	}
	var in bytes.Buffer
	var withBackward int64
	if backward {
		withBackward = 1
	}
	types := map[Precision]int64{BF16: 0, FP16: 1, TF32: 2}
	head := [8]int64{types[prec], kernel, withBackward, int64(dp), int64(len(blob)), ops.vars.biasSlices}
	for _, x := range []any{head, newParams(p, ops)} {
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
		t.Fatalf("emu/mma: %v\n%s", err, stderr.Bytes())
	}
	if len(out) != len(blob) {
		t.Fatalf("emu/mma wrote %d bytes, want %d", len(out), len(blob))
	}
	res := emuBlob(out)
	o, lse := get[float32](res, ops.o.ptr, p.QLen()), get[float32](res, ops.lse, p.LSELen())
	if !backward {
		if p.Bias != nil {
			p.Bias = &kernels.Bias{Bb: p.Bias.Bb, Hb: p.Bias.Hb, Data32: bias, Data64: widen(bias)}
		}
		conformance.CheckForward(t, p, prec, q, k, v, o, lse)
		return
	}
	if p.Bias != nil {
		p.Bias = &kernels.Bias{Bb: p.Bias.Bb, Hb: p.Bias.Hb, Data32: bias, Grad32: get[float32](res, ops.vars.dbias, p.BiasLen())}
	}
	dq, dk, dv := get[float32](res, ops.dq.ptr, p.QLen()), get[float32](res, ops.dk.ptr, p.KLen()), get[float32](res, ops.dv.ptr, p.KLen())
	conformance.CheckPass(t, p, prec, q, k, v, do, o, lse, dq, dk, dv)
}
