package model

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
)

// ParseDevice maps a flag value ("cpu" or "gpu") onto an op.Device.
func ParseDevice(s string) (op.Device, error) {
	for _, d := range []op.Device{op.CPU, op.GPU} {
		if s == d.String() {
			return d, nil
		}
	}
	return 0, fmt.Errorf("unknown device %q: want cpu or gpu", s)
}

// DeviceOptions returns the op.Attention options that put flash attention on
// dev, computing float32 in precision prec on the GPU, for NewGraph and
// NewSampler. The op would ignore a reduced precision on the CPU, whose
// backend computes float32 exactly; that is refused instead, as it would
// make a comparison of precisions silently compare nothing.
func DeviceOptions(dev op.Device, prec kernels.Precision) ([]op.Option, error) {
	if dev == op.CPU && prec != kernels.FP32 {
		return nil, fmt.Errorf("%v needs the GPU; the CPU computes fp32 exactly", prec)
	}
	return []op.Option{op.WithDevice(dev), op.WithPrecision(prec)}, nil
}

// CheckDevice builds one attention node with opts and reports why the op
// cannot run there: a binary built without the flashgpu tag, or no CUDA
// device (both wrap op.ErrNoGPU). Commands call it before their first graph
// so that a wrong -device fails at once, like any other bad flag. On the
// GPU it opens the backend that op.Attention shares, which op.CloseGPU
// closes.
func CheckDevice(opts ...op.Option) error {
	g := G.NewGraph()
	in := func(name string) *G.Node {
		return G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 1, 1, 1), G.WithName(name))
	}
	_, err := op.Attention(in("q"), in("k"), in("v"), opts...)
	return err
}
