package cudakernels

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestScriptsParse runs bash -n on the shell scripts that run on the GPU
// machine (and the generator's): a syntax error there costs a device call,
// which a session has three or four of, where here it costs nothing.
func TestScriptsParse(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	scripts, err := filepath.Glob("*.sh")
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob("../bench/*.sh")
	if err != nil {
		t.Fatal(err)
	}
	scripts = append(scripts, more...)
	if len(scripts) < 5 {
		t.Fatalf("found only %v", scripts)
	}
	for _, s := range scripts {
		if out, err := exec.Command(bash, "-n", s).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", s, err, out)
		}
	}
}

// TestPCSampleAccount runs pcsample.py (devncu.sh's SAMPLE summary, which
// otherwise runs only on the GPU machine) on a toy source page: a loop of
// three instructions around an HGMMA, whose branch target ncu prints as
// an absolute address, between code before and after it.
func TestPCSampleAccount(t *testing.T) {
	out := runScript(t, "pcsample.py", "--top", "1", filepath.Join("testdata", "pcsample.csv"))
	wantInOutput(t, "pcsample.py", out,
		"samples 100, instructions 7",
		"tile loop 0x20-0x40 (3 instructions): 60 samples, 60.0 %",
		"outside it: 40 samples, 40.0 %",
		"0x50-   0x60 executed        16:     33 (33.0 %)",
		"long_sb 25")
}

// TestNcuDurations runs ncudurations.py (devncu.sh's DURATIONS summary)
// on two toy CSVs: a kernel launched in both builds (the first launch of
// each left out of the median), one launched once in each, and one in
// the new build only, with a line of ncu's own output before the CSV.
func TestNcuDurations(t *testing.T) {
	out := runScript(t, "ncudurations.py", filepath.Join("testdata", "ncudurations-old.csv"),
		filepath.Join("testdata", "ncudurations-new.csv"))
	wantInOutput(t, "ncudurations.py", out,
		"flash_a         4/3              1.1       0.9    0.818",
		"flash_b         1/1              2.0       3.0    1.500",
		"flash_c         0/1                -       0.7        -")
}

// runScript runs a Python script of this folder with python3 (the test
// skips where there is none) and returns its output.
func runScript(t *testing.T, script string, args ...string) string {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	out, err := exec.Command(python, append([]string{script}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return string(out)
}

// wantInOutput fails t for each of wants that out lacks.
func wantInOutput(t *testing.T, script, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("%s's output lacks %q:\n%s", script, want, out)
		}
	}
}
