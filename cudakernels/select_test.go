package cudakernels

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// Devices as the driver reports them (opt-in shared memory per block).
var (
	h200  = Capability{Major: 9, Minor: 0, MaxSmem: 232448}
	a100  = Capability{Major: 8, Minor: 0, MaxSmem: 166912}
	ada   = Capability{Major: 8, Minor: 9, MaxSmem: 101376}
	sm100 = Capability{Major: 10, Minor: 0, MaxSmem: 232448}
	// tiny fits the mma.sync forward at D = 32 (30720 bytes) but not its
	// backward (31744).
	tiny = Capability{Major: 8, Minor: 6, MaxSmem: 31000}
)

// TestChoose pins the kernel each request gets, with every fallback.
func TestChoose(t *testing.T) {
	fwd, bwd := forwardDir, backwardDir
	cases := []struct {
		name    string
		dev     Capability
		fam     Family
		prec    Precision
		f64     bool
		d       int
		dir     direction
		kind    kernelKind
		dp      int
		rows    int
		step    int
		rounded bool
		err     error
	}{
		{"fp32 on CUDA cores", h200, FamilyAuto, FP32, false, 128, fwd, kindSIMT, 128, 64, 64, false, nil},
		{"fp32 D≤32 row blocks", h200, FamilyAuto, FP32, false, 32, fwd, kindSIMT, 32, 32, 32, false, nil},
		{"fp32 D=256 blocked where it fits", h200, FamilyAuto, FP32, false, 256, fwd, kindSIMT, 256, 64, 64, false, nil},
		{"fp32 D=256 row blocks on sm_80", a100, FamilyAuto, FP32, false, 256, fwd, kindSIMT, 256, 32, 32, false, nil},
		{"float64 tile 16 at 256", h200, FamilyAuto, BF16, true, 256, fwd, kindSIMT, 256, 16, 16, false, nil},
		{"bf16 hopper", h200, FamilyAuto, BF16, false, 128, fwd, kindWGMMA, 128, 128, 128, false, nil},
		{"bf16 hopper sm90 forced", h200, FamilySM90, BF16, false, 64, fwd, kindWGMMA, 64, 128, 128, false, nil},
		{"bf16 D≤32 not built for sm90", h200, FamilyAuto, BF16, false, 32, fwd, kindMMA, 32, 128, 64, false, nil},
		{"bf16 D=200 padded", h200, FamilyAuto, BF16, false, 200, fwd, kindWGMMA, 256, 128, 64, false, nil},
		{"tf32 D=256 not built for sm90", h200, FamilyAuto, TF32, false, 256, fwd, kindMMA, 256, 64, 32, false, nil},
		{"tf32 hopper", h200, FamilyAuto, TF32, false, 64, fwd, kindWGMMA, 64, 128, 64, false, nil},
		{"sm80 family on hopper", h200, FamilySM80, BF16, false, 128, fwd, kindMMA, 128, 128, 64, false, nil},
		{"a100 bf16", a100, FamilyAuto, BF16, false, 128, fwd, kindMMA, 128, 128, 64, false, nil},
		{"a100 tf32 key tile 32", a100, FamilyAuto, TF32, false, 96, fwd, kindMMA, 128, 128, 32, false, nil},
		{"sm100 is not sm_90a", sm100, FamilyAuto, FP16, false, 128, fwd, kindMMA, 128, 128, 64, false, nil},
		{"ada bf16 D=256 does not fit", ada, FamilyAuto, BF16, false, 256, fwd, 0, 0, 0, 0, false, ErrUnsupported},
		{"D above 256", h200, FamilyAuto, BF16, false, 257, fwd, 0, 0, 0, 0, false, kernels.ErrInvalidParams},

		{"bwd bf16 hopper", h200, FamilyAuto, BF16, false, 128, bwd, kindWGMMA, 128, 128, 64, false, nil},
		{"bwd tf32 hopper steps of 32", h200, FamilyAuto, TF32, false, 128, bwd, kindWGMMA, 128, 128, 32, false, nil},
		{"bwd fp16 D=96 hopper", h200, FamilyAuto, FP16, false, 96, bwd, kindWGMMA, 128, 128, 64, false, nil},
		{"bwd bf16 D=256 on rounded CUDA cores", h200, FamilyAuto, BF16, false, 256, bwd, kindSIMT, 256, 32, 32, true, nil},
		{"bwd bf16 D≤32 mma", h200, FamilyAuto, BF16, false, 32, bwd, kindMMA, 32, 64, 64, false, nil},
		{"bwd tf32 D≤32 rounded", h200, FamilyAuto, TF32, false, 32, bwd, kindSIMT, 32, 32, 32, true, nil},
		{"bwd sm80 family bf16", h200, FamilySM80, BF16, false, 128, bwd, kindMMA, 128, 64, 64, false, nil},
		{"bwd sm80 family tf32 has no mma", h200, FamilySM80, TF32, false, 64, bwd, kindSIMT, 64, 64, 64, true, nil},
		{"bwd a100 fp16", a100, FamilyAuto, FP16, false, 64, bwd, kindMMA, 64, 64, 64, false, nil},
		{"bwd fp32", h200, FamilyAuto, FP32, false, 64, bwd, kindSIMT, 64, 64, 64, false, nil},
		{"bwd fp32 D=128 row blocks on sm_80", a100, FamilyAuto, FP32, false, 128, bwd, kindSIMT, 128, 32, 32, false, nil},
		{"bwd float64 on a bf16 backend", h200, FamilyAuto, BF16, true, 64, bwd, kindSIMT, 64, 32, 32, false, nil},
		{"bwd mma too large falls back", tiny, FamilyAuto, BF16, false, 32, bwd, kindSIMT, 32, 32, 32, true, nil},
		{"bwd fails where the forward does", ada, FamilyAuto, BF16, false, 256, bwd, 0, 0, 0, 0, false, ErrUnsupported},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := choose(tc.dev, tc.fam, request{prec: tc.prec, f64: tc.f64, d: tc.d, dir: tc.dir})
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("error %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := [...]any{c.kind, c.dp, c.rows, c.step, c.rounded}
			want := [...]any{tc.kind, tc.dp, tc.rows, tc.step, tc.rounded}
			if got != want {
				t.Errorf("kind, dp, rows, step, rounded = %v, want %v", got, want)
			}
		})
	}
}

