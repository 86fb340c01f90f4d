package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorgonia-flash/flashattention/examples/transformer/model"
)

// TestMain lets the sweep re-execute the test binary as its child: a child's
// arguments start with -child, which no test run uses.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-child" {
		if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "sweep child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestSweepSmall(t *testing.T) {
	out := t.TempDir()
	var stdout bytes.Buffer
	args := []string{"-n", "16,32", "-dim", "8", "-heads", "2", "-vocab", "5", "-mem-limit", "1GiB", "-out", out}
	if err := run(args, &stdout, new(bytes.Buffer)); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	var res results
	data, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	if res.Device != "cpu" || res.Precision != "fp32" {
		t.Errorf("results.json records device %q, precision %q; want cpu, fp32", res.Device, res.Precision)
	}
	if len(res.Points) != 8 {
		t.Fatalf("got %d points, want 2 N × 2 impl × 2 kinds", len(res.Points))
	}
	for _, p := range res.Points {
		if p.Status != statusOK || p.PeakRSS <= 0 {
			t.Errorf("%+v: want a successful point with a peak RSS", p)
		}
		if p.Kind == kindStep && p.StepSeconds <= 0 || p.Kind == kindOp && (p.FwdSeconds <= 0 || p.FwdBwdGFLOPS <= 0) {
			t.Errorf("%+v: missing timings", p)
		}
	}
	for _, f := range []string{"results.md", "memory.png", "time.png"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}

// TestSweepReportsOOM gives the naive children too little memory for N = 8192:
// the point must be reported as out of memory, the larger N skipped, and the
// sweep must still finish.
func TestSweepReportsOOM(t *testing.T) {
	if raceEnabled {
		t.Skip("under the race detector a child cannot start within an address-space limit, so there is no OOM to observe")
	}
	out := t.TempDir()
	var stdout bytes.Buffer
	args := []string{"-n", "8192,16384", "-impl", "naive", "-dim", "8", "-heads", "2", "-vocab", "5", "-mem-limit", "40MiB", "-out", out}
	if err := run(args, &stdout, new(bytes.Buffer)); err == nil || !strings.Contains(err.Error(), "no point succeeded") {
		t.Errorf("got %v, want the plots refused for lack of data", err)
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| 8192 | naive | **out of memory**") || !strings.Contains(string(md), "| 16384 | naive | not run") {
		t.Errorf("results.md does not report the OOM:\n%s", md)
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "256,x"}, "-n"},
		{[]string{"-n", "0"}, "not a positive length"},
		{[]string{"-impl", "fast"}, `unknown attention "fast"`},
		{[]string{"-mem-limit", "lots"}, "-mem-limit"},
		{[]string{"-dim", "30", "-heads", "4"}, "not a multiple"},
		{[]string{"-child", "-n", "256,512"}, "one -n"},
	} {
		err := run(tc.args, new(bytes.Buffer), new(bytes.Buffer))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for s, want := range map[string]int64{"12GiB": 12 << 30, "512MiB": 512 << 20, "1.5GiB": 3 << 29, "4096": 4096, "64KiB": 64 << 10} {
		if got, err := parseBytes(s); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "GiB", "-1GiB", "0"} {
		if _, err := parseBytes(s); err == nil {
			t.Errorf("parseBytes(%q) accepted", s)
		}
	}
}

func TestMarkdownOrder(t *testing.T) {
	r := results{Device: "cpu", Shape: shape{1, 1, 2, 8, 5}, MemLimit: 1 << 30, Points: []point{
		{N: 16, Impl: "naive", Kind: kindStep, Status: statusOK, PeakRSS: 1 << 20, measurement: measurement{StepSeconds: 0.5}},
		{N: 16, Impl: "flash", Kind: kindStep, Status: statusOK, PeakRSS: 1 << 20, measurement: measurement{StepSeconds: 2}},
		{N: 32, Impl: "naive", Kind: kindStep, Status: statusOOM},
	}}
	lines := strings.Split(markdown(r), "\n")
	rows := slices.DeleteFunc(lines, func(l string) bool { return !strings.HasPrefix(l, "| ") })
	want := []string{"| 16 | naive | 1 MiB | 500.0 ms", "| 16 | flash | 1 MiB | 2.00 s", "| 32 | naive | **out of memory**", "| 32 | flash |"}
	if len(rows) != len(want)+1 {
		t.Fatalf("got rows %q", rows)
	}
	for i, w := range want {
		if !strings.HasPrefix(rows[i+1], w) {
			t.Errorf("row %d = %q, want prefix %q", i, rows[i+1], w)
		}
	}
}

// TestChildArgs: a child measures the parent's model on the parent's device
// in the parent's precision.
func TestChildArgs(t *testing.T) {
	parent, err := parseFlags([]string{"-device", "gpu", "-precision", "bf16", "-dim", "32", "-heads", "4", "-batch", "2", "-mem-limit", "3GiB"}, new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	child, err := parseFlags(parent.childArgs(512, model.AttentionFlash, kindOp), new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	if !child.child || child.childKind != kindOp || !slices.Equal(child.ns, []int{512}) || !slices.Equal(child.impls, []model.Attention{model.AttentionFlash}) {
		t.Errorf("child measures %v %v %s, want N = 512, flash, op", child.ns, child.impls, child.childKind)
	}
	if child.device != parent.device || child.precision != parent.precision || child.shape != parent.shape || child.memLimit != parent.memLimit {
		t.Errorf("child: %v, %v, %+v, %d bytes; parent: %v, %v, %+v, %d bytes", child.device, child.precision, child.shape, child.memLimit,
			parent.device, parent.precision, parent.shape, parent.memLimit)
	}
}

func TestPrecisionOnCPU(t *testing.T) {
	_, err := parseFlags([]string{"-precision", "tf32"}, new(bytes.Buffer))
	if err == nil || !strings.HasPrefix(err.Error(), "-precision: tf32 needs the GPU") {
		t.Errorf("got %v, want an error naming -precision", err)
	}
}
