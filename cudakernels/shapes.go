package cudakernels

// Launch shapes and shared-memory layouts of every kernel family, mirroring
// the constants of csrc/ (each function names its C counterpart). The kernels
// trap (require_launch) when launched with another block size or less shared
// memory than their layout needs, so a mismatch fails loudly.

// The CUDA-core family (csrc/simt_tile.cuh, fwd_simt.cuh, bwd_simt.cuh).

// simtTile mirrors the tile sizes instantiated in csrc/flash.cu: 32 rows,
// 16 for float64 at dp = 256.
func simtTile(elemSize, dp int) int {
	if elemSize == 8 && dp == 256 {
		return 16
	}
	return 32
}

// simtFwdSmem and simtBwdSmem are fwd_smem_elems and bwd_smem_elems in
// bytes.
func simtFwdSmem(elemSize, dp, tile int) int {
	return elemSize * (3*tile*(dp+1) + tile*(tile+1))
}

func simtBwdSmem(elemSize, dp, tile int) int {
	return elemSize * (4*tile*(dp+1) + 2*tile*(tile+1) + 2*tile)
}

// simtRowBlockShape is the launch shape of the row-block CUDA-core kernels
// (csrc/fwd_simt.cuh, bwd_simt.cuh, whose dbias the register-blocked
// backward keeps): simtTile rows a block, 8 threads a row, and the
// direction's shared memory.
func simtRowBlockShape(dir direction, elemSize, dp int) launchShape {
	tile := simtTile(elemSize, dp)
	if dir == backwardDir {
		return launchShape{tile, 8 * tile, simtBwdSmem(elemSize, dp, tile)}
	}
	return launchShape{tile, 8 * tile, simtFwdSmem(elemSize, dp, tile)}
}

// simtBlocked reports whether the CUDA-core forward of elemSize-byte
// elements at dp is the register-blocked kernel (csrc/fwd_simt_blocked.cuh,
// flash_fwd_simt_blocked_f32_d*): float32 at dp ≥ 64, where its 16-byte
// loads feed 4×4 blocks of scores. float64 and dp = 32 keep fwd_1rowblock.
func simtBlocked(elemSize, dp int) bool { return elemSize == 4 && dp >= 64 }

// simtBlockedRows and simtBlockedThreads are kBlockedRows and
// kBlockedThreads: 64 query rows (and keys a tile) per block of 256
// threads.
const simtBlockedRows, simtBlockedThreads = 64, 256

// simtBlockedSmem is fwd_blocked_smem_floats in bytes: Qᵀ, Kᵀ and V tiles
// of 64 rows.
func simtBlockedSmem(dp int) int { return 4 * 3 * simtBlockedRows * dp }

// simtBlockedBwd reports whether the CUDA-core backward of elemSize-byte
// elements at dp runs the register-blocked dK/dV and dQ kernels
// (csrc/bwd_simt_blocked.cuh, flash_bwd_{dkdv,dq}_simt_blocked_f32_d*):
// float32 at dp = 64 and 128. At 256 its dK/dV tiles would take 384 KiB.
func simtBlockedBwd(elemSize, dp int) bool { return elemSize == 4 && (dp == 64 || dp == 128) }

// simtBlockedDKDVSmem and simtBlockedDQSmem are dkdv_blocked_smem_floats
// and dq_blocked_smem_floats in bytes.
func simtBlockedDKDVSmem(dp int) int { return 4 * (6*simtBlockedRows*dp + 2*simtBlockedRows) }
func simtBlockedDQSmem(dp int) int   { return 4 * 5 * simtBlockedRows * dp }

// The mma.sync family (csrc/fwd_mma.cuh, bwd_mma.cuh).

// mmaThreads is kFwdThreads: 4 warps.
const mmaThreads = 128

// mmaFwdRows is fwd_bq, a forward block's query rows: two m16 tiles per
// warp up to dp = 128, one at 256 and in the _full kernel (full: the
// problem has a bias or dropout) at every dp (fwd_mt).
func mmaFwdRows(dp int, full bool) int {
	if dp > 128 || full {
		return 64
	}
	return 128
}