// TestChooseFP32TensorCores pins where FP32 leaves the CUDA cores: a
// backend on Hopper not held to FamilySM80, a plain problem at a head
// dimension the 3xTF32 kernels are built for (dp = 64 and 128), both
// directions together; and the launch shapes, from csrc's sizes (at 128
// the backward's three kernels, wgmmaBwdSplit3: smem is the dV and dK
// kernels' larger, dK's).
func TestChooseFP32TensorCores(t *testing.T) {
	cases := []struct {
		name   string
		dev    Capability
		fam    Family
		d      int
		plain  bool
		f64    bool
		tensor bool
	}{
		{"sm90 plain D64", h200, FamilySM90, 64, true, false, true},
		{"sm90 plain D40 padded", h200, FamilySM90, 40, true, false, true},
		{"sm90 plain D32 not built", h200, FamilySM90, 32, true, false, false},
		{"sm90 plain D128", h200, FamilySM90, 128, true, false, true},
		{"sm90 plain D100 padded", h200, FamilySM90, 100, true, false, true},
		{"sm90 plain D256 not built", h200, FamilySM90, 256, true, false, false},
		{"sm90 with a variant", h200, FamilySM90, 64, false, false, false},
		{"sm90 float64", h200, FamilySM90, 64, true, true, false},
		{"auto on tensor cores", h200, FamilyAuto, 64, true, false, true},
		{"auto with a variant", h200, FamilyAuto, 64, false, false, false},
		{"sm80 family keeps CUDA cores", h200, FamilySM80, 64, true, false, false},
		{"a100 has no wgmma", a100, FamilyAuto, 64, true, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, dir := range []direction{forwardDir, backwardDir} {
				c, err := choose(tc.dev, tc.fam, request{prec: FP32, f64: tc.f64, d: tc.d, dir: dir, plain: tc.plain})
				if err != nil {
					t.Fatal(err)
				}
				if got := c.kind == kindWGMMA; got != tc.tensor {
					t.Fatalf("%v: kind %v, want tensor cores %v", dir, c.kind, tc.tensor)
				}
				if !tc.tensor {
					continue
				}
				dp := 64
				if tc.d > 64 {
					dp = 128
				}
				// fwd_smem_bytes<TF32x3, 64> and <TF32x3, 128> (Q's hi part
				// alone, stages of 32 keys) happen to agree.
				want := [...]int{dp, 128, 64, 256, 197672, 0}
				switch {
				case dir == backwardDir && dp == 64: // bwd_dkdv_smem_bytes, bwd_dq_smem_bytes
					want = [...]int{64, 128, 32, 256, 230968, 230440}
				case dir == backwardDir: // bwd_dk_smem_bytes, bwd_dq_split_smem_bytes
					want = [...]int{128, 64, 32, 128, 230696, 230440}
				}
				got := [...]int{c.dp, c.rows, c.step, c.threads, c.smem, c.smemDQ}
				if got != want || c.prec != FP32 || c.rounded {
					t.Errorf("%v: dp, rows, step, threads, smem, smemDQ = %v, want %v (prec %v, rounded %v)", dir, got, want, c.prec, c.rounded)
				}
			}
		})
	}
	// A device whose blocks cannot have the 3xTF32 backward's shared
	// memory keeps both directions on the CUDA cores.
	small := h200
	small.MaxSmem = 220000
	for _, dir := range []direction{forwardDir, backwardDir} {
		if c, err := choose(small, FamilySM90, request{prec: FP32, d: 64, dir: dir, plain: true}); err != nil || c.kind != kindSIMT {
			t.Errorf("%v with %d bytes of shared memory: %v, %v; want the CUDA cores", dir, small.MaxSmem, c.kind, err)
		}
	}
}

