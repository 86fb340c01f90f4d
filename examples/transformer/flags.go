package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"

	"github.com/gorgonia-flash/flashattention/examples/transformer/model"
	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/op"
)

// errUsage is wrapped by every error caused by bad command-line arguments.
var errUsage = errors.New("usage")

// options are the parsed and checked command-line flags.
type options struct {
	arch        model.Config
	archSet     map[string]bool // architecture flags given explicitly
	steps       int
	batch       int
	lr          float64
	warmup      int     // steps of linear learning-rate warmup
	lrFloor     float64 // final learning rate as a fraction of lr
	clip        float64 // maximum global gradient norm; 0: no clipping
	attention   model.Attention
	device      string
	flashOpts   []op.Option // from -device
	seed        uint64
	out         string
	resume      string
	data        string
	valFraction float64
	evalEvery   int
	evalBatches int
	sampleLen   int
	temperature float64
	prompt      string
	progress    bool
}

// defaultData is relative to the repository root, where the README runs the
// command from.
const defaultData = "testdata/corpus/tinyshakespeare_head.txt"

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("transformer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	fs.IntVar(&o.arch.Seq, "seq", 64, "context length in characters")
	fs.IntVar(&o.arch.Layers, "layers", 2, "number of transformer blocks")
	fs.IntVar(&o.arch.Heads, "heads", 4, "attention heads per block")
	fs.IntVar(&o.arch.Dim, "dim", 64, "model width (a multiple of -heads)")
	dtype := fs.String("dtype", "float32", "float32 or float64")
	fs.IntVar(&o.steps, "steps", 800, "optimiser steps to run (added to a resumed checkpoint's)")
	fs.IntVar(&o.batch, "batch", 32, "sequences per step")
	fs.Float64Var(&o.lr, "lr", 5e-3, "peak Adam learning rate")
	fs.IntVar(&o.warmup, "warmup", 100, "steps over which the learning rate rises linearly to -lr")
	fs.Float64Var(&o.lrFloor, "lr-floor", 0.1, "final learning rate as a fraction of -lr, reached by a cosine decay after the warmup (1: constant)")
	fs.Float64Var(&o.clip, "clip", 1, "largest global L2 norm of the gradients; larger ones are scaled down (0: no clipping)")
	attention := fs.String("attention", "flash", "attention path: flash or naive")
	fs.StringVar(&o.device, "device", "cpu", "cpu, or gpu in a binary built with -tags flashgpu")
	precision := fs.String("precision", "fp32", "float32 arithmetic of flash attention on the GPU: fp32, tf32, bf16 or fp16")
	fs.Uint64Var(&o.seed, "seed", 1, "seed for initialisation, batches and sampling")
	fs.StringVar(&o.out, "out", "examples/transformer/out", "output directory")
	fs.StringVar(&o.resume, "resume", "", "checkpoint to continue from; its architecture wins")
	fs.StringVar(&o.data, "data", defaultData, "training text (UTF-8)")
	fs.Float64Var(&o.valFraction, "val", 0.1, "held-out fraction of the text, taken from its end")
	fs.IntVar(&o.evalEvery, "eval-every", 50, "steps between validation losses and checkpoints")
	fs.IntVar(&o.evalBatches, "eval-batches", 4, "batches averaged for one validation loss")
	fs.IntVar(&o.sampleLen, "sample", 400, "characters to sample at the end (0: none)")
	fs.Float64Var(&o.temperature, "temperature", 0.8, "sampling temperature")
	fs.StringVar(&o.prompt, "prompt", "\n", "text the sample starts from")
	fs.BoolVar(&o.progress, "progress", true, "show a progress bar on stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	o.archSet = map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "seq", "layers", "heads", "dim", "dtype":
			o.archSet[f.Name] = true
		}
	})
	o.arch.Dtype = *dtype
	var err error
	if o.attention, err = model.ParseAttention(*attention); err != nil {
		return nil, fmt.Errorf("%w: -attention: %w", errUsage, err)
	}
	prec, err := kernels.ParsePrecision(*precision)
	if err != nil {
		return nil, fmt.Errorf("%w: -precision: %w", errUsage, err)
	}
	if o.flashOpts, err = model.DeviceOptions(o.device, prec); err != nil {
		return nil, fmt.Errorf("%w: -device: %w", errUsage, err)
	}
	if o.device != "cpu" && o.attention == model.AttentionNaive {
		return nil, fmt.Errorf("%w: -attention=naive runs on the CPU only (Gorgonia's own ops), not on -device=%s", errUsage, o.device)
	}
	checks := []struct {
		ok  bool
		msg string
	}{
		{o.steps >= 0, fmt.Sprintf("-steps = %d, must not be negative", o.steps)},
		{o.batch >= 1, fmt.Sprintf("-batch = %d, must be at least 1", o.batch)},
		{o.lr > 0 && !math.IsInf(o.lr, 0), fmt.Sprintf("-lr = %v, must be positive and finite", o.lr)},
		{o.warmup >= 0, fmt.Sprintf("-warmup = %d, must not be negative", o.warmup)},
		{o.lrFloor >= 0 && o.lrFloor <= 1, fmt.Sprintf("-lr-floor = %v, must be between 0 and 1", o.lrFloor)},
		{o.clip >= 0 && !math.IsInf(o.clip, 0), fmt.Sprintf("-clip = %v, must not be negative", o.clip)},
		{o.valFraction > 0 && o.valFraction < 1, fmt.Sprintf("-val = %v, must be between 0 and 1", o.valFraction)},
		{o.evalEvery >= 1, fmt.Sprintf("-eval-every = %d, must be at least 1", o.evalEvery)},
		{o.evalBatches >= 1, fmt.Sprintf("-eval-batches = %d, must be at least 1", o.evalBatches)},
		{o.sampleLen >= 0, fmt.Sprintf("-sample = %d, must not be negative", o.sampleLen)},
		{o.temperature > 0, fmt.Sprintf("-temperature = %v, must be positive", o.temperature)},
		{o.out != "", "-out must not be empty"},
	}
	for _, c := range checks {
		if !c.ok {
			return nil, fmt.Errorf("%w: %s", errUsage, c.msg)
		}
	}
	if o.resume == "" {
		// The vocabulary is only known once the data is read; check the rest now.
		probe := o.arch
		probe.Vocab = 1
		if err := probe.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
	}
	return o, nil
}

// learningRate is the rate for the i-th step (from 0) of this run's o.steps:
// a linear warmup over o.warmup steps to o.lr, then a cosine decay to
// o.lr·o.lrFloor at the last step. A resumed run warms up again, as its Adam
// moments start from zero again too.
func (o *options) learningRate(i int) float64 {
	if i < o.warmup {
		return o.lr * float64(i+1) / float64(o.warmup)
	}
	decay := o.steps - o.warmup - 1
	if decay <= 0 {
		return o.lr
	}
	progress := float64(i-o.warmup) / float64(decay)
	floor := o.lr * o.lrFloor
	return floor + (o.lr-floor)*0.5*(1+math.Cos(math.Pi*progress))
}