// elemBytes is the size of one converted operand element in precision
// prec: 2 for BF16 and FP16, 4 for TF32, and 8 for FP32 on the Hopper
// tensor cores, whose images hold every element as two tf32 values, hi
// and lo (mma::TF32x3, 3xTF32).
func elemBytes(prec Precision) int {
	switch prec {
	case TF32:
		return 4
	case FP32:
		return 8
	}
	return 2
}

// wgmmaTypeName is the name csrc/hopper.cu gives prec's Hopper kernels and
// conversions: the precision's, but tf32x3 for FP32 (3xTF32).
func wgmmaTypeName(prec Precision) string {
	if prec == FP32 {
		return "tf32x3"
	}
	return prec.String()
}

// wgmmaImageCols is the columns of prec's tile images at padded head
// dimension dp, in storage elements: dp, or 2·dp for FP32, whose images
// hold the tf32 hi values and then the lo ones (mma::TF32x3).
func wgmmaImageCols(prec Precision, dp int) int64 {
	if prec == FP32 {
		return 2 * int64(dp)
	}
	return int64(dp)
}

// wgmmaPlainOnly reports whether prec's Hopper kernels compute plain
// problems only (isPlain, without a bias or dropout): FP32's 3xTF32
// kernels, built at dp = 64; every other problem of FP32 runs on the CUDA
// cores.
func wgmmaPlainOnly(prec Precision) bool { return prec == FP32 }

// mmaFwdBK is fwd_bk: key tiles of 64, 32 for TF32 above dp = 64.
func mmaFwdBK(prec Precision, dp int) int {
	if elemBytes(prec) == 4 && dp > 64 {
		return 32
	}
	return 64
}

// mmaFwdSmem is fwd_smem_bytes: Q and two K tiles with rows of dp elements
// padded by 16 bytes, and two V tiles, the same or, for TF32, transposed
// ([dp, BK] padded by 16 bytes); with full, a float32 bias tile of the
// block's rows and BK keys padded by 8 floats (fwd_bias_ld).
func mmaFwdSmem(prec Precision, dp int, full bool) int {
	eb, bk := elemBytes(prec), mmaFwdBK(prec, dp)
	pad := 16 / eb
	vTile := bk * (dp + pad)
	if prec == TF32 {
		vTile = dp * (bk + pad)
	}
	rows := mmaFwdRows(dp, full)
	smem := ((rows+2*bk)*(dp+pad) + 2*vTile) * eb
	if full {
		smem += rows * (bk + 8) * 4
	}
	return smem
}

// The mma.sync backward: kBwdThreads threads, kBwdBK = 64 keys per dK/dV
// block and kBwdBQ = 64 queries per dQ block, each looping over tiles of
// kBwdStep = 64 rows, or 32 in the _full kernels (bwd_step).
const (
	mmaBwdThreads  = 128
	mmaBwdRows     = 64
	mmaBwdStep     = 64
	mmaBwdFullStep = 32
	// mmaBwdMaxDim is the largest padded head dimension csrc/flash.cu
	// builds the backward for: at 256 its dK and dV accumulators would not
	// fit the registers of this block shape.
	mmaBwdMaxDim = 128
)

// mmaBwdSmem is the larger of bwd_dkdv_smem_bytes and bwd_dq_smem_bytes:
// two fixed and four streamed tiles of 16-bit rows padded to dp + 8, plus
// the streamed LSE and D of the dK/dV kernel.
func mmaBwdSmem(dp int) int {
	return (2*mmaBwdRows+4*mmaBwdStep)*(dp+8)*2 + 4*mmaBwdStep*4
}

// mmaBwdFullSmem is bwd_dkdv_smem_bytes and bwd_dq_smem_bytes of the _full
// kernels: their streamed tiles have mmaBwdFullStep rows, and two bias
// tiles of float32 follow, dK/dV's [step queries, 64 keys] with rows of 64
// + 4 floats (kDkdvBiasLd), dQ's [64 rows, step keys] with rows of step + 8
// (row_bias_ld).
func mmaBwdFullSmem(dp int) (dkdv, dq int) {
	row := (dp + 8) * 2
	dkdv = (2*mmaBwdRows+4*mmaBwdFullStep)*row + 4*mmaBwdFullStep*4 + 2*mmaBwdFullStep*(mmaBwdRows+4)*4
	dq = (2*mmaBwdRows+4*mmaBwdFullStep)*row + 2*mmaBwdRows*(mmaBwdFullStep+8)*4
	return dkdv, dq
}