// TestPlainParamsAgrees holds plainParams, which kernel selection asks,
// to isPlain, which the launches ask, on the host tests' problems and a
// few more: they must pick the same kernels.
func TestPlainParamsAgrees(t *testing.T) {
	cases := append(hostCases(), hopperLongCases()...)
	rightOnly := kernels.Params{B: 1, H: 2, Nq: 50, Nk: 60, D: 16, Scale: 0.25, Window: kernels.Window{On: true, Left: -1, Right: 3}}
	leftOnly := rightOnly
	leftOnly.Window = kernels.Window{On: true, Left: 4, Right: -1}
	cases = append(cases, hostCase{p: rightOnly}, hostCase{p: leftOnly})
	plains := 0
	for i, c := range cases {
		hp := newHostProblem(c, uint64(i), false)
		kp := newParams(hp.p, hp.ops)
		if got, want := plainParams(c.p), isPlain(&kp); got != want {
			t.Errorf("%s: plainParams %v, isPlain %v", caseName(c.p), got, want)
		}
		if isPlain(&kp) {
			plains++
		}
	}
	if plains == 0 || plains == len(cases) {
		t.Fatalf("%d of %d cases plain: the test tells nothing", plains, len(cases))
	}
}

// TestChooseInvariants sweeps every device, family, precision, element type,
// head dimension and direction for what must hold everywhere.
func TestChooseInvariants(t *testing.T) {
	for _, dev := range []Capability{h200, a100, ada, sm100, tiny} {
		for _, fam := range []Family{FamilyAuto, FamilySM80, FamilySM90} {
			if checkDevice(dev, fam) != nil {
				continue
			}
			for _, prec := range []Precision{FP32, TF32, BF16, FP16} {
				for _, f64 := range []bool{false, true} {
					for _, d := range []int{1, 8, 32, 33, 64, 96, 128, 200, 256} {
						for _, plain := range []bool{false, true} {
							name := fmt.Sprintf("%d.%d/%v/%v/f64=%v/D%d/plain=%v", dev.Major, dev.Minor, fam, prec, f64, d, plain)
							cf, errF := choose(dev, fam, request{prec: prec, f64: f64, d: d, dir: forwardDir, plain: plain})
							cb, errB := choose(dev, fam, request{prec: prec, f64: f64, d: d, dir: backwardDir, plain: plain})
							if (errF != nil) != (errB != nil) {
								t.Errorf("%s: forward error %v, backward error %v", name, errF, errB)
							}
							if errF != nil {
								continue
							}
							for _, c := range []choice{cf, cb} {
								switch {
								case c.dp < d || c.dp != cf.dp:
									t.Errorf("%s %v: dp %d", name, c.dir, c.dp)
								case prec == FP32 && c.kind != cf.kind:
									t.Errorf("%s: FP32 forward on %v, backward on %v", name, cf.kind, c.kind)
								case f64 && (c.kind != kindSIMT || c.rounded):
									t.Errorf("%s %v: %v rounded=%v, want plain CUDA cores", name, c.dir, c.kind, c.rounded)
								case prec == FP32 && c.rounded:
									t.Errorf("%s %v: FP32 rounded", name, c.dir)
								case prec == FP32 && c.kind != kindSIMT && (c.kind != kindWGMMA || fam == FamilySM80 || !plain):
									t.Errorf("%s %v: FP32 on %v, want the CUDA cores but for plain problems on Hopper's tensor cores", name, c.dir, c.kind)
								case c.kind == kindWGMMA && (!dev.hopper() || fam == FamilySM80):
									t.Errorf("%s %v: wgmma on this device or family", name, c.dir)
								case c.kind != kindSIMT && max(c.smem, c.smemDQ) > dev.MaxSmem:
									t.Errorf("%s %v: %d bytes of shared memory", name, c.dir, c.smem)
								case c.kind == kindWGMMA && c.dir == forwardDir && wgmmaWSBuilt(c.prec, c.dp) &&
									max(wgmmaWSSmem(c.prec, c.dp, 2), wgmmaWSSmem(c.prec, c.dp, 3)) > dev.MaxSmem:
									t.Errorf("%s: the warp-specialized forward takes %d bytes of shared memory", name,
										max(wgmmaWSSmem(c.prec, c.dp, 2), wgmmaWSSmem(c.prec, c.dp, 3)))
								case c.rounded && c.prec != prec:
									t.Errorf("%s: rounds to %v", name, c.prec)
								}
							}
						}
					}
				}
			}
		}
	}
}

