//go:build flashgpu

// Command flashtune times the kernel families on the GPU it runs on and
// writes the tuning table (cudakernels.TuneTable) that backends of
// FamilyAuto on that GPU model then choose by:
//
//	go run -tags flashgpu ./cudakernels/cmd/flashtune -out cudakernels/tuned/h200.json
//
// It prints a line per timed kind of call. Commit the table with that
// output as its log.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/gorgonia-flash/flashattention/cudakernels"
)

func main() {
	out := flag.String("out", "", "write the table to this file (default: standard output)")
	b := flag.Int("b", 1, "batch entries of the timed problem")
	h := flag.Int("h", 16, "heads of the timed problem")
	n := flag.Int("n", 8192, "queries and keys of the timed problem")
	reps := flag.Int("reps", 5, "runs per measurement (the median is kept)")
	device := flag.Int("device", 0, "device ordinal")
	kernelDir := flag.String("kernels", "", "directory of the kernels' PTX (default: the embedded ones)")
	flag.Parse()
	log.SetFlags(0)
	t, err := cudakernels.Tune(cudakernels.TuneOptions{B: *b, H: *h, N: *n, Reps: *reps, Device: *device, KernelDir: *kernelDir,
		Progress: func(s string) { fmt.Fprintln(os.Stderr, s) }})
	if err != nil {
		log.Fatal(err)
	}
	t.Command = "flashtune " + strings.Join(os.Args[1:], " ")
	data, err := t.JSON()
	if err != nil {
		log.Fatal(err)
	}
	if *out == "" {
		os.Stdout.Write(data)
		return
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		log.Fatal(err)
	}
}