// mmaDbiasSmem is bwd_dbias_smem_bytes: Q, dO, K and V tiles of
// mmaBwdStep 16-bit rows padded to dp + 8, and the float32 bias tile of
// mmaBwdRows rows of mmaBwdStep + 8 floats.
func mmaDbiasSmem(dp int) int { return 4*mmaBwdStep*(dp+8)*2 + mmaBwdRows*(mmaBwdStep+8)*4 }

// The wgmma family (csrc/fwd_wgmma.cuh, bwd_wgmma.cuh, sm90.cuh).

// The forward: blocks of two warpgroups (kFwdThreads) own kFwdRows query
// rows, 64 each (kQTileRows, the rows of a Q image tile).
const (
	wgmmaThreads   = 256
	wgmmaRows      = 128
	wgmmaQTileRows = 64
)

// wgmmaBuilt reports whether csrc/hopper.cu instantiates the forward for
// precision prec and padded head dimension dp; full asks for the _full
// kernel (a bias or dropout), which exists where its bias tiles fit: 16-bit
// operands up to dp = 128, TF32 at 64. FP32's (3xTF32, wgmmaPlainOnly):
// the plain kernel at 64 and 128.
func wgmmaBuilt(prec Precision, dp int, full bool) bool {
	switch {
	case prec == FP32:
		return !full && (dp == 64 || dp == 128)
	case full && (prec == BF16 || prec == FP16):
		return dp == 64 || dp == 128
	case full && prec == TF32:
		return dp == 64
	case prec == BF16 || prec == FP16:
		return dp == 64 || dp == 128 || dp == 256
	case prec == TF32:
		return dp == 64 || dp == 128
	}
	return false
}

// wgmmaFwdBK is fwd_bk: 64 keys for 32-bit operands (TF32, and FP32's
// tf32 pairs), dp = 256 or a kernel with bias tiles (the _full one), else
// 128.
func wgmmaFwdBK(prec Precision, dp int, biasTiles bool) int {
	if elemBytes(prec) >= 4 || dp > 128 || biasTiles {
		return 64
	}
	return 128
}

// wgmmaDropBuilt reports whether csrc/hopper.cu instantiates the _drop
// forward (dropout without a bias) for prec and dp: where its key tile,
// without the bias tiles, is larger than the _full kernel's.
func wgmmaDropBuilt(prec Precision, dp int) bool {
	return wgmmaBuilt(prec, dp, true) && wgmmaFwdBK(prec, dp, false) > wgmmaFwdBK(prec, dp, true)
}

// wgmmaFwdQLoRegs is fwd_q_lo_regs: FP32 at dp = 128 holds Q's lo parts
// in registers and takes key tiles of 32, half of an image tile
// (wgmmaFwdBK).
func wgmmaFwdQLoRegs(prec Precision, dp int) bool { return prec == FP32 && dp > 64 }

// wgmmaFwdSmem is fwd_smem_bytes: alignment slack, Q (its hi part alone
// where wgmmaFwdQLoRegs), two stages of K and Vᵀ (of 32 keys there), with
// biasTiles two float32 bias tiles of wgmmaRows rows of BK + 8 floats
// (fwd_bias_ld), five mbarriers.
func wgmmaFwdSmem(prec Precision, dp int, biasTiles bool) int {
	eb, bk, qb := elemBytes(prec), wgmmaFwdBK(prec, dp, biasTiles), elemBytes(prec)
	if wgmmaFwdQLoRegs(prec, dp) {
		bk, qb = 32, eb/2
	}
	smem := 1024 + wgmmaRows*dp*qb + 4*bk*dp*eb + 5*8
	if biasTiles {
		smem += 2 * wgmmaRows * (bk + 8) * 4
	}
	return smem
}

// The warp-specialized forward (csrc/fwd_wgmma_ws.cuh) is the plain kernel
// of 16-bit operands at dp = 64 and 128 and of TF32 at dp = 128 (at 64 the
// two-warpgroup kernel measured faster): a producer warpgroup and two
// consumer ones of 64 rows each (three at dp = 64: ws_consumers), the same
// key tile and images as the two-warpgroup kernel (the Q image padded to a
// multiple of both kernels' rows), wgmmaWSStages stages of K and Vᵀ.
const wgmmaWSStages = 2