func TestCheckDevice(t *testing.T) {
	for _, tc := range []struct {
		dev Capability
		fam Family
		ok  bool
	}{
		{Capability{Major: 7, Minor: 5}, FamilyAuto, false},
		{a100, FamilyAuto, true},
		{a100, FamilySM90, false},
		{ada, FamilySM90, false},
		{sm100, FamilySM90, false},
		{h200, FamilySM90, true},
		{h200, FamilySM80, true},
	} {
		err := checkDevice(tc.dev, tc.fam)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrUnsupported)) {
			t.Errorf("checkDevice(%+v, %v) = %v", tc.dev, tc.fam, err)
		}
	}
}

// TestChooseBiasOrDropout checks the kernels of a problem with a bias or
// dropout on the H200: each direction takes the wgmma _full kernels where
// they are built (wgmmaBuilt and wgmmaBwdBuilt with full) and else what
// the sm80 family takes there (mma.sync's _full kernels, or for the
// backward in TF32 and above mmaBwdMaxDim the rounded CUDA cores); every
// tensor-core choice has the _full shape; and requestFor sees both
// variants.
func TestChooseBiasOrDropout(t *testing.T) {
	for _, prec := range []Precision{BF16, FP16, TF32} {
		for _, d := range headDims {
			for _, dir := range []direction{forwardDir, backwardDir} {
				for _, bias := range []bool{true, false} {
					chooseBiasOrDropout(t, request{prec: prec, d: d, dir: dir, biasOrDropout: true, bias: bias})
				}
			}
		}
	}
	p := kernels.Params{B: 1, H: 1, Nq: 4, Nk: 4, D: 64}
	if r := requestFor(BF16, 4, p, forwardDir); r.biasOrDropout || r.bias {
		t.Error("plain attention asks for the bias or dropout kernels")
	}
	p.Dropout = kernels.Dropout{P: 0.1, Seed: 1}
	if r := requestFor(BF16, 4, p, forwardDir); !r.biasOrDropout || r.bias {
		t.Errorf("requestFor with dropout = %+v", r)
	}
	p.Dropout = kernels.Dropout{}
	p.Bias = &kernels.Bias{Bb: 1, Hb: 1}
	if r := requestFor(BF16, 8, p, backwardDir); !r.biasOrDropout || !r.bias || !r.f64 || r.dir != backwardDir {
		t.Errorf("requestFor with a bias, float64, backward = %+v", r)
	}
}

