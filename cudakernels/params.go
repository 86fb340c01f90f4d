package cudakernels

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
}