// wgmmaWSBuilt is ws_built: whether the plain forward of prec at dp is the
// warp-specialized kernel.
func wgmmaWSBuilt(prec Precision, dp int) bool {
	switch prec {
	case BF16, FP16:
		return dp == 64 || dp == 128
	case TF32:
		return dp == 128
	}
	return false
}

// wgmmaWSConsumers is ws_consumers, the default warp-specialized
// kernel's consumer warpgroups at dp: three at 64, two at 128. At 64 a
// two-consumer kernel (_ws2) is built too, a tuning table's candidate
// (plainWS2).
func wgmmaWSConsumers(dp int) int {
	if dp == 64 {
		return 3
	}
	return 2
}

// wgmmaWSRows and wgmmaWSThreads are ws_rows and ws_threads of nc
// consumer warpgroups: the block's query rows and threads (a producer
// warpgroup and the consumers).
func wgmmaWSRows(nc int) int    { return 64 * nc }
func wgmmaWSThreads(nc int) int { return 128 * (nc + 1) }

// wgmmaWSPersistent is ws_persistent: whether the warp-specialized forward
// with nc consumer warpgroups has a persistent grid.
func wgmmaWSPersistent(nc int) bool { return nc == 2 }

// wgmmaWSBarBytes is ws_bar_bytes: 4·stages mbarriers, and for a
// persistent kernel its item ring (two slots, four mbarriers).
func wgmmaWSBarBytes(nc int) int {
	if wgmmaWSPersistent(nc) {
		return 4*wgmmaWSStages*8 + 6*8
	}
	return 4 * wgmmaWSStages * 8
}

// wgmmaWSOnesBytes is ws_ones_bytes: the tile of ones that the 16-bit
// kernels at DP = 64 sum P's rows against on the tensor cores
// (ws_sums_on_tc).
func wgmmaWSOnesBytes(prec Precision, dp int) int {
	if elemBytes(prec) == 2 && dp == 64 {
		return 1024
	}
	return 0
}

// wgmmaWSBaseSmem is ws_base_bytes: alignment slack, Q (wgmmaWSRows(nc)
// rows), the stages of K and Vᵀ, wgmmaWSOnesBytes and wgmmaWSBarBytes. It
// is what a launch without the K/V conversion takes (wgmmaForward.launch):
// the conversion's staging areas come last, and the shared memory a launch
// leaves is the SM's L1 cache, whose loss cost the short BF16 D = 128
// forwards 1.3–6.3 % (H100, 2026-12-07).
func wgmmaWSBaseSmem(prec Precision, dp, nc int) int {
	eb, bk := elemBytes(prec), wgmmaFwdBK(prec, dp, false)
	return 1024 + wgmmaWSRows(nc)*dp*eb + 2*wgmmaWSStages*bk*dp*eb + wgmmaWSOnesBytes(prec, dp) + wgmmaWSBarBytes(nc)
}

// The persistent warp-specialized kernels convert K and V into their
// images themselves (csrc/fwd_wgmma_ws.cuh's KVConverter), in tasks of
// wgmmaWSCvtBytes of float32 rows staged in shared memory. sm90SmemOptIn
// is the most dynamic shared memory a block may have on sm_90 (227 KB).
const (
	wgmmaWSCvtBytes = 16384
	sm90SmemOptIn   = 232448
)

// wgmmaWSCvtStages is ws_cvt_stages: the conversion's staging areas (each
// with 16 bytes of mbarrier and task slot), as many as fit beside the rest
// and 127 bytes of alignment, up to four; none without a persistent grid.
func wgmmaWSCvtStages(prec Precision, dp, nc int) int {
	if !wgmmaWSPersistent(nc) {
		return 0
	}
	return min(4, (sm90SmemOptIn-wgmmaWSBaseSmem(prec, dp, nc)-127)/(wgmmaWSCvtBytes+16))
}

// wgmmaWSSmem is ws_smem_bytes: wgmmaWSBaseSmem and, with staging areas,
// their mbarriers and task slots after the block's mbarriers, rounded up
// to 128 bytes (ws_cvt_off), then the areas.
func wgmmaWSSmem(prec Precision, dp, nc int) int {
	st := wgmmaWSCvtStages(prec, dp, nc)
	if st == 0 {
		return wgmmaWSBaseSmem(prec, dp, nc)
	}
	bars := wgmmaWSBarBytes(nc)
	cvtOff := (bars + 16*st + 127) / 128 * 128
	return wgmmaWSBaseSmem(prec, dp, nc) - bars + cvtOff + st*wgmmaWSCvtBytes
}

