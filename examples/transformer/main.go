// Command transformer trains a small GPT-style character model on a text
// corpus with Gorgonia, using flash attention (or, for comparison, the naive
// O(N²)-memory attention), and samples from it.
//
// From the repository root:
//
//	go run ./examples/transformer                     # default run, a few minutes on 2 cores
//	go run ./examples/transformer -attention=naive    # same model, naive attention
//	go run ./examples/transformer -resume examples/transformer/out/checkpoint.gob -steps 200
//	go run ./examples/transformer -resume examples/transformer/out/checkpoint.gob -generate 500 -prompt ROMEO:
//
// It writes into -out: checkpoint.gob (loadable with -resume: it holds the
// optimiser's state too, so training continues where it stopped), loss.png
// (training and validation loss) and sample.txt, and prints the sample
// with the generation's speed. Generation goes through one key/value cache
// per layer (-kv-cache=false re-runs the whole context for every
// character, for comparison); -generate only generates, from a checkpoint.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gorgonia-flash/flashattention/examples/transformer/model"
	"github.com/gorgonia-flash/flashattention/op"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "transformer:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "transformer:", err)
		os.Exit(1)
	}
}

// run is the whole command; args exclude the program name.
func run(args []string, stdout, stderr io.Writer) (err error) {
	opts, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	// On the GPU, op.Attention opens a backend shared by all our graphs;
	// it holds device memory until closed.
	defer func() {
		if cerr := op.CloseGPU(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("closing the GPU: %w", cerr))
		}
	}()
	if err := model.CheckDevice(opts.flashOpts...); err != nil {
		return fmt.Errorf("%w: -device=%v: %w", errUsage, opts.device, err)
	}
	if opts.generate > 0 {
		return generate(opts, stdout)
	}
	return train(opts, stdout, stderr)
}
