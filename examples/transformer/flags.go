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
	schedule    model.Schedule  // from -lr, -warmup, -lr-floor and -lr-steps
	scheduleSet map[string]bool // schedule flags given explicitly
	clip        float64         // maximum global gradient norm; 0: no clipping
	attention   model.Attention
	device      op.Device
	flashOpts   []op.Option // from -device and -precision
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
	generate    int  // tokens to generate from -resume without training; 0: train
	kvCache     bool // generate through key/value caches
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
	fs.Float64Var(&o.schedule.Peak, "lr", 5e-3, "peak Adam learning rate")
	fs.IntVar(&o.schedule.Warmup, "warmup", 100, "steps over which the learning rate rises linearly to -lr")
	fs.Float64Var(&o.schedule.Floor, "lr-floor", 0.1, "final learning rate as a fraction of -lr, reached by a cosine decay after the warmup (1: constant)")
	fs.IntVar(&o.schedule.Steps, "lr-steps", 0, "step, counted from the start of training, at which the decay reaches -lr-floor; the rate stays there after it (0: the last step of this run)")
	fs.Float64Var(&o.clip, "clip", 1, "largest global L2 norm of the gradients; larger ones are scaled down (0: no clipping)")
	attention := fs.String("attention", "flash", "attention path: flash or naive")
	device := fs.String("device", "cpu", "cpu, or gpu in a binary built with -tags flashgpu")
	precision := fs.String("precision", "fp32", "float32 arithmetic of flash attention on the GPU: fp32, tf32, bf16 or fp16")
	fs.Uint64Var(&o.seed, "seed", 1, "seed for initialisation, batches and sampling")
	fs.StringVar(&o.out, "out", "examples/transformer/out", "output directory")
	fs.StringVar(&o.resume, "resume", "", "checkpoint to continue from, with its optimiser state and learning-rate schedule (schedule flags given here replace the latter); its architecture wins")
	fs.StringVar(&o.data, "data", defaultData, "training text (UTF-8)")
	fs.Float64Var(&o.valFraction, "val", 0.1, "held-out fraction of the text, taken from its end")
	fs.IntVar(&o.evalEvery, "eval-every", 50, "steps between validation losses and checkpoints")
	fs.IntVar(&o.evalBatches, "eval-batches", 4, "batches averaged for one validation loss")
	fs.IntVar(&o.sampleLen, "sample", 400, "characters to sample at the end (0: none)")
	fs.Float64Var(&o.temperature, "temperature", 0.8, "sampling temperature")
	fs.StringVar(&o.prompt, "prompt", "\n", "text the sample starts from")
	fs.IntVar(&o.generate, "generate", 0, "generate this many characters from -prompt with the -resume checkpoint, without training (0: train)")
	fs.BoolVar(&o.kvCache, "kv-cache", true, "generate through one key/value cache per layer (flash attention, the caches on -device); false re-runs the whole context for every character")
	fs.BoolVar(&o.progress, "progress", true, "report progress on stderr: a bar on a terminal, else a line every -eval-every steps")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	o.archSet, o.scheduleSet = map[string]bool{}, map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "seq", "layers", "heads", "dim", "dtype":
			o.archSet[f.Name] = true
		case "lr", "warmup", "lr-floor", "lr-steps":
			o.scheduleSet[f.Name] = true
		}
	})
	o.arch.Dtype = *dtype
	var err error
	if o.attention, err = model.ParseAttention(*attention); err != nil {
		return nil, fmt.Errorf("%w: -attention: %w", errUsage, err)
	}
	if o.device, err = model.ParseDevice(*device); err != nil {
		return nil, fmt.Errorf("%w: -device: %w", errUsage, err)
	}
	prec, err := kernels.ParsePrecision(*precision)
	if err != nil {
		return nil, fmt.Errorf("%w: -precision: %w", errUsage, err)
	}
	if o.flashOpts, err = model.DeviceOptions(o.device, prec); err != nil {
		return nil, fmt.Errorf("%w: -precision: %w", errUsage, err)
	}
	if o.device != op.CPU && o.attention == model.AttentionNaive {
		return nil, fmt.Errorf("%w: -attention=naive runs on the CPU only (Gorgonia's own ops), not on -device=%v", errUsage, o.device)
	}
	checks := []struct {
		ok  bool
		msg string
	}{
		{o.steps >= 0, fmt.Sprintf("-steps = %d, must not be negative", o.steps)},
		{o.batch >= 1, fmt.Sprintf("-batch = %d, must be at least 1", o.batch)},
		{o.schedule.Peak > 0 && !math.IsInf(o.schedule.Peak, 0), fmt.Sprintf("-lr = %v, must be positive and finite", o.schedule.Peak)},
		{o.schedule.Warmup >= 0, fmt.Sprintf("-warmup = %d, must not be negative", o.schedule.Warmup)},
		{o.schedule.Floor >= 0 && o.schedule.Floor <= 1, fmt.Sprintf("-lr-floor = %v, must be between 0 and 1", o.schedule.Floor)},
		{o.schedule.Steps >= 0, fmt.Sprintf("-lr-steps = %d, must not be negative", o.schedule.Steps)},
		{o.clip >= 0 && !math.IsInf(o.clip, 0), fmt.Sprintf("-clip = %v, must not be negative", o.clip)},
		{o.valFraction > 0 && o.valFraction < 1, fmt.Sprintf("-val = %v, must be between 0 and 1", o.valFraction)},
		{o.evalEvery >= 1, fmt.Sprintf("-eval-every = %d, must be at least 1", o.evalEvery)},
		{o.evalBatches >= 1, fmt.Sprintf("-eval-batches = %d, must be at least 1", o.evalBatches)},
		{o.sampleLen >= 0, fmt.Sprintf("-sample = %d, must not be negative", o.sampleLen)},
		{o.generate >= 0, fmt.Sprintf("-generate = %d, must not be negative", o.generate)},
		{o.generate == 0 || o.resume != "", "-generate needs a trained model: give -resume FILE"},
		{o.prompt != "" || o.generate == 0, "-prompt must not be empty"},
		{o.temperature > 0 && !math.IsInf(o.temperature, 0), fmt.Sprintf("-temperature = %v, must be positive and finite", o.temperature)},
		{o.prompt != "" || o.sampleLen == 0, "-prompt must not be empty"},
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