// wgmmaFwdOwnsKV reports whether forward kernel kind converts K and V into
// their images itself (KVConverter) for b·h heads of nk keys of d columns:
// the persistent kernels, where every float32 row starts on a 16-byte
// boundary (d a multiple of 4; the caller checks the tensors' own
// alignment), so that bulk copies can bring them, and where the tasks,
// heads × key tiles × (K and V in tiles' parts of wgmmaWSCvtBytes), fit the
// kernel's 32-bit counters with room for the blocks that overshoot the
// last. The counters, with the item counter, take wgmmaFwdCounters ints.
func wgmmaFwdOwnsKV(kind wgmmaFwdKernel, prec Precision, dp, b, h, nk, d int) bool {
	if !kind.persistent(dp) || d%4 != 0 {
		return false
	}
	return wgmmaFwdCvtTasks(prec, dp, b, h, nk) < 1<<30
}

// wgmmaFwdOwnKVPays is where the in-kernel conversion measured faster
// than the two passes (H100, 2026-12-07, RESULTS; B·N = 16k, hidden 2048):
// always for the two-consumer kernel at dp = 64 (−11 to −21 % at N = 512
// and 1k), and at dp = 128 from wgmmaFwdOwnKVMinKeys(prec) keys a row sees
// on average (nk, half of it under the causal mask). Below that the
// forward moves Q and O at nearly the DRAM's speed and the conversion's
// traffic no longer hides under the products: +2.4 % at N = 512 causal
// for BF16 and FP16, whose converter warps work apart (KVConverter's
// run_warps; N = 512 itself −3.7 %, N = 1k causal −5.1 %); +5.5 to
// +12.5 % at N = 512 and 1k causal for TF32, whose two staging areas keep
// the converters one team.
func wgmmaFwdOwnKVPays(prec Precision, dp, nk int, causal bool) bool {
	if dp < 128 {
		return true
	}
	seen := nk
	if causal {
		seen /= 2
	}
	return seen >= wgmmaFwdOwnKVMinKeys(prec)
}

// wgmmaFwdOwnKVMinKeys is wgmmaFwdOwnKVPays's bound at dp = 128.
func wgmmaFwdOwnKVMinKeys(prec Precision) int {
	if prec == TF32 {
		return 1024
	}
	return 512
}

// wgmmaFwdCvtTasks is KVConverter's total: for each head and key tile, its
// K and its V in parts of wgmmaWSCvtBytes / (4·dp) rows.
func wgmmaFwdCvtTasks(prec Precision, dp, b, h, nk int) int64 {
	bk := int64(wgmmaFwdBK(prec, dp, false))
	return wgmmaFwdHeadTiles(prec, dp, b, h, nk) * 2 * bk / int64(wgmmaWSCvtBytes/(dp*4))
}

// wgmmaFwdHeadTiles is the (head, key tile) pairs of b·h heads of nk keys:
// the conversion's ready counts.
func wgmmaFwdHeadTiles(prec Precision, dp, b, h, nk int) int64 {
	bk := int64(wgmmaFwdBK(prec, dp, false))
	return int64(b) * int64(h) * (roundUp(int64(nk), bk) / bk)
}

// wgmmaFwdCounters is the ints of a persistent forward's p.work_counter:
// the item counter, and where the kernel converts K and V (ownsKV), the
// task counter and a ready count per head and key tile.
func wgmmaFwdCounters(prec Precision, dp, b, h, nk int, ownsKV bool) int64 {
	if !ownsKV {
		return 1
	}
	return 2 + wgmmaFwdHeadTiles(prec, dp, b, h, nk)
}

// launchShape is a kernel's query rows per block, threads and shared memory.
type launchShape struct{ rows, threads, smem int }

// wsShape is the launch shape of the warp-specialized forward with nc
// consumer warpgroups.
func wsShape(prec Precision, dp, nc int) launchShape {
	return launchShape{wgmmaWSRows(nc), wgmmaWSThreads(nc), wgmmaWSSmem(prec, dp, nc)}
}

