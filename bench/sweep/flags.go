package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gorgonia-flash/flashattention/examples/transformer/model"
	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
)

// options are the parsed flags, shared by the parent and its children.
type options struct {
	ns        []int
	impls     []model.Attention
	device    op.Device
	precision kernels.Precision
	flashOpts []op.Option // from -device and -precision
	shape     shape
	memLimit  int64 // bytes of address space per child
	timeout   time.Duration
	out       string
	verbose   bool

	// Child mode: measure one point and print it as JSON.
	child     bool
	childKind string // "step" or "op"
}

// shape is the model a point trains; N is the sequence length.
type shape struct {
	Batch, Layers, Heads, Dim, Vocab int
}

const (
	kindStep = "step"
	kindOp   = "op"
)

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	ns := fs.String("n", "256,512,1024,2048,4096,8192,16384", "comma-separated sequence lengths")
	impls := fs.String("impl", "naive,flash", "comma-separated attention paths: naive, flash")
	device := fs.String("device", "cpu", "cpu, or gpu in a binary built with -tags flashgpu (flash only)")
	precision := fs.String("precision", "fp32", "float32 arithmetic of flash attention on the GPU: fp32, tf32, bf16 or fp16")
	fs.IntVar(&o.shape.Batch, "batch", 1, "sequences per training step")
	fs.IntVar(&o.shape.Layers, "layers", 1, "transformer blocks")
	fs.IntVar(&o.shape.Heads, "heads", 2, "attention heads")
	fs.IntVar(&o.shape.Dim, "dim", 64, "model width")
	fs.IntVar(&o.shape.Vocab, "vocab", 64, "vocabulary size of the synthetic tokens")
	memLimit := fs.String("mem-limit", "12GiB", "memory limit of each child (e.g. 8GiB, 512MiB); its address space gets 2GiB more for the Go runtime (on the GPU give 20GiB: the CUDA driver reserves address space)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "wall-clock limit of each child")
	fs.StringVar(&o.out, "out", "bench/sweep/out", "output directory")
	fs.BoolVar(&o.verbose, "v", false, "pass the children's stderr through")
	fs.BoolVar(&o.child, "child", false, "internal: measure one point (one -n, one -impl)")
	fs.StringVar(&o.childKind, "child-kind", kindStep, "internal: step or op")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if o.ns, err = parseInts(*ns); err != nil {
		return nil, fmt.Errorf("-n: %w", err)
	}
	for _, s := range strings.Split(*impls, ",") {
		a, err := model.ParseAttention(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("-impl: %w", err)
		}
		o.impls = append(o.impls, a)
	}
	if o.device, err = model.ParseDevice(*device); err != nil {
		return nil, fmt.Errorf("-device: %w", err)
	}
	if o.precision, err = kernels.ParsePrecision(*precision); err != nil {
		return nil, fmt.Errorf("-precision: %w", err)
	}
	if o.flashOpts, err = model.DeviceOptions(o.device, o.precision); err != nil {
		return nil, fmt.Errorf("-precision: %w", err)
	}
	if o.memLimit, err = parseBytes(*memLimit); err != nil {
		return nil, fmt.Errorf("-mem-limit: %w", err)
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("-timeout = %v, must be positive", o.timeout)
	}
	cfg := o.shape.config(o.ns[0], "float32")
	if err := cfg.Validate(); err != nil || o.shape.Batch < 1 {
		return nil, fmt.Errorf("model shape %+v: %w", o.shape, errors.Join(err, errIf(o.shape.Batch < 1, "batch must be at least 1")))
	}
	if o.child && (len(o.ns) != 1 || len(o.impls) != 1 || (o.childKind != kindStep && o.childKind != kindOp)) {
		return nil, fmt.Errorf("-child takes one -n, one -impl and -child-kind step or op")
	}
	return o, nil
}

func (s shape) config(n int, dtype string) model.Config {
	return model.Config{Vocab: s.Vocab, Seq: n, Layers: s.Layers, Heads: s.Heads, Dim: s.Dim, Dtype: dtype}
}

func errIf(cond bool, msg string) error {
	if cond {
		return errors.New(msg)
	}
	return nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if n < 1 {
			return nil, fmt.Errorf("%d is not a positive length", n)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseBytes reads a size such as 12GiB, 512MiB or a plain byte count.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%q is not a positive size like 12GiB", s)
	}
	return int64(v * float64(mult)), nil
}