// chooseBiasOrDropout checks TestChooseBiasOrDropout's request r: dropout
// without a bias (r.bias false) takes the _drop forward where
// wgmmaDropBuilt, with 128-key tiles, and everything else as with a bias.
func chooseBiasOrDropout(t *testing.T, r request) {
	t.Helper()
	prec, d, dir := r.prec, r.d, r.dir
	got, err := choose(h200, FamilyAuto, r)
	if err != nil {
		t.Fatalf("%v %v D=%d: %v", prec, dir, d, err)
	}
	sm80, err := choose(h200, FamilySM80, r)
	if err != nil {
		t.Fatalf("sm80 family %v %v D=%d: %v", prec, dir, d, err)
	}
	if !got.full && (dir == forwardDir || got.kind == kindWGMMA) {
		t.Errorf("%v %v D=%d with a bias or dropout: not the _full kernels' shape", prec, dir, d)
	}
	dp, _ := paddedDim(d)
	if dir == forwardDir && wgmmaBuilt(prec, dp, true) {
		drop := !r.bias && wgmmaDropBuilt(prec, dp)
		if want := wgmmaForwardChoice(prec, dp, true, drop); got != want {
			t.Errorf("%v forward D=%d, bias %v: %+v, want %+v", prec, d, r.bias, got, want)
		}
		if drop && (got.step != 128 || got.smem > h200.MaxSmem) {
			t.Errorf("%v forward D=%d, dropout alone: key tile %d, shared memory %d", prec, d, got.step, got.smem)
		}
		return
	}
	if dir == backwardDir && wgmmaBwdBuilt(prec, dp, true) {
		if want := wgmmaBackwardChoice(prec, dp, true, !r.bias); got != want {
			t.Errorf("%v backward D=%d, bias %v: %+v, want %+v", prec, d, r.bias, got, want)
		}
		if n := wgmmaDbiasSmem(prec, dp); n > h200.MaxSmem {
			t.Errorf("%v D=%d: the wgmma dBias kernel needs %d bytes of shared memory, the H200 allows %d", prec, d, n, h200.MaxSmem)
		}
		return
	}
	if got != sm80 {
		t.Errorf("%v %v D=%d: %v, the sm80 family %v", prec, dir, d, got.kind, sm80.kind)
	}
}