// wgmmaFwdKernel names a Hopper forward kernel of a choice; emu/hopper.cc's
// Kernel enum has the same values.
type wgmmaFwdKernel int64

const (
	wgmmaFwdRowBlock wgmmaFwdKernel = iota // the plain two-warpgroup kernel
	wgmmaFwdVar                            // _var: every variant but the bias and dropout
	wgmmaFwdFull                           // _full: the bias and dropout too
	wgmmaFwdDrop                           // _drop: dropout without a bias
	wgmmaFwdWS                             // the warp-specialized plain kernel
	wgmmaFwdWS2                            // _ws2: the two-consumer one at dp = 64
)

// readsQ reports whether kernel k converts the caller's float32 Q itself
// instead of reading a Q image: the warp-specialized forwards.
func (k wgmmaFwdKernel) readsQ() bool { return k == wgmmaFwdWS || k == wgmmaFwdWS2 }

// persistent reports whether kernel k, at padded head dimension dp, runs
// on a persistent grid, at most one block per SM, each taking items of
// rows in turn: the warp-specialized forwards with two consumer
// warpgroups (wgmmaWSPersistent).
func (k wgmmaFwdKernel) persistent(dp int) bool {
	switch k {
	case wgmmaFwdWS:
		return wgmmaWSPersistent(wgmmaWSConsumers(dp))
	case wgmmaFwdWS2:
		return wgmmaWSPersistent(2)
	}
	return false
}

// wgmmaPlainForward returns the kernel choice c runs plain problems on and
// its launch shape: the warp-specialized one where wgmmaWSBuilt, else the
// row-block one, unless a tuning table's candidate (c.plain) says
// otherwise (plainRowBlock: the _var kernel, which computes plain problems
// too).
func wgmmaPlainForward(c choice) (wgmmaFwdKernel, launchShape) {
	rowBlock := launchShape{c.rows, c.threads, c.smem}
	switch {
	case c.plain == plainRowBlock:
		return wgmmaFwdVar, rowBlock
	case c.plain == plainWS2:
		return wgmmaFwdWS2, wsShape(c.prec, c.dp, 2)
	case wgmmaWSBuilt(c.prec, c.dp):
		return wgmmaFwdWS, wsShape(c.prec, c.dp, wgmmaWSConsumers(c.dp))
	}
	return wgmmaFwdRowBlock, rowBlock
}

// wgmmaForwardKernel returns the kernel and launch shape choice c launches
// for a problem that is plain or not (isPlain of the launch's argument, or
// plainParams of the problem before the argument exists; the two agree):
// the _full or _drop kernel of a choice for a bias or dropout, the plain
// kernel for a plain problem, else _var.
func wgmmaForwardKernel(c choice, plain bool) (wgmmaFwdKernel, launchShape) {
	rowBlock := launchShape{c.rows, c.threads, c.smem}
	switch {
	case c.full && c.drop:
		return wgmmaFwdDrop, rowBlock
	case c.full:
		return wgmmaFwdFull, rowBlock
	case plain:
		return wgmmaPlainForward(c)
	}
	return wgmmaFwdVar, rowBlock
}

// wgmmaBwdFused names the backward's fused dK/dV kernel, which sums dQ's
// part too (emu/hopper.cc's kFused). The other backward kernel pairs (dK/dV
// and dQ) take the forward's names: wgmmaFwdRowBlock for the plain pair,
// wgmmaFwdVar, wgmmaFwdFull and wgmmaFwdDrop.
const wgmmaBwdFused = wgmmaFwdWS2 + 1

// wgmmaBackwardKernel returns the backward kernels choice c launches for a
// problem with parameters kp: the _drop or _full pair of a choice for
// dropout or a bias, the _var pair for any other variant, else the plain
// pair, or with fused (the backend allows WithDeterministic(false) and
// wgmmaBwdFusedBuilt holds) the fused kernel.
func wgmmaBackwardKernel(c choice, kp *kernelParams, fused bool) wgmmaFwdKernel {
	switch {
	case c.full && c.drop:
		return wgmmaFwdDrop
	case c.full:
		return wgmmaFwdFull
	case !isPlain(kp):
		return wgmmaFwdVar
	case fused:
		return wgmmaBwdFused
	}
	return wgmmaFwdRowBlock
}

