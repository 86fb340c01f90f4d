// Command sweep measures the example transformer over sequence lengths N,
// naive attention against flash attention: peak memory and time of one
// training step of the whole model, and the throughput of the attention op
// alone.
//
// From the repository root:
//
//	go run ./bench/sweep                          # N = 256 … 16384 on the CPU
//	go run ./bench/sweep -n 256,1024 -impl flash  # a subset
//
// Every point runs in a child process (this binary re-executed with -child),
// so that its peak resident set size, read from the child's rusage, belongs
// to that point alone, and so that running out of memory ends the child, not
// the sweep. A child gets an address-space limit (-mem-limit); a child that
// hits it, or is killed, is reported as out of memory and the sweep goes on.
//
// Outputs in -out: results.md (a markdown table), results.json, memory.png
// (peak memory against N) and time.png (step time against N).
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
	default:
		fmt.Fprintln(os.Stderr, "sweep:", err)
		os.Exit(1)
	}
}

// run is the whole command; args exclude the program name.
func run(args []string, stdout, stderr io.Writer) (err error) {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	// On the GPU, op.Attention opens a backend shared by the process's
	// graphs; it holds device memory until closed.
	defer func() {
		if cerr := op.CloseGPU(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("closing the GPU: %w", cerr))
		}
	}()
	if o.child {
		return runChild(o, stdout)
	}
	// Fail here, once, rather than in every child.
	if err := model.CheckDevice(o.flashOpts...); err != nil {
		return fmt.Errorf("-device=%v: %w", o.device, err)
	}
	return sweep(o, stdout, stderr)
}
