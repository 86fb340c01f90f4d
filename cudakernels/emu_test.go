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
	"slices"
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

// mmaHostCase is one problem of TestMMAKernelsOnHost, with the non-finite
// value it puts in one input, if any: "nan-q" a NaN in row 5 of Q, "inf-k"
// and "inf-v" +Inf in the last key of K (so that some rows score +Inf,
// the others −Inf) or of V (head 0 each). Those run without a causal
// mask, under which the tiled kernels may spread a masked NaN (kernels'
// doc, MaskedNaNMayPropagate), which CheckPass does not allow.
type mmaHostCase struct {
	p      kernels.Params
	poison string
}

// mmaHostCases are the problems TestMMAKernelsOnHost runs: each variant
// the mma.sync kernels compute, at the three padded head dimensions, and
// non-finite inputs.
func mmaHostCases() []mmaHostCase {
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
	var cs []mmaHostCase
	for _, p := range []kernels.Params{plain, causal(plain), fewKeys, fewRows, window, lengths, gqa, capped, dropout, bias,
		sharedBias, at(1, 2, 100, 100, 100), wide, widest} {
		cs = append(cs, mmaHostCase{p: p})
	}
	for _, poison := range []string{"nan-q", "inf-k", "inf-v"} {
		cs = append(cs, mmaHostCase{at(1, 2, 100, 90, 40), poison})
	}
	return cs
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
		for i, c := range mmaHostCases() {
			p := c.p
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
				if c.poison != "" {
					name += "/" + c.poison
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					runMMAOnHost(t, bin, prec, kind, dp, backward, c, uint64(i))
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

// runMMAOnHost runs problem c once through emu/mma.cc (kernel: 0 plain, 1
// _var, 2 _full) and checks what comes back.
func runMMAOnHost(t *testing.T, bin string, prec Precision, kernel int64, dp int, backward bool, c mmaHostCase, seed uint64) {
	hp := newHostProblem(c, seed, backward)
	types := map[Precision]int64{BF16: 0, FP16: 1, TF32: 2}
	head := [8]int64{types[prec], kernel, boolWord(backward), int64(dp), int64(len(hp.blob)), hp.ops.vars.biasSlices}
	hp.check(t, prec, runEmu(t, bin, head, newParams(hp.p, hp.ops), hp.blob), backward)
}

// boolWord is a header word's 1 or 0.
func boolWord(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// hostProblem is one problem for an emulated launch on the caller's
// tensors: its inputs, and the blob holding them with room for every
// output where the backend's callerOperands puts them (ops).
type hostProblem struct {
	p                 kernels.Params
	q, k, v, do, bias []float32
	blob              emuBlob
	ops               operands
}

// newHostProblem draws c's inputs (unit normals, with c's poison) and lays
// out the blob: dBias, with a bias and backward, starts as NaN, so that an
// element the kernels never write fails.
func newHostProblem(c mmaHostCase, seed uint64, backward bool) *hostProblem {
	p := c.p
	normals := unitNormals(rand.New(rand.NewPCG(seed, 12)))
	hp := &hostProblem{p: p, q: normals(p.QLen()), k: normals(p.KLen()), v: normals(p.KLen()), do: normals(p.QLen())}
	switch c.poison {
	case "nan-q":
		hp.q[5*p.D+1] = float32(math.NaN())
	case "inf-k":
		hp.k[(p.Nk-1)*p.D+2] = float32(math.Inf(1))
	case "inf-v":
		hp.v[(p.Nk-1)*p.D+3] = float32(math.Inf(1))
	}
	b := &hp.blob
	dense := func(addr uint64, rows int) tensorAt { return tensorAt{ptr: addr, rows: int64(rows), ld: int64(p.D)} }
	ops := &hp.ops
	ops.q, ops.k, ops.v = dense(put(b, hp.q), p.Nq), dense(put(b, hp.k), p.Nk), dense(put(b, hp.v), p.Nk)
	ops.dout = dense(put(b, hp.do), p.Nq)
	ops.o, ops.lse = dense(put(b, make([]float32, p.QLen())), p.Nq), put(b, make([]float32, p.LSELen()))
	ops.dq = dense(put(b, make([]float32, p.QLen())), p.Nq)
	ops.dk, ops.dv = dense(put(b, make([]float32, p.KLen())), p.Nk), dense(put(b, make([]float32, p.KLen())), p.Nk)
	if p.QLens != nil {
		ops.vars.qLens, ops.vars.kLens = put(b, lens32(p.QLens)), put(b, lens32(p.KLens))
	}
	if p.ALiBi != nil {
		ops.vars.alibi = put(b, p.ALiBi)
	}
	if p.Bias != nil {
		hp.bias = normals(p.BiasLen())
		ops.vars.bias, ops.vars.biasSlices = put(b, hp.bias), int64(p.Bias.Bb*p.Bias.Hb)
		ops.vars.biasBatchStride, ops.vars.biasHeadStride = biasStrides(p)
		if backward {
			unwritten := make([]float32, p.BiasLen())
			for i := range unwritten {
				unwritten[i] = float32(math.NaN())
			}
			ops.vars.dbias = put(b, unwritten)
		}
	}
	return hp
}

// check holds the outputs in res, the blob after the run, to the
// conformance suite's bounds in prec: O and the LSE, and with backward
// the gradients.
func (hp *hostProblem) check(t *testing.T, prec Precision, res emuBlob, backward bool) {
	t.Helper()
	p, ops := hp.p, hp.ops
	o, lse := get[float32](res, ops.o.ptr, p.QLen()), get[float32](res, ops.lse, p.LSELen())
	if !backward {
		if p.Bias != nil {
			p.Bias = &kernels.Bias{Bb: p.Bias.Bb, Hb: p.Bias.Hb, Data32: hp.bias, Data64: widen(hp.bias)}
		}
		conformance.CheckForward(t, p, prec, hp.q, hp.k, hp.v, o, lse)
		return
	}
	if p.Bias != nil {
		p.Bias = &kernels.Bias{Bb: p.Bias.Bb, Hb: p.Bias.Hb, Data32: hp.bias, Grad32: get[float32](res, ops.vars.dbias, p.BiasLen())}
	}
	dq, dk, dv := get[float32](res, ops.dq.ptr, p.QLen()), get[float32](res, ops.dk.ptr, p.KLen()), get[float32](res, ops.dv.ptr, p.KLen())
	conformance.CheckPass(t, p, prec, hp.q, hp.k, hp.v, hp.do, o, lse, dq, dk, dv)
}

// TestCUDACoreKernelsConformOnHost runs the float32 CUDA-core kernels, the
// row-block ones main launches and the register-blocked ones
// (fp32-blocked.patch launches those; their backward at DP ≤ 128), on
// the cases of TestMMAKernelsOnHost through emu/simt.cc, forward and
// backward, and holds them to the conformance suite's FP32 bounds: the
// precision Gorgonia's float32 tensors get by default.
func TestCUDACoreKernelsConformOnHost(t *testing.T) {
	bin := buildEmu(t, emuCompiler(t), "simt")
	for i, c := range mmaHostCases() {
		dp, err := paddedDim(c.p.D)
		if err != nil {
			t.Fatal(err)
		}
		for set, name := range []string{"row-blocks", "blocked"} {
			label := name + "/" + caseName(c.p)
			if c.poison != "" {
				label += "/" + c.poison
			}
			t.Run(label, func(t *testing.T) {
				t.Parallel()
				hp := newHostProblem(c, uint64(i), true)
				head := [8]int64{int64(set), int64(dp), 1, int64(len(hp.blob)), hp.ops.vars.biasSlices}
				hp.check(t, FP32, runEmu(t, bin, head, newParams(hp.p, hp.ops), hp.blob), true)
			})
		}
	}
}

// decodeHostCase is one problem of TestDecodeKernelsOnHost: the keys'
// storage format and the key splits to run it with (the device's split
// rule depends on its multiprocessors; these exercise the merge).
type decodeHostCase struct {
	s      storeKind
	splits int
	p      kernels.Params
	infKey bool // +Inf in one element of key 40 of key head 0
}

// decodeHostCases are few query rows per key head against a longer
// sequence of keys, as a key/value cache makes them: every unit shape of
// each storage format, grouped heads, lengths, a window, the softcap with
// ALiBi, causal rows, paged keys, +Inf in one key, and one to five
// splits.
func decodeHostCases() []decodeHostCase {
	at := func(b, h, hkv, nq, nk, d int) kernels.Params {
		return kernels.Params{B: b, H: h, Hkv: hkv, Nq: nq, Nk: nk, D: d, Scale: 1 / math.Sqrt(float64(d))}
	}
	lengths := at(2, 4, 2, 1, 300, 64)
	lengths.KLens = []int{300, 77}
	modified := at(1, 8, 1, 2, 250, 100) // 16 rows a key head: two units of 8
	modified.Causal, modified.Softcap, modified.ALiBi = true, 8, []float64{1, .5, .25, .125, .0625, .03125, .015625, .0078125}
	window := at(1, 2, 2, 3, 200, 40)
	window.Window = kernels.Window{On: true, Left: 50, Right: 0}
	paged := func(p kernels.Params, size int) kernels.Params {
		perSeq := (p.Nk + size - 1) / size
		pg := &kernels.Pages{Size: size, Count: p.B*perSeq + 3}
		next := pg.Count - 1 // pages handed out from the end, so that no table is the identity
		for range p.B {
			t := make([]int, perSeq)
			for i := range t {
				t[i], next = next, next-1
			}
			pg.Table = append(pg.Table, t)
		}
		p.Pages = pg
		return p
	}
	var cs []decodeHostCase
	for _, s := range []storeKind{storeF32, storeBF16, storeFP16} {
		for _, splits := range []int{1, 5} {
			cs = append(cs,
				decodeHostCase{s: s, splits: splits, p: at(2, 2, 2, 1, 200, 64)},
				decodeHostCase{s: s, splits: splits, p: lengths},
				decodeHostCase{s: s, splits: splits, p: modified},
				decodeHostCase{s: s, splits: splits, p: paged(window, 16)},
				decodeHostCase{s: s, splits: splits, p: paged(at(1, 4, 1, 1, 130, 200), 7)})
		}
		cs = append(cs, decodeHostCase{s: s, splits: 2, p: at(1, 4, 4, 4, 180, 128)},
			decodeHostCase{s: s, splits: 3, p: at(1, 4, 2, 1, 150, 64), infKey: true})
	}
	return cs
}

// TestDecodeKernelsOnHost runs the decoding kernels (csrc/decode.cuh: the
// split-KV units on CUDA cores for keys stored in float32 and on tensor
// cores for bf16 and fp16, and the merge of their splits) on the host
// through emu/decode.cc, with the launch shapes decode.go gives, and holds
// O and the LSE to the conformance suite's bounds in the precision the
// storage format serves (FP32, BF16, FP16). Stored rows are laid out as a
// device cache lays them out (padded to cacheRowAlign elements), keys
// past a sequence's length and a pool's unused pages hold NaN, and each
// sequence's last Nq keys come in through the cache's append kernel, as
// in a cache's step.
func TestDecodeKernelsOnHost(t *testing.T) {
	bin := buildEmu(t, emuCompiler(t), "decode")
	precisions := map[storeKind]Precision{storeF32: FP32, storeBF16: BF16, storeFP16: FP16}
	for i, c := range decodeHostCases() {
		name := fmt.Sprintf("%v/%s_paged=%v/splits=%d", c.s, caseName(c.p), c.p.Pages != nil, c.splits)
		if c.infKey {
			name += "/inf-k"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runDecodeOnHost(t, bin, c, precisions[c.s], uint64(i))
		})
	}
}

// storedRows returns x ([rows, d] float32) as format s stores it: rows of
// stride elements, the padding zero, as raw bytes.
func storedRows(s storeKind, x []float32, d, stride int) []byte {
	rows := len(x) / d
	out := make([]byte, rows*stride*s.bytes())
	for r := range rows {
		for c := range d {
			at := (r*stride + c) * s.bytes()
			switch v := x[r*d+c]; s {
			case storeF32:
				binary.LittleEndian.PutUint32(out[at:], math.Float32bits(v))
			case storeBF16:
				binary.LittleEndian.PutUint16(out[at:], bf16Bits(v))
			default:
				binary.LittleEndian.PutUint16(out[at:], fp16Bits(v))
			}
		}
	}
	return out
}

// bf16Bits rounds x to bfloat16, to nearest even (NaN stays NaN).
func bf16Bits(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// fp16Bits rounds x to IEEE binary16, to nearest even (past the largest
// half, 65504, to infinity).
func fp16Bits(x float32) uint16 {
	u := math.Float32bits(x)
	sign := uint16(u>>16) & 0x8000
	a := math.Abs(float64(x))
	switch {
	case x != x:
		return 0x7e00
	case a >= 65520:
		return sign | 0x7c00
	case a < 0x1p-14: // subnormal: multiples of 2^-24
		return sign | uint16(math.RoundToEven(a*0x1p24))
	}
	u &= 0x7fffffff
	u += 0xfff + (u>>13)&1 // to 10 mantissa bits, nearest even
	exp := int(u>>23) - 127 + 15
	return sign | uint16(exp)<<10 | uint16(u>>13)&0x3ff
}

// runDecodeOnHost runs one decode problem through emu/decode.cc and checks
// O and the LSE.
func runDecodeOnHost(t *testing.T, bin string, c decodeHostCase, prec Precision, seed uint64) {
	p := c.p
	normals := unitNormals(rand.New(rand.NewPCG(seed, 34)))
	poolRows := p.B * p.KVHeads() * p.Nk
	if p.Pages != nil {
		poolRows = p.Pages.Count * p.KVHeads() * p.Pages.Size
	}
	q, k, v := normals(p.QLen()), make([]float32, poolRows*p.D), make([]float32, poolRows*p.D)
	for i := range k {
		k[i], v[i] = float32(math.NaN()), float32(math.NaN()) // rows no key reads
	}
	// The last Nq keys of each sequence are the step's new rows, which the
	// append kernel stores: kNew and vNew [B, Hkv, Nq, D], each going to
	// its row of the pool (dest, in elements of the stored rows).
	kNew, vNew, dest := make([]float32, p.B*p.KVHeads()*p.Nq*p.D), make([]float32, p.B*p.KVHeads()*p.Nq*p.D), make([]int64, 0, p.B*p.KVHeads()*p.Nq)
	var appended [][2]int // (kvh, j) of each new row, in kNew's order
	for kvh := range p.B * p.KVHeads() {
		n := p.Nk
		if p.KLens != nil {
			n = p.KLens[kvh/p.KVHeads()]
		}
		for j := range n {
			row := p.KeyRow(kvh, j)
			copy(k[row:row+p.D], normals(p.D))
			copy(v[row:row+p.D], normals(p.D))
		}
		if c.infKey && kvh == 0 {
			k[p.KeyRow(0, 40)+2] = float32(math.Inf(1))
		}
		for j := n - p.Nq; j < n; j++ {
			row := p.KeyRow(kvh, j)
			copy(kNew[len(appended)*p.D:], k[row:row+p.D])
			copy(vNew[len(appended)*p.D:], v[row:row+p.D])
			appended = append(appended, [2]int{kvh, j})
		}
	}
	stored := func(x []float32) []float32 { // x as the pool holds it before the append: NaN in the new rows
		y := slices.Clone(x)
		for _, a := range appended {
			row := p.KeyRow(a[0], a[1])
			for c := range p.D {
				y[row+c] = float32(math.NaN())
			}
		}
		return y
	}
	dp, err := decodeDim(p.D)
	if err != nil {
		t.Fatal(err)
	}
	rows := p.H / p.KVHeads() * p.Nq
	tile := decodeTile(c.s, rows)
	_, perBlock := decodeLayout(c.s, dp, tile)
	units := p.B * p.KVHeads() * ((rows + tile - 1) / tile) * c.splits
	stride := p.D
	if c.s != storeF32 {
		stride = int(roundUp(int64(p.D), cacheRowAlign))
	}
	var blob emuBlob
	vars := variantArgs{heads: int64(p.H)}
	if p.KLens != nil {
		vars.kLens = put(&blob, lens32(p.KLens))
	}
	if p.ALiBi != nil {
		vars.alibi = put(&blob, p.ALiBi)
	}
	for _, a := range appended {
		dest = append(dest, int64(p.KeyRow(a[0], a[1])/p.D*stride))
	}
	ops := operands{q: tensorAt{ptr: put(&blob, q), rows: int64(p.Nq), ld: int64(p.D)},
		k:    tensorAt{ptr: put(&blob, storedRows(c.s, stored(k), p.D, stride)), rows: int64(p.Nk), ld: int64(stride)},
		v:    tensorAt{ptr: put(&blob, storedRows(c.s, stored(v), p.D, stride)), rows: int64(p.Nk), ld: int64(stride)},
		o:    tensorAt{ptr: put(&blob, make([]float32, p.QLen())), rows: int64(p.Nq), ld: int64(p.D)},
		lse:  put(&blob, make([]float32, p.LSELen())),
		vars: vars}
	kp := newParams(p, ops)
	kp.Splits = int64(c.splits)
	kp.KNew, kp.VNew, kp.DestRows = put(&blob, kNew), put(&blob, vNew), put(&blob, dest)
	var mergeBlocks, mergeThreads int64
	if c.splits > 1 {
		n := p.B * p.KVHeads() * rows * c.splits
		kp.PartO, kp.PartLse = put(&blob, make([]float32, n*p.D)), put(&blob, make([]float32, 2*n))
		mergeBlocks, mergeThreads = int64(p.B*p.KVHeads()*rows*((p.D+31)/32)), int64(decodeMergeBlock(c.splits))
	}
	if p.Pages != nil {
		table, tableStride := tableOf(p)
		kp.BlockTable, kp.TableStride, kp.PageSize = put(&blob, table), tableStride, int64(p.Pages.Size)
	}
	formats := map[storeKind]int64{storeF32: 0, storeBF16: 1, storeFP16: 2}
	head := [8]int64{formats[c.s], int64(dp), int64(tile), int64((units + perBlock - 1) / perBlock), mergeBlocks, mergeThreads,
		int64(len(blob))}
	res := runEmu(t, bin, head, kp, blob)
	o, lse := get[float32](res, ops.o.ptr, p.QLen()), get[float32](res, ops.lse, p.LSELen())
	if p.Pages != nil {
		// The reference takes the keys dense: the same problem, gathered.
		dense := p
		dense.Pages = nil
		kd, vd := make([]float32, dense.KLen()), make([]float32, dense.KLen())
		for kvh := range p.B * p.KVHeads() {
			for j := range p.Nk {
				from, to := p.KeyRow(kvh, j), dense.KeyRow(kvh, j)
				copy(kd[to:to+p.D], k[from:])
				copy(vd[to:to+p.D], v[from:])
			}
		}
		p, k, v = dense, kd, vd
	}
	conformance.CheckForward(t, p, prec, q, k, v, o, lse)
}