// TestSimtBlockedShapes holds the register-blocked CUDA-core kernels'
// launch shapes to their shared memory: the first device run trapped in
// dq_blocked at DP = 128, launched with the row-block dQ kernel's.
func TestSimtBlockedShapes(t *testing.T) {
	const maxSmem = 227 << 10
	for _, dp := range []int{64, 128} {
		c := simtChoice(backwardDir, false, dp, FP32, maxSmem)
		if !c.blocked || c.threads != simtBlockedThreads || c.smem != simtBlockedDKDVSmem(dp) || c.smemDQ != simtBlockedDQSmem(dp) {
			t.Errorf("dp %d backward: blocked %v threads %d smem %d smemDQ %d, want blocked, %d, %d, %d", dp, c.blocked,
				c.threads, c.smem, c.smemDQ, simtBlockedThreads, simtBlockedDKDVSmem(dp), simtBlockedDQSmem(dp))
		}
		r := simtChoice(backwardDir, false, dp, BF16, maxSmem)
		if !r.blocked || !r.rounded || r.smemDQ != simtBlockedDQSmem(dp) {
			t.Errorf("dp %d rounded backward: blocked %v rounded %v smemDQ %d, want the blocked kernels' %d", dp, r.blocked,
				r.rounded, r.smemDQ, simtBlockedDQSmem(dp))
		}
	}
	for _, dp := range []int{64, 128, 256} {
		c := simtChoice(forwardDir, false, dp, FP32, maxSmem)
		if !c.blocked || c.smem != simtBlockedSmem(dp) || c.threads != simtBlockedThreads {
			t.Errorf("dp %d forward: blocked %v smem %d threads %d", dp, c.blocked, c.smem, c.threads)
		}
	}
}

// TestFwdOwnsKV holds the rule by which the persistent forward converts K
// and V itself (wgmmaFwdOwnsKV) and the counters it is given: only the
// persistent kernels, only where rows of D floats are 16-byte multiples,
// with the staging areas fitting beside the rest (at least two, as
// KVConverter asserts) and one ready count per head and key tile.
func TestFwdOwnsKV(t *testing.T) {
	for _, tc := range []struct {
		kind wgmmaFwdKernel
		prec Precision
		dp   int
		d    int
		want bool
	}{
		{wgmmaFwdWS, BF16, 128, 128, true},
		{wgmmaFwdWS, FP16, 128, 100, true},
		{wgmmaFwdWS, TF32, 128, 128, true},
		{wgmmaFwdWS2, BF16, 64, 64, true},
		{wgmmaFwdWS2, BF16, 64, 62, false}, // rows not 16-byte multiples: the passes
		{wgmmaFwdWS, BF16, 64, 64, false},  // three consumers: one block per item, not persistent
		{wgmmaFwdRowBlock, BF16, 128, 128, false},
		{wgmmaFwdVar, BF16, 128, 128, false},
	} {
		if got := wgmmaFwdOwnsKV(tc.kind, tc.prec, tc.dp, 2, 3, 1000, tc.d); got != tc.want {
			t.Errorf("kernel %d %v dp %d D %d: owns K/V %v, want %v", tc.kind, tc.prec, tc.dp, tc.d, got, tc.want)
		}
	}
	for _, c := range []struct {
		prec Precision
		dp   int
	}{{BF16, 64}, {BF16, 128}, {FP16, 128}, {TF32, 128}} {
		if st := wgmmaWSCvtStages(c.prec, c.dp, 2); st < 2 || wgmmaWSSmem(c.prec, c.dp, 2) > sm90SmemOptIn {
			t.Errorf("%v dp %d: %d staging areas, %d bytes of shared memory", c.prec, c.dp, st, wgmmaWSSmem(c.prec, c.dp, 2))
		}
		bk := wgmmaFwdBK(c.prec, c.dp, false)
		// 1000 keys: ⌈1000 / bk⌉ tiles for each of 2·3 heads, after the item and task counters.
		if got, want := wgmmaFwdCounters(c.prec, c.dp, 2, 3, 1000, true), int64(2+6*((1000+bk-1)/bk)); got != want {
			t.Errorf("%v dp %d: %d counters, want %d", c.prec, c.dp, got, want)
		}
		if got := wgmmaFwdCounters(c.prec, c.dp, 2, 3, 1000, false); got != 1 {
			t.Errorf("%v dp %d without the conversion: %d counters, want the item counter alone", c.prec, c.dp, got)
		}
	}
	if wgmmaWSCvtStages(BF16, 64, 3) != 0 {
		t.Error("the three-consumer kernel has staging areas")
	}
	for _, tc := range []struct {
		prec   Precision
		dp, nk int
		causal bool
		want   bool
	}{
		{BF16, 64, 512, true, true}, {TF32, 128, 512, false, false}, {TF32, 128, 1024, false, true},
		{TF32, 128, 1024, true, false}, {TF32, 128, 2048, true, true}, {TF32, 128, 16384, true, true},
		{BF16, 128, 512, false, true}, {FP16, 128, 512, true, false}, {BF16, 128, 1024, true, true},
		{BF16, 128, 256, false, false},
	} {
		if got := wgmmaFwdOwnKVPays(tc.prec, tc.dp, tc.nk, tc.causal); got != tc.want {
			t.Errorf("%v dp %d nk %d causal %v: the conversion pays %v, want %v", tc.prec, tc.dp, tc.nk, tc.causal, got, tc.want)
		}
	}
	// Too many tasks for the kernel's 32-bit counters: the passes.
	if wgmmaFwdOwnsKV(wgmmaFwdWS, BF16, 128, 1<<12, 1<<10, 1<<15, 128) {
		t.Error("2^27 heads·keys·… converted in-kernel: the task count overflows")
	}
}

