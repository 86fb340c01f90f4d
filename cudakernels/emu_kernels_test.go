package cudakernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/kernels/conformance"
)

// hostCase is one problem of TestMMAKernelsOnHost and
// TestCUDACoreKernelsConformOnHost, with the non-finite value it puts in
// one input, if any: "nan-q" a NaN in row 5 of Q, "inf-k" and "inf-v" +Inf
// in the last key of K (so that some rows score +Inf, the others −Inf) or
// of V (head 0 each). Those run without a causal mask, under which the
// tiled kernels may spread a masked NaN (kernels' doc,
// MaskedNaNMayPropagate), which CheckPass does not allow.
type hostCase struct {
	p      kernels.Params
	poison string
}

// hostCases are the problems of TestMMAKernelsOnHost and
// TestCUDACoreKernelsConformOnHost: each variant the kernels compute, at
// the three padded head dimensions, and non-finite inputs.
func hostCases() []hostCase {
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
	var cs []hostCase
	for _, p := range []kernels.Params{plain, causal(plain), fewKeys, fewRows, window, lengths, gqa, capped, dropout, bias,
		sharedBias, at(1, 2, 100, 100, 100), wide, widest} {
		cs = append(cs, hostCase{p: p})
	}
	for _, poison := range []string{"nan-q", "inf-k", "inf-v"} {
		cs = append(cs, hostCase{at(1, 2, 100, 90, 40), poison})
	}
	return cs
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
		for i, c := range hostCases() {
			p := c.p
			dp, err := paddedDim(p.D)
			if err != nil {
				t.Fatal(err)
			}
			backward := prec != TF32 && dp <= mmaBwdMaxDim
			// The subtests only read hp: its blob goes to each run as a copy.
			hp := newHostProblem(c, uint64(i), backward)
			kp := newParams(hp.p, hp.ops)
			kinds := []int64{pickMmaVariant[int64](&kp, 0, 1, 2)} // the backend's choice
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
					types := map[Precision]int64{BF16: 0, FP16: 1, TF32: 2}
					head := [8]int64{types[prec], kind, boolWord(backward), int64(dp), int64(len(hp.blob)), hp.ops.vars.biasSlices}
					hp.check(t, prec, runEmu(t, bin, head, kp, hp.blob), backward)
				})
			}
		}
	}
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
func newHostProblem(c hostCase, seed uint64, backward bool) *hostProblem {
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
	for i, c := range hostCases() {
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
