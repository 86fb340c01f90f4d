package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorgonia-flash/flashattention/examples/transformer/model"
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
		{[]string{"-precision=bf16"}, "-precision: bf16 needs the GPU"},
		{[]string{"-dim", "30", "-heads", "4"}, "not a multiple of heads"},
		{[]string{"-steps", "-1"}, "-steps = -1"},
		{[]string{"-batch", "0"}, "-batch = 0"},
		{[]string{"-lr", "0"}, "-lr = 0"},
		{[]string{"-warmup", "-1"}, "-warmup = -1"},
		{[]string{"-lr-floor", "2"}, "-lr-floor = 2"},
		{[]string{"-lr-steps", "-1"}, "-lr-steps = -1"},
		{[]string{"-temperature", "Inf"}, "-temperature = +Inf"},
		{[]string{"-prompt", ""}, "-prompt must not be empty"},
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
	for _, want := range []string{"step 4:", "--- sample", "wrote checkpoint.gob, loss.png and sample.txt in " + out} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output does not say %q:\n%s", want, stdout.String())
		}
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

// TestResumeContinuesTraining: 4 steps, then 2 more resumed from the
// checkpoint, end with the same parameters and optimiser state, bit for
// bit, as 6 steps in one run: the Adam moments, the step counter and the
// learning-rate schedule (here past its warm-up, into the decay) carry over,
// and the batches depend only on the seed and the step.
func TestResumeContinuesTraining(t *testing.T) {
	sched := []string{"-warmup", "2", "-lr", "1e-2", "-sample", "0"}
	whole, split := t.TempDir(), t.TempDir()
	if err := run(tiny(whole, append(sched, "-steps", "6")...), new(bytes.Buffer), new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	// The first part is told where the schedule ends, as a run of 6 is.
	if err := run(tiny(split, append(sched, "-steps", "4", "-lr-steps", "6")...), new(bytes.Buffer), new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	if err := run(tiny(split, "-steps", "2", "-sample", "0", "-resume", filepath.Join(split, checkpointFile)), &stdout, new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "at step 4 (optimiser state and learning-rate schedule restored)") {
		t.Errorf("resumed run does not say what it restored:\n%s", stdout.String())
	}
	want, got := loadCheckpoint(t, whole), loadCheckpoint(t, split)
	if got.Adam.Steps != 6 || got.Schedule != want.Schedule {
		t.Errorf("resumed: step %d, schedule %+v; uninterrupted: step %d, schedule %+v",
			got.Adam.Steps, got.Schedule, want.Adam.Steps, want.Schedule)
	}
	for i, p := range want.Params {
		if !slices.Equal(got.Params[i].F32, p.F32) {
			t.Errorf("parameter %s differs between the resumed and the uninterrupted run", p.Name)
		}
		if !slices.Equal(got.Adam.M[i], want.Adam.M[i]) || !slices.Equal(got.Adam.V[i], want.Adam.V[i]) {
			t.Errorf("Adam moments of %s differ between the resumed and the uninterrupted run", p.Name)
		}
	}
}

func loadCheckpoint(t *testing.T, dir string) *model.Checkpoint {
	t.Helper()
	ck, err := model.LoadFile(filepath.Join(dir, checkpointFile))
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

// TestPromptCheckedBeforeTraining: a prompt the corpus's vocabulary cannot
// encode is a usage error before the first step, not after the last.
func TestPromptCheckedBeforeTraining(t *testing.T) {
	out := t.TempDir()
	var stdout bytes.Buffer
	err := run(tiny(out, "-steps", "2", "-prompt", "€"), &stdout, new(bytes.Buffer))
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "-prompt") {
		t.Fatalf("got %v, want a usage error naming -prompt", err)
	}
	if _, err := os.Stat(filepath.Join(out, checkpointFile)); err == nil || strings.Contains(stdout.String(), "step 2:") {
		t.Errorf("the model trained before the prompt was checked:\n%s", stdout.String())
	}
}

// TestProgressInALog: progress written to a file or pipe (here a buffer)
// comes as plain lines, never the bar's carriage-return redraws.
func TestProgressInALog(t *testing.T) {
	var stderr bytes.Buffer
	if err := run(tiny(t.TempDir(), "-steps", "4", "-progress=true"), new(bytes.Buffer), &stderr); err != nil {
		t.Fatal(err)
	}
	log := stderr.String()
	if strings.Contains(log, "\r") {
		t.Errorf("progress in a log contains carriage returns: %q", log)
	}
	for _, want := range []string{"step 2/4  loss ", "step 4/4  loss "} {
		if !strings.Contains(log, want) {
			t.Errorf("progress log does not have %q:\n%s", want, log)
		}
	}
}

// TestGenerate trains a tiny model, then generates from its checkpoint
// without training, through the key/value caches, without them and with
// naive attention: the text is the same, and each run says its speed.
func TestGenerate(t *testing.T) {
	out := t.TempDir()
	if err := run(tiny(out, "-steps", "2", "-sample", "0"), new(bytes.Buffer), new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(out, checkpointFile)
	var texts []string
	for _, extra := range [][]string{nil, {"-kv-cache=false"}, {"-attention=naive"}} {
		var stdout bytes.Buffer
		args := append([]string{"-resume", ck, "-generate", "50", "-prompt", "ROMEO:", "-out", out, "-progress=false"}, extra...)
		if err := run(args, &stdout, new(bytes.Buffer)); err != nil {
			t.Fatalf("%v: %v", extra, err)
		}
		s := stdout.String()
		if !strings.Contains(s, "generated 50 characters in ") || !strings.Contains(s, " tokens/s (") {
			t.Errorf("%v: the output does not give the speed:\n%s", extra, s)
		}
		if strings.Contains(s, "step ") {
			t.Errorf("%v: -generate trained:\n%s", extra, s)
		}
		_, text, ok := strings.Cut(s, "---\n")
		text, _, ok2 := strings.Cut(text, "\n---\n")
		if !ok || !ok2 || !strings.HasPrefix(text, "ROMEO:") {
			t.Fatalf("%v: no sample in the output:\n%s", extra, s)
		}
		texts = append(texts, text)
	}
	if texts[0] != texts[1] || texts[0] != texts[2] {
		t.Errorf("the texts differ:\nwith the cache %q\nwithout %q\nnaive %q", texts[0], texts[1], texts[2])
	}
	if err := run([]string{"-generate", "5", "-out", out}, new(bytes.Buffer), new(bytes.Buffer)); !errors.Is(err, errUsage) {
		t.Errorf("-generate without -resume: got %v, want a usage error", err)
	}
}
