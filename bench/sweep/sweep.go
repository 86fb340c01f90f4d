package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorgonia-flash/flashattention/examples/transformer/model"
)

// Status of one point.
const (
	statusOK      = "ok"
	statusOOM     = "oom"     // the child ran out of memory or was killed
	statusTimeout = "timeout" // the child ran past -timeout
	statusSkipped = "skipped" // a smaller N already ran out of memory
	statusError   = "error"
)

// point is one measured (N, implementation, kind) combination.
type point struct {
	N       int
	Impl    model.Attention
	Kind    string
	Status  string
	Detail  string  `json:",omitempty"`
	PeakRSS int64   // bytes, 0 when unknown
	Wall    float64 // seconds the child ran, setup included
	measurement
}

// results is what results.json holds.
type results struct {
	Device    string
	Precision string `json:",omitempty"` // of flash attention's float32 on the GPU; results before it was recorded lack it
	Shape     shape
	MemLimit  int64
	Points    []point
}

func sweep(o *options, stdout, stderr io.Writer) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program to re-run it: %w", err)
	}
	res := results{Device: o.device.String(), Precision: o.precision.String(), Shape: o.shape, MemLimit: o.memLimit}
	fmt.Fprintf(stdout, "model: batch %d, %d layers, %d heads, dim %d, vocab %d, float32, %v (%v); each child limited to %s\n",
		o.shape.Batch, o.shape.Layers, o.shape.Heads, o.shape.Dim, o.shape.Vocab, o.device, o.precision, mib(o.memLimit))
	failedAt := map[string]int{} // impl/kind → smallest N that ran out of memory
	for _, n := range o.ns {
		for _, impl := range o.impls {
			for _, kind := range []string{kindStep, kindOp} {
				key := string(impl) + "/" + kind
				var p point
				if at, ok := failedAt[key]; ok && n > at {
					p = point{N: n, Impl: impl, Kind: kind, Status: statusSkipped, Detail: fmt.Sprintf("out of memory at N=%d", at)}
				} else {
					p = measure(self, o, n, impl, kind, stderr)
				}
				if p.Status == statusOOM || p.Status == statusTimeout {
					if _, ok := failedAt[key]; !ok {
						failedAt[key] = n
					}
				}
				res.Points = append(res.Points, p)
				fmt.Fprintln(stdout, p.summary())
				// Keep what has been measured should a later point take the machine down.
				if err := writeJSON(filepath.Join(o.out, "results.json"), res); err != nil {
					return err
				}
			}
		}
	}
	var errs []error
	if err := os.WriteFile(filepath.Join(o.out, "results.md"), []byte(markdown(res)), 0o644); err != nil {
		errs = append(errs, err)
	}
	if err := writePlots(o.out, res); err != nil {
		errs = append(errs, fmt.Errorf("plots: %w", err))
	}
	fmt.Fprintf(stdout, "wrote results in %s\n", o.out)
	return errors.Join(errs...)
}

// measure runs one point in a child process and classifies how it ended.
// childArgs are the flags of the child that measures one point: the
// parent's model, device and precision, and one N and implementation.
func (o *options) childArgs(n int, impl model.Attention, kind string) []string {
	return []string{"-child", "-child-kind", kind, "-n", strconv.Itoa(n), "-impl", string(impl),
		"-device", o.device.String(), "-precision", o.precision.String(),
		"-batch", strconv.Itoa(o.shape.Batch), "-layers", strconv.Itoa(o.shape.Layers), "-heads", strconv.Itoa(o.shape.Heads),
		"-dim", strconv.Itoa(o.shape.Dim), "-vocab", strconv.Itoa(o.shape.Vocab), "-mem-limit", strconv.FormatInt(o.memLimit, 10) + "B"}
}

func measure(self string, o *options, n int, impl model.Attention, kind string, stderr io.Writer) point {
	p := point{N: n, Impl: impl, Kind: kind}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, o.childArgs(n, impl, kind)...)
	var out, errOut bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errOut
	if o.verbose {
		cmd.Stderr = io.MultiWriter(&errOut, stderr)
	}
	start := time.Now()
	err := cmd.Run()
	p.Wall = time.Since(start).Seconds()
	if cmd.ProcessState != nil {
		p.PeakRSS = peakRSS(cmd.ProcessState)
	}
	switch {
	case err == nil:
		if err := json.Unmarshal(out.Bytes(), &p.measurement); err != nil {
			p.Status, p.Detail = statusError, fmt.Sprintf("unreadable child output %q: %v", out.String(), err)
		} else {
			p.Status = statusOK
		}
	case ctx.Err() != nil:
		p.Status, p.Detail = statusTimeout, fmt.Sprintf("ran past %v", o.timeout)
	case isOOM(cmd.ProcessState, errOut.String()):
		p.Status, p.Detail = statusOOM, oomDetail(cmd.ProcessState, errOut.String())
	default:
		p.Status, p.Detail = statusError, lastLine(errOut.String(), err)
	}
	return p
}

// isOOM recognises a child that died of memory: the Go runtime's own
// out-of-memory exit, an allocation error surfaced by a library, or a kill
// signal (the kernel's OOM killer sends SIGKILL).
func isOOM(ps *os.ProcessState, stderr string) bool {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		return true
	}
	return strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "cannot allocate memory")
}

func oomDetail(ps *os.ProcessState, stderr string) string {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by " + ws.Signal().String()
	}
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, "out of memory") || strings.Contains(line, "cannot allocate memory") {
			return strings.TrimSpace(line)
		}
	}
	return "out of memory"
}

func lastLine(stderr string, err error) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return l
	}
	return err.Error()
}

func (p point) summary() string {
	head := fmt.Sprintf("N=%-6d %-5s %-4s", p.N, p.Impl, p.Kind)
	if p.Status != statusOK {
		return fmt.Sprintf("%s %s: %s (peak %s, %.1fs)", head, p.Status, p.Detail, mib(p.PeakRSS), p.Wall)
	}
	if p.Kind == kindStep {
		return fmt.Sprintf("%s peak %s, step %.3fs, %.0f tok/s", head, mib(p.PeakRSS), p.StepSeconds, p.TokensPerSecond)
	}
	return fmt.Sprintf("%s peak %s, fwd %.4fs (%.2f GFLOP/s), fwd+bwd %.4fs (%.2f GFLOP/s)",
		head, mib(p.PeakRSS), p.FwdSeconds, p.FwdGFLOPS, p.FwdBwdSeconds, p.FwdBwdGFLOPS)
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
