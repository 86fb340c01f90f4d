package cudakernels

import (
	"os/exec"
	"path/filepath"
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
