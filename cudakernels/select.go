package cudakernels

import (
	"fmt"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// Kernel selection is one pure function, choose: from what the device is
// (Capability), what the backend was asked for (precision, family) and what
// a call needs (element type, head dimension, direction) it returns the
// kernel family and its launch shape, or the error a call gets. The loader
// (registry_gpu.go) looks up the kernels of every choice it can return, and
// each call asks again; select_test.go covers the whole table on the CPU.

// Capability is what selection needs to know of a device.
type Capability struct {
	Major, Minor int
	MaxSmem      int // dynamic shared memory one block may opt into, in bytes
	SMs          int // multiprocessors, which decoding's key splits fill
}

// hopper reports whether sm_90a code runs on the device: on compute
// capability 9.0 and nothing else.
func (c Capability) hopper() bool { return c.Major == 9 && c.Minor == 0 }

type direction int

const (
	forwardDir direction = iota
	backwardDir
)

func (d direction) String() string {
	if d == backwardDir {
		return "bwd"
	}
	return "fwd"
}

// kernelKind is the family a choice runs on: the CUDA cores (csrc/*_simt),
// mma.sync (FamilySM80, csrc/*_mma) or wgmma (FamilySM90, csrc/*_wgmma).
type kernelKind int

const (
	kindSIMT kernelKind = iota
	kindMMA
	kindWGMMA
)

func (k kernelKind) String() string {
	switch k {
	case kindMMA:
		return "mma"
	case kindWGMMA:
		return "wgmma"
	}
	return "simt"
}

// request is what one call needs.
type request struct {
	prec Precision // the backend's precision (for float32 calls)
	f64  bool      // a float64 call: always CUDA cores in float64
	d    int       // head dimension
	dir  direction
	// biasOrDropout: the problem has an additive bias or dropout, which
	// only the _full kernels and the CUDA-core ones compute; bias: it has
	// a bias (dropout without one may take the Hopper forward's _drop
	// kernel).
	biasOrDropout, bias bool
	// causal: the causal mask, and nq: the query count, which only a
	// tuning table looks at (chooseTuned).
	causal bool
	nq     int
	// plain: the plain kernels compute the problem (plainParams, no bias
	// or dropout): FP32's Hopper kernels compute only those
	// (wgmmaPlainOnly).
	plain bool
}

// requestFor is the request of a call on elements of elem bytes for
// problem p in direction dir, on a backend of precision prec.
func requestFor(prec Precision, elem int, p kernels.Params, dir direction) request {
	r := request{prec: prec, f64: elem == 8, d: p.D, dir: dir, biasOrDropout: p.Bias != nil || p.Dropout.On(),
		bias: p.Bias != nil, causal: p.Causal, nq: p.Nq}
	r.plain = !r.biasOrDropout && plainParams(p)
	return r
}

// choice is a kernel family with its launch shape. It is comparable, and the
// registry keys loaded kernels by it.
type choice struct {
	kind kernelKind
	dir  direction
	// prec is the operand precision of the tensor-core kernels, and for a
	// CUDA-core backward with rounded set, the precision q, k, v and dO are
	// rounded to first (as the forward rounded them); FP32 otherwise.
	prec    Precision
	rounded bool
	elem    int // bytes of the caller's elements: 4, or 8 for float64
	dp      int // compiled (padded) head dimension
	// rows is a block's query rows (forward, dQ) and keys (dK/dV); step is
	// the key tile of the forward or the rows the backward kernels loop
	// over. threads is the block size.
	rows, step, threads int
	// smem is the dynamic shared memory of the forward or of the dK/dV
	// kernel, smemDQ of the dQ kernel.
	smem, smemDQ int
	// full: a tensor-core kernel for problems with a bias or dropout,
	// launched with its _full kernels' shape; drop: the Hopper _drop
	// kernels, for dropout without a bias (full too).
	full, drop bool
	// plain is the kernel the Hopper forward runs plain problems on; only
	// a tuning table asks for another than the default (candidate).
	plain plainForward
	// passes: a persistent warp-specialized forward gets its K and Vᵀ
	// images from the two conversion passes before the launch, even where
	// it would make them itself (wgmmaFwdOwnKVPays); only a tuning table
	// asks for it (candidate.passes).
	passes bool
	// blocked: the CUDA-core kernels are the register-blocked ones
	// (fwd_simt_blocked.cuh, bwd_simt_blocked.cuh).
	blocked bool
}

// plainForward names the kernel a Hopper forward choice runs plain problems
// on (problems with a variant take the _var kernel, those with a bias or
// dropout the _full one).
type plainForward int

const (
	// plainDefault: the warp-specialized kernel where wgmmaWSBuilt, else
	// the two-warpgroup row-block kernel.
	plainDefault plainForward = iota
	// plainRowBlock: the row-block kernel (the _var one, which computes
	// plain problems too) where the default is warp-specialized: 128
	// query rows a block, no producer warpgroup.
	plainRowBlock
	// plainWS2: the warp-specialized kernel with two consumer warpgroups
	// (_ws2, 128 rows) where the default has three (wgmmaWS2Built).
	plainWS2
)

// builtFor reports whether k is a kernel of its own for the Hopper plain
// forward of prec at dp, beside the default.
func (k plainForward) builtFor(prec Precision, dp int) bool {
	switch k {
	case plainRowBlock:
		return wgmmaWSBuilt(prec, dp)
	case plainWS2:
		return wgmmaWS2Built(prec, dp)
	}
	return true
}

// persistentFor reports whether k, for the Hopper plain forward of prec at
// dp, is a persistent warp-specialized kernel: one that can make its K and
// Vᵀ images itself (KVConverter), so that the conversion passes are a
// choice there (choice.passes).
func (k plainForward) persistentFor(prec Precision, dp int) bool {
	switch k {
	case plainDefault:
		return wgmmaWSBuilt(prec, dp) && wgmmaFwdWS.persistent(dp)
	case plainWS2:
		return wgmmaWS2Built(prec, dp) && wgmmaFwdWS2.persistent(dp)
	}
	return false
}

// checkDevice fails for a device no kernel runs on, or a family it cannot
// run; NewBackend returns its error.
func checkDevice(c Capability, fam Family) error {
	if c.Major < 8 {
		return fmt.Errorf("%w: compute capability %d.x, kernels need 8.0 or newer", ErrUnsupported, c.Major)
	}
	if fam == FamilySM90 && !c.hopper() {
		return fmt.Errorf("%w: kernel family sm90 needs compute capability 9.0, device has %d.%d", ErrUnsupported, c.Major, c.Minor)
	}
	return nil
}

// choose returns the kernel for r on a device c (checkDevice(c, fam) passed)
// of a backend of family fam, or an error wrapping ErrUnsupported (and
// kernels.ErrInvalidParams for a head dimension above 256).
//
//   - float64 calls: CUDA cores. FP32: on Hopper (fam not FamilySM80) the
//     3xTF32 kernels (csrc's mma::TF32x3) for plain problems where built
//     (wgmmaBuilt, dp = 64 and 128), both directions alike, so that the backward
//     recomputes the forward's scores; the CUDA cores elsewhere.
//   - TF32, BF16, FP16 forward: wgmma where the device is Hopper, fam is not
//     FamilySM80 and it is built (wgmmaBuilt; with a bias or dropout the
//     _full kernel, at fewer head dimensions, or for dropout without a bias
//     the _drop kernel where wgmmaDropBuilt), else mma.sync; if that
//     kernel does not fit the device's shared memory, calls with this head
//     dimension fail (no fallback).
//   - their backward: fails where the forward does; else wgmma as above
//     (wgmmaBwdBuilt, fitting; with a bias or dropout the _full kernels,
//     BF16 and FP16 only), else mma.sync (BF16 and FP16 up to
//     mmaBwdMaxDim, fitting), else CUDA cores on rounded operands.
func choose(c Capability, fam Family, r request) (choice, error) {
	dp, err := paddedDim(r.d)
	if err != nil {
		return choice{}, err
	}
	if r.f64 || r.prec == FP32 {
		if split, ok := fp32TensorCoreChoice(c, fam, r, dp); ok {
			return split, nil
		}
		return simtChoice(r.dir, r.f64, dp, FP32, c.MaxSmem), nil
	}
	useHopper := c.hopper() && fam != FamilySM80
	fwd := mmaForwardChoice(r.prec, dp, r.biasOrDropout)
	if useHopper && wgmmaBuilt(r.prec, dp, r.biasOrDropout) {
		fwd = wgmmaForwardChoice(r.prec, dp, r.biasOrDropout, r.biasOrDropout && !r.bias && wgmmaDropBuilt(r.prec, dp))
	}
	if fwd.smem > c.MaxSmem {
		return choice{}, fmt.Errorf("%w: %v forward at head dimension %d needs %d bytes of shared memory, the device allows %d",
			ErrUnsupported, fwd.kind, dp, fwd.smem, c.MaxSmem)
	}
	if r.dir == forwardDir {
		if fam == FamilyAuto && fwd.kind == kindWGMMA && r.plain && wgmmaWS2Built(r.prec, dp) && wgmmaWS2Pays(r.nq, r.causal) {
			fwd.plain = plainWS2
		}
		return fwd, nil
	}
	if useHopper && wgmmaBwdBuilt(r.prec, dp, r.biasOrDropout) {
		if b := wgmmaBackwardChoice(r.prec, dp, r.biasOrDropout, r.biasOrDropout && !r.bias); max(b.smem, b.smemDQ) <= c.MaxSmem {
			return b, nil
		}
	}
	if r.prec != TF32 && dp <= mmaBwdMaxDim {
		if b := mmaBackwardChoice(r.prec, dp); b.smem <= c.MaxSmem {
			return b, nil
		}
	}
	return simtChoice(backwardDir, false, dp, r.prec, c.MaxSmem), nil
}

// wgmmaWS2Pays is the heuristic's choice between the Hopper plain
// forward's two warp-specialized kernels at dp = 64 (16-bit operands, where
// wgmmaWS2Built): the two-consumer one (_ws2: 128 rows a block on a
// persistent grid, converting K and V itself) for nq ≤ 2048, and causal
// nq ≤ 4096, the three-consumer one (192 rows, a block per item) from
// there on. It is what the H100's tuning tables (tuned/h100.json,
// 2026-12-07) chose, made a rule: _ws2 won at N ≤ 2048 (FP16 at 2048
// within 0.4 % in the first table, 2.3 % ahead in the second) and causal
// N ≤ 4096, the causal N = 2048 forward by 13.5 %. Only FamilyAuto
// backends on devices without a table take it (an H200 has none): an
// explicit FamilySM90 keeps the three-consumer kernel, which the tests'
// sm90 set covers. heuristicLengths are a query count on each side of its
// bounds, at which loadRegistry loads the kernels the heuristic may
// choose.
func wgmmaWS2Pays(nq int, causal bool) bool {
	return nq <= 2048 || causal && nq <= 4096
}

var heuristicLengths = []int{1, 4096, 8192}

// fp32TensorCoreChoice returns the 3xTF32 Hopper kernels of an FP32 call
// (not float64) on a Hopper device of a backend not held to FamilySM80
// (FamilyAuto since 2026-12-05, when they passed the FP32 suite on an
// H100 at 2.4–6.4× the CUDA-core kernels' speed), where the
// problem is plain, they are built for dp and fit the device's shared
// memory: both directions or neither, since a backward on the CUDA cores
// after a 3xTF32 forward would take P = exp(S − LSE) from scores other
// than those the LSE came from (NOTES, "FP32 on tensor cores").
func fp32TensorCoreChoice(c Capability, fam Family, r request, dp int) (choice, bool) {
	if r.f64 || r.prec != FP32 || fam == FamilySM80 || !c.hopper() || !r.plain || !wgmmaBuilt(FP32, dp, false) ||
		!wgmmaBwdBuilt(FP32, dp, false) {
		return choice{}, false
	}
	fwd, bwd := wgmmaForwardChoice(FP32, dp, false, false), wgmmaBackwardChoice(FP32, dp, false, false)
	if max(fwd.smem, bwd.smem, bwd.smemDQ) > c.MaxSmem {
		return choice{}, false
	}
	if r.dir == backwardDir {
		return bwd, true
	}
	return fwd, true
}

// simtChoice is the CUDA-core kernel of one direction; rounding names the
// precision a float32 backward rounds its operands to (FP32: none). The
// float32 kernels are the register-blocked ones where they are built and
// their shared memory fits maxSmem (the forward at dp = 256 takes 192 KiB,
// more than sm_80's 163; the backward's dK/dV at 128 takes 192), else the
// row-block ones.
func simtChoice(dir direction, f64 bool, dp int, rounding Precision, maxSmem int) choice {
	elem := 4
	if f64 {
		elem = 8
	}
	rb := simtRowBlockShape(dir, elem, dp)
	ch := choice{kind: kindSIMT, dir: dir, prec: FP32, elem: elem, dp: dp, rows: rb.rows, step: rb.rows, threads: rb.threads,
		smem: rb.smem}
	if dir == backwardDir {
		ch.smemDQ = rb.smem
		if rounding != FP32 {
			ch.prec, ch.rounded = rounding, true
		}
	}
	// After the row-block shape: the blocked kernels replace all of it,
	// the dQ kernel's shared memory included (the first device run,
	// 2026-12-05, trapped in dq_blocked at DP = 128 when the row-block
	// kernel's smemDQ overwrote the blocked one's).
	if dir == forwardDir && simtBlocked(elem, dp) && simtBlockedSmem(dp) <= maxSmem {
		ch.blocked = true
		ch.rows, ch.step, ch.threads, ch.smem = simtBlockedRows, simtBlockedRows, simtBlockedThreads, simtBlockedSmem(dp)
	}
	if dir == backwardDir && simtBlockedBwd(elem, dp) && max(simtBlockedDKDVSmem(dp), simtBlockedDQSmem(dp)) <= maxSmem {
		ch.blocked = true
		ch.rows, ch.step, ch.threads = simtBlockedRows, simtBlockedRows, simtBlockedThreads
		ch.smem, ch.smemDQ = simtBlockedDKDVSmem(dp), simtBlockedDQSmem(dp)
	}
	return ch
}

// mmaForwardChoice is the mma.sync forward; full (a bias or dropout) gets
// the _full kernel's launch shape, which the registry loads as a choice of
// its own.
func mmaForwardChoice(prec Precision, dp int, full bool) choice {
	return choice{kind: kindMMA, dir: forwardDir, prec: prec, elem: 4, dp: dp, rows: mmaFwdRows(dp, full),
		step: mmaFwdBK(prec, dp), threads: mmaThreads, smem: mmaFwdSmem(prec, dp, full), full: full}
}

func mmaBackwardChoice(prec Precision, dp int) choice {
	return choice{kind: kindMMA, dir: backwardDir, prec: prec, elem: 4, dp: dp, rows: mmaBwdRows,
		step: mmaBwdStep, threads: mmaBwdThreads, smem: mmaBwdSmem(dp), smemDQ: mmaBwdSmem(dp)}
}

// wgmmaForwardChoice is the Hopper forward; full (a bias or dropout) gets
// the _full kernel's launch shape, a choice of its own as for mma.sync, and
// drop (dropout without a bias, where wgmmaDropBuilt) the _drop kernel's,
// which has no bias tiles.
func wgmmaForwardChoice(prec Precision, dp int, full, drop bool) choice {
	biasTiles := full && !drop
	return choice{kind: kindWGMMA, dir: forwardDir, prec: prec, elem: 4, dp: dp, rows: wgmmaRows,
		step: wgmmaFwdBK(prec, dp, biasTiles), threads: wgmmaThreads, smem: wgmmaFwdSmem(prec, dp, biasTiles),
		full: full, drop: drop}
}

// wgmmaBackwardChoice is the Hopper backward; full (a bias or dropout)
// gets the _full kernels' shared memory, a choice of its own, and drop
// (dropout without a bias) the _drop kernels', without the bias tiles.
func wgmmaBackwardChoice(prec Precision, dp int, full, drop bool) choice {
	step, _ := wgmmaBwdShape(prec, dp)
	if wgmmaBwdSplit3(prec, dp) && !full {
		// smem is the dV and dK kernels' (the most of the two), smemDQ dQ's.
		return choice{kind: kindWGMMA, dir: backwardDir, prec: prec, elem: 4, dp: dp, rows: wgmmaBwdTile, step: step,
			threads: wgmmaBwdSplitThreads, smem: max(wgmmaBwdDVSmem(dp), wgmmaBwdDKSmem(dp)), smemDQ: wgmmaBwdDQSplitSmem(dp)}
	}
	dkdv, dq := wgmmaBwdSmem(prec, dp, full && !drop)
	return choice{kind: kindWGMMA, dir: backwardDir, prec: prec, elem: 4, dp: dp, rows: wgmmaBwdBlock,
		step: step, threads: wgmmaBwdThreads, smem: dkdv, smemDQ: dq, full: full, drop: drop}
}

// headDims are the head dimensions kernels are compiled for. A problem's D is
// padded up to the next one inside the kernel (zero columns add nothing to
// dot products and are not written back).
var headDims = []int{32, 64, 128, 256}

// paddedDim returns the compiled head dimension that serves d.
func paddedDim(d int) (int, error) {
	for _, dp := range headDims {
		if d <= dp {
			return dp, nil
		}
	}
	return 0, fmt.Errorf("%w: %w: head dimension %d, at most %d", kernels.ErrInvalidParams, ErrUnsupported, d, headDims[len(headDims)-1])
}
