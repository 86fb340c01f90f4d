package cudakernels

import "github.com/gorgonia-flash/flashattention/kernels"

// kernelParams mirrors struct Params of csrc/params.cuh field for field:
// the one argument of every attention kernel, passed by value as its
// parameter buffer (launch_gpu.go). Every field is 8 bytes, pointers are
// uint64 device addresses, so the two layouts agree without padding rules;
// TestParamsMirror compares the field lists. newParams is the one place that
// fills it.
type kernelParams struct {
	Q, K, V, O, LSE                  uint64
	Dout, Delta, DQ, DK, DV          uint64
	QT, KT, DoutT, LSELog2, DeltaPad uint64

	QBatchStride, QHeadStride, QRowStride          int64
	KBatchStride, KHeadStride, KRowStride          int64
	VBatchStride, VHeadStride, VRowStride          int64
	OBatchStride, OHeadStride, ORowStride          int64
	DoutBatchStride, DoutHeadStride, DoutRowStride int64
	DQBatchStride, DQHeadStride, DQRowStride       int64
	DKBatchStride, DKHeadStride, DKRowStride       int64
	DVBatchStride, DVHeadStride, DVRowStride       int64

	B, H, Nq, Nk, Dim int64
	Causal            int64
	Scale             float64

	Pair0, Heads        int64
	KvGroup             int64
	MaskLeft, MaskRight int64
	QLens, KLens, Alibi uint64
	Softcap             float64
	Dlse                uint64

	DropoutThreshold, DropoutSeed, DropoutOffset int64
	DropoutScale                                 float64

	Bias, Dbias                     uint64
	BiasBatchStride, BiasHeadStride int64

	BlockTable            uint64
	TableStride, PageSize int64
	Splits                int64
	PartO, PartLse        uint64
	KNew, VNew, DestRows  uint64
	WorkCounter           uint64
	KSrc, VSrc            uint64
	DQAccum               uint64
}

// tensorAt is a device tensor of [B, H, rows, ld] elements (ld ≥ the
// columns used), dense per head: the layout of the caller's tensors (rows
// Nq or Nk, ld = D), of the converted copies (ld = the padded head
// dimension) and of the images (rows padded to whole tiles).
type tensorAt struct {
	ptr      uint64
	rows, ld int64
}

// strides returns the batch, head and row strides of t in a problem of h
// heads.
func (t tensorAt) strides(h int) (batch, head, row int64) {
	head = t.rows * t.ld
	return int64(h) * head, head, t.ld
}

// operands are the tensors of one launch, by name; unused ones stay zero.
type operands struct {
	q, k, v, o, dout, dq, dk, dv tensorAt
	lse, delta                   uint64
	// The Hopper backward's transposed images and padded statistics.
	qT, kT, doutT, lseLog2, deltaPad uint64
	vars                             variantArgs
}

// variantArgs place a launch in its call: its first (batch, head) pair
// among the call's, the call's heads per batch entry (0: the launch's own
// H, a launch that is the whole call), and the device copies of the
// call's lengths (int32), ALiBi slopes (float64) and LSE gradient (the
// launch's part), 0 where absent.
type variantArgs struct {
	pair0, heads              int64
	qLens, kLens, alibi, dlse uint64
	// The bias and its gradient (0: none wanted), the strides of the
	// bias's batch and head dimensions (0 where broadcast), and its
	// number of Nq×Nk slices, which sizes the dBias launch.
	bias, dbias                     uint64
	biasBatchStride, biasHeadStride int64
	biasSlices                      int64
}

// newParams builds the kernels' argument for problem p on the tensors of ops.
func newParams(p kernels.Params, ops operands) kernelParams {
	kp := kernelParams{
		Q: ops.q.ptr, K: ops.k.ptr, V: ops.v.ptr, O: ops.o.ptr, LSE: ops.lse,
		Dout: ops.dout.ptr, Delta: ops.delta, DQ: ops.dq.ptr, DK: ops.dk.ptr, DV: ops.dv.ptr,
		QT: ops.qT, KT: ops.kT, DoutT: ops.doutT, LSELog2: ops.lseLog2, DeltaPad: ops.deltaPad,
		B: int64(p.B), H: int64(p.H), Nq: int64(p.Nq), Nk: int64(p.Nk), Dim: int64(p.D),
		Scale: p.Scale,
	}
	if p.Causal {
		kp.Causal = 1
	}
	kp.Pair0, kp.Heads = ops.vars.pair0, ops.vars.heads
	if kp.Heads == 0 {
		kp.Heads = int64(p.H)
	}
	kp.KvGroup = int64(p.H / p.KVHeads())
	kp.MaskLeft, kp.MaskRight = -1, -1
	if p.Window.On {
		kp.MaskLeft, kp.MaskRight = int64(p.Window.Left), int64(p.Window.Right)
	}
	if p.Causal {
		kp.MaskRight = 0 // as kernels.Params.Mask: the window's right bound is −1 or ≥ 0
	}
	kp.QLens, kp.KLens, kp.Alibi, kp.Dlse = ops.vars.qLens, ops.vars.kLens, ops.vars.alibi, ops.vars.dlse
	kp.Softcap = p.Softcap
	kp.Bias, kp.Dbias = ops.vars.bias, ops.vars.dbias
	kp.BiasBatchStride, kp.BiasHeadStride = ops.vars.biasBatchStride, ops.vars.biasHeadStride
	if p.Dropout.On() {
		// The seed's bits as they are; the kernels split them into the
		// Philox key's two words.
		kp.DropoutThreshold, kp.DropoutSeed = int64(p.Dropout.Threshold()), int64(p.Dropout.Seed)
		kp.DropoutOffset, kp.DropoutScale = int64(uint32(p.Dropout.Offset)), p.Dropout.KeepScale()
	}
	kp.QBatchStride, kp.QHeadStride, kp.QRowStride = ops.q.strides(p.H)
	kp.KBatchStride, kp.KHeadStride, kp.KRowStride = ops.k.strides(p.KVHeads())
	kp.VBatchStride, kp.VHeadStride, kp.VRowStride = ops.v.strides(p.KVHeads())
	kp.OBatchStride, kp.OHeadStride, kp.ORowStride = ops.o.strides(p.H)
	kp.DoutBatchStride, kp.DoutHeadStride, kp.DoutRowStride = ops.dout.strides(p.H)
	kp.DQBatchStride, kp.DQHeadStride, kp.DQRowStride = ops.dq.strides(p.H)
	kp.DKBatchStride, kp.DKHeadStride, kp.DKRowStride = ops.dk.strides(p.KVHeads())
	kp.DVBatchStride, kp.DVHeadStride, kp.DVRowStride = ops.dv.strides(p.KVHeads())
	return kp
}

// biasStrides returns the strides, in elements, of the batch and head
// dimensions of p's bias (Nq×Nk slices, batch-major), 0 where broadcast.
func biasStrides(p kernels.Params) (batch, head int64) {
	slice := int64(p.Nq) * int64(p.Nk)
	if p.Bias.Hb != 1 {
		head = slice
	}
	if p.Bias.Bb != 1 {
		batch = int64(p.Bias.Hb) * slice
	}
	return batch, head
}