// wgmmaWS2Built reports whether the two-consumer warp-specialized forward
// (_ws2) is built for prec at dp: where the default kernel has more.
func wgmmaWS2Built(prec Precision, dp int) bool {
	return wgmmaWSBuilt(prec, dp) && wgmmaWSConsumers(dp) != 2
}

// The backward: blocks of two warpgroups (kBwdThreads) own kBwdBlock keys
// (dK, dV) or queries (dQ), 64 per warpgroup; images are in tiles of
// kBwdTile rows, padded to a multiple of kBwdPad rows.
const (
	wgmmaBwdThreads = 256
	wgmmaBwdTile    = 64
	wgmmaBwdBlock   = 128
	wgmmaBwdPad     = 128
)

// wgmmaBwdBuilt reports whether csrc/hopper.cu instantiates the backward
// for prec and dp: up to 128 columns, where K, V and two stages of four
// streamed operands still fit shared memory; full asks for the _full
// kernels (a bias or dropout), built for 16-bit operands only, where their
// bias tiles fit beside the rest (and dBias's stages of four operands).
// FP32's (3xTF32, wgmmaPlainOnly): the plain pair at 64, and at 128 three
// kernels of one gradient each (wgmmaBwdSplit3).
func wgmmaBwdBuilt(prec Precision, dp int, full bool) bool {
	switch {
	case prec == FP32:
		return !full && (dp == 64 || dp == 128)
	case full:
		return (prec == BF16 || prec == FP16) && (dp == 64 || dp == 128)
	case prec == BF16 || prec == FP16 || prec == TF32:
		return dp == 64 || dp == 128
	}
	return false
}

// wgmmaBwdShape is bwd_step and bwd_tstages: steps of 64 rows and no
// transposed stage for 16-bit operands (wgmmaBwdTImages); for TF32 above
// 64 columns and for FP32's tf32 pairs (bwd_wide: 8 bytes an element),
// steps of 32 rows and one stage of Qᵀ and dOᵀ, else 64 and two.
func wgmmaBwdShape(prec Precision, dp int) (step, tstages int) {
	switch {
	case !wgmmaBwdTImages(prec):
		return 64, 0
	case dp > 64 || prec == FP32:
		return 32, 1
	}
	return 64, 2
}

// wgmmaBwdTImages is bwd_t_images: the Hopper backward reads transposed
// images of Q, K and dO for TF32 and FP32's tf32 pairs only; 16-bit
// operands read the row images MN-major.
func wgmmaBwdTImages(prec Precision) bool { return elemBytes(prec) >= 4 }

// wgmmaBwdOwnsKV is dkdv_body's kOwnKV: the plain and fused dK/dV kernels
// of 16-bit operands convert their block of the caller's float32 K and V
// themselves (kernelParams.KSrc, VSrc) and write the images the dQ kernel
// reads, so the backward launches no conversion pass for K and V.
func wgmmaBwdOwnsKV(prec Precision, kind wgmmaFwdKernel) bool {
	return !wgmmaBwdTImages(prec) && (kind == wgmmaFwdRowBlock || kind == wgmmaBwdFused)
}

// wgmmaDbiasSmem is bwd_dbias_smem_bytes: alignment slack, two stages of
// Q and dO (wgmmaBwdBlock rows) and K and V (wgmmaBwdTile rows), the
// float32 bias tile [wgmmaBwdBlock, wgmmaBwdTile], four mbarriers.
func wgmmaDbiasSmem(prec Precision, dp int) int {
	row := dp * elemBytes(prec)
	return 1024 + 2*(2*wgmmaBwdBlock+2*wgmmaBwdTile)*row + wgmmaBwdBlock*wgmmaBwdTile*4 + 4*8
}

// wgmmaBwdFusedBuilt is bwd_dq_fused: whether the dK/dV kernel that also
// sums dQ by reductions is built for prec at dp (plain problems).
func wgmmaBwdFusedBuilt(prec Precision, dp int) bool {
	return (prec == BF16 || prec == FP16) && (dp == 64 || dp == 128)
}

