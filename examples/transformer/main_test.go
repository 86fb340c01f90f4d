package main

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testData = "../../testdata/corpus/tinyshakespeare_head.txt"

// tiny are flags for a model that trains in well under a second.
func tiny(out string, extra ...string) []string {
	args := []string{"-data", testData, "-out", out, "-seq", "16", "-layers", "1", "-heads", "2", "-dim", "16",
		"-batch", "4", "-eval-every", "2", "-eval-batches", "1", "-sample", "20", "-progress=false"}
	return append(args, extra...)
}

func TestBadFlags(t *testing.T) {
	out := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-attention=fast"}, `unknown attention "fast"`},
		{[]string{"-device=tpu"}, `unknown device "tpu"`},
		{[]string{"-precision=fp64"}, `precision "fp64"`},
		{[]string{"-precision=bf16"}, "needs the GPU"},
		{[]string{"-dim", "30", "-heads", "4"}, "not a multiple of heads"},
		{[]string{"-steps", "-1"}, "-steps = -1"},
		{[]string{"-batch", "0"}, "-batch = 0"},
		{[]string{"-lr", "0"}, "-lr = 0"},
		{[]string{"-warmup", "-1"}, "-warmup = -1"},
		{[]string{"-lr-floor", "2"}, "-lr-floor = 2"},
		{[]string{"-clip", "-1"}, "-clip = -1"},
		{[]string{"-val", "1"}, "-val = 1"},
		{[]string{"-seq", "0"}, "seq = 0"},
		{[]string{"-dtype", "float16"}, "float16"},
		{[]string{"-layers", "two"}, "invalid value"},
		{[]string{"-nosuchflag"}, "not defined"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-data", filepath.Join(out, "missing.txt")}, "reading the corpus"},
		{[]string{"-resume", filepath.Join(out, "missing.gob")}, "-resume"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"-out", out, "-progress=false"}, tc.args...)
			err := run(args, &stdout, &stderr)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestRunAndResume(t *testing.T) {
	out := t.TempDir()
	var stdout bytes.Buffer
	if err := run(tiny(out, "-steps", "4"), &stdout, new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{checkpointFile, lossPlotFile, sampleFile} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s was not written: %v", f, err)
		}
	}
	if !strings.Contains(stdout.String(), "step 4:") || !strings.Contains(stdout.String(), "--- sample") {
		t.Errorf("unexpected output:\n%s", stdout.String())
	}

	ck := filepath.Join(out, checkpointFile)
	stdout.Reset()
	if err := run(tiny(out, "-steps", "2", "-resume", ck, "-attention=naive"), &stdout, new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "at step 4") || !strings.Contains(stdout.String(), "step 6:") {
		t.Errorf("resumed run did not continue from step 4:\n%s", stdout.String())
	}

	err := run(tiny(out, "-steps", "1", "-resume", ck, "-dim", "32"), new(bytes.Buffer), new(bytes.Buffer))
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "-dim=32 conflicts") {
		t.Errorf("conflicting -dim: got %v", err)
	}
}

func TestLearningRate(t *testing.T) {
	o := &options{lr: 1e-2, warmup: 10, lrFloor: 0.1, steps: 111}
	for _, tc := range []struct {
		i    int
		want float64
	}{
		{0, 1e-3},    // first warmup step
		{9, 1e-2},    // warmup reaches the peak
		{60, 5.5e-3}, // half way down the cosine
		{110, 1e-3},  // the floor at the last step
	} {
		if got := o.learningRate(tc.i); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("step %d: learning rate %v, want %v", tc.i, got, tc.want)
		}
	}
	for i := 1; i < o.steps; i++ {
		if a, b := o.learningRate(i-1), o.learningRate(i); (i < o.warmup && b <= a) || (i > o.warmup && b > a) {
			t.Errorf("steps %d → %d: learning rate %v → %v is not warmup-then-decay", i-1, i, a, b)
		}
	}
	o.lrFloor = 1
	if got := o.learningRate(80); got != o.lr {
		t.Errorf("-lr-floor 1: learning rate %v, want the constant %v", got, o.lr)
	}
}
