//go:build flashgpu

// Command flashtune times the candidate kernels (the two families', and
// the Hopper forward's two block shapes) on the GPU it runs on, at several
// sequence lengths, and writes the tuning table (cudakernels.TuneTable)
// that backends of FamilyAuto on that GPU model then choose by:
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
	"strconv"
	"strings"

	"github.com/gorgonia-flash/flashattention/cudakernels"
)

func main() {
	out := flag.String("out", "", "write the table to this file (default: standard output)")
	hidden := flag.Int("hidden", 2048, "H·D of the timed problems: each head dimension D runs H = hidden/D heads")
	tokens := flag.Int("tokens", 16384, "B·N of the timed problems: each length N runs B = tokens/N batch entries")
	lengths := flag.String("lengths", "512,1024,2048,4096,8192", "comma-separated sequence lengths to time")
	reps := flag.Int("reps", 5, "runs per measurement (the median is kept)")
	device := flag.Int("device", 0, "device ordinal")
	kernelDir := flag.String("kernels", "", "directory of the kernels' PTX (default: the embedded ones)")
	flag.Parse()
	log.SetFlags(0)
	var ns []int
	for _, f := range strings.Split(*lengths, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			log.Fatalf("flashtune: -lengths: %v", err)
		}
		ns = append(ns, n)
	}
	t, err := cudakernels.Tune(cudakernels.TuneOptions{Hidden: *hidden, Tokens: *tokens, Lengths: ns, Reps: *reps, Device: *device,
		KernelDir: *kernelDir, Progress: func(s string) { fmt.Fprintln(os.Stderr, s) }})
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