// wgmmaBwdFusedSmem is bwd_dkdv_smem_bytes with kDQ: the dK/dV kernel's,
// two tiles of 16-bit dS, [wgmmaBwdBlock keys, step queries], and the dQ
// staging (bwd_dq_stage_bytes: two steps' parts of both warpgroups, each
// [wgmmaBwdTile queries, dp/2 columns] of float32).
func wgmmaBwdFusedSmem(prec Precision, dp int) int {
	step, _ := wgmmaBwdShape(prec, dp)
	dkdv, _ := wgmmaBwdSmem(prec, dp, false)
	return dkdv + 2*wgmmaBwdBlock*step*2 + 2*2*wgmmaBwdTile*dp/2*4
}

// wgmmaDQAccumThreads is kDqAccumThreads: a block of dq_from_accum.
const wgmmaDQAccumThreads = 256

// wgmmaBwdSmem is bwd_dkdv_smem_bytes and bwd_dq_smem_bytes; with
// biasTiles (the _full kernels), dK/dV adds one float32 bias tile [step
// queries, wgmmaBwdBlock keys] and dQ two [wgmmaBwdBlock queries, step
// keys], unpadded (swizzled).
func wgmmaBwdSmem(prec Precision, dp int, biasTiles bool) (dkdv, dq int) {
	step, tstages := wgmmaBwdShape(prec, dp)
	row := dp * elemBytes(prec)
	fixed, streamed := 2*wgmmaBwdBlock*row, step*row
	dqOps := 2 // bwd_dq_ops: K and V, and Kᵀ where wgmmaBwdTImages
	if wgmmaBwdTImages(prec) {
		dqOps = 3
	}
	dkdv, dq = 1024+fixed+2*(2+tstages)*streamed+4*step*4+7*8, 1024+fixed+2*dqOps*streamed+5*8
	if biasTiles {
		dkdv += step * wgmmaBwdBlock * 4
		dq += 2 * wgmmaBwdBlock * step * 4
	}
	return dkdv, dq
}

// wgmmaBwdSplit3 reports whether prec's Hopper backward at dp is three
// kernels, one gradient each (csrc's dv_colblock, dk_colblock and
// dq_split_rowblock), of one warpgroup (wgmmaBwdSplitThreads) per block
// of wgmmaBwdTile keys or queries, two (wgmmaBwdDVThreads) for dV: FP32
// at 128, where the hi and lo parts of two gradients' operands do not fit
// one block's shared memory.
func wgmmaBwdSplit3(prec Precision, dp int) bool { return prec == FP32 && dp == 128 }

// wgmmaBwdSplitThreads is kSplitThreads, the threads of a block of a
// wgmmaBwdSplit3 backward's dK and dQ kernels, and wgmmaBwdDVThreads
// kDvThreads, its dV kernel's (two warpgroups taking turns).
const (
	wgmmaBwdSplitThreads = 128
	wgmmaBwdDVThreads    = 256
)

// wgmmaBwdDVSmem is bwd_dv_smem_bytes, the shared memory of FP32's dV
// kernel at dp = 128 (csrc's dv_colblock, the first of its backward's
// three kernels): alignment slack, K (64 rows), two stages
// of a 32-row Q step and a dOᵀ step, two of their LSE, five mbarriers;
// every row of an image dp·8 bytes (hi and lo parts).
func wgmmaBwdDVSmem(dp int) int {
	row := dp * elemBytes(FP32)
	return 1024 + 64*row + 4*32*row + 2*32*4 + 5*8
}

// wgmmaBwdDKSmem is bwd_dk_smem_bytes, the shared memory of FP32's dK
// kernel at dp = 128 (csrc's dk_colblock, the second of the three):
// alignment slack, K and V (64 rows each), one stage of a 32-row Q, dO
// and Qᵀ step, its LSE and D, five mbarriers.
func wgmmaBwdDKSmem(dp int) int {
	row := dp * elemBytes(FP32)
	return 1024 + 2*64*row + 3*32*row + 2*32*4 + 5*8
}

// wgmmaBwdDQSplitSmem is bwd_dq_split_smem_bytes, the shared memory of
// FP32's dQ kernel at dp = 128 (csrc's dq_split_rowblock, the third):
// alignment slack, Q and dO (64 rows each), one stage of a 32-key K, V
// and Kᵀ step, five mbarriers.
func wgmmaBwdDQSplitSmem(dp int) int {
	row := dp * elemBytes(FP32)
	return 1024 + 2*64*row + 3*32*row + 5*8
}