// TestChooseWS2Heuristic pins wgmmaWS2Pays's rule: without a tuning table,
// a FamilyAuto backend on Hopper runs plain 16-bit forwards at dp = 64 on
// the two-consumer kernel up to 2048 queries (4096 causal) and on the
// three-consumer one beyond; nothing else changes kernel with the length,
// and heuristicLengths meet every outcome, so that loadRegistry loads each
// kernel the heuristic may choose.
func TestChooseWS2Heuristic(t *testing.T) {
	cases := []struct {
		fam    Family
		prec   Precision
		d      int
		causal bool
		plain  bool
		nq     int
		want   plainForward
	}{
		{FamilyAuto, BF16, 64, false, true, 512, plainWS2},
		{FamilyAuto, BF16, 64, false, true, 2048, plainWS2},
		{FamilyAuto, BF16, 64, false, true, 2049, plainDefault},
		{FamilyAuto, FP16, 40, false, true, 1024, plainWS2},
		{FamilyAuto, FP16, 64, true, true, 4096, plainWS2},
		{FamilyAuto, BF16, 64, true, true, 4097, plainDefault},
		{FamilyAuto, BF16, 64, false, false, 512, plainDefault}, // variants take _var
		{FamilyAuto, BF16, 128, false, true, 512, plainDefault}, // one kernel at dp = 128
		{FamilyAuto, TF32, 64, false, true, 512, plainDefault},  // no _ws2 for TF32
		{FamilySM90, BF16, 64, false, true, 512, plainDefault},  // the sm90 set's kernel
	}
	for _, tc := range cases {
		r := request{prec: tc.prec, d: tc.d, dir: forwardDir, causal: tc.causal, plain: tc.plain, nq: tc.nq}
		c, err := choose(h200, tc.fam, r)
		if err != nil {
			t.Fatal(err)
		}
		if c.plain != tc.want {
			t.Errorf("%v %v D%d causal=%v plain=%v Nq=%d: plain forward %v, want %v", tc.fam, tc.prec, tc.d, tc.causal, tc.plain,
				tc.nq, c.plain, tc.want)
		}
		if b, _ := choose(h200, tc.fam, request{prec: tc.prec, d: tc.d, dir: backwardDir, causal: tc.causal, plain: tc.plain,
			nq: tc.nq}); b.plain != plainDefault {
			t.Errorf("backward of %+v: plain %v", r, b.plain)
		}
	}
	for _, causal := range []bool{false, true} {
		seen := map[bool]bool{}
		for _, nq := range heuristicLengths {
			seen[wgmmaWS2Pays(nq, causal)] = true
		}
		if !seen[false] || !seen[true] {
			t.Errorf("causal=%v: heuristicLengths %v meet only %v of wgmmaWS2Pays's outcomes", causal, heuristicLengths, seen)
		}
	}
}
