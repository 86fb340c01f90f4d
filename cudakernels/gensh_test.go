package cudakernels

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeNVCC stands in for nvcc in TestGenShRecompilesWhatChanged: its
// version line is the manifest's, -M lists the files a source includes
// (its "#include" lines, followed under csrc/), and --ptx writes a PTX
// whose text depends on every one of them and logs the source it compiled.
const fakeNVCC = `#!/usr/bin/env bash
set -euo pipefail
if [[ "$1" == --version ]]; then echo "$FAKE_VERSION"; exit 0; fi
deps() { # the source and, recursively, the csrc/ files it includes
	local f=$1 inc
	echo "$f"
	for inc in $(grep -o '#include "[^"]*"' "$f" | cut -d '"' -f 2); do
		[[ -f "csrc/$inc" ]] && deps "csrc/$inc"
	done
}
src=${@: -1}
if [[ " $* " == *" -M "* ]]; then
	echo "$(basename "${src%.cu}").o : $(deps "$src" | sort -u | tr '\n' ' ')"
	exit 0
fi
out=
while (($#)); do [[ "$1" == -o ]] && out=$2; shift; done
echo "$src" >>"$FAKE_LOG"
{ echo "// fake PTX of $src"; cat $(deps "$src" | sort -u) | sha256sum; } >"$out"
`

// TestGenShRecompilesWhatChanged checks gen.sh's incremental rule, on a
// copy of the package's sources, PTX and manifest with a fake nvcc: nothing
// is compiled while the manifest matches; a change to a header compiles
// exactly the modules that include it, and the manifest then lists the
// new sources and PTX; FORCE=1 compiles every module. A module kept with
// stale PTX would pass TestGeneratedKernelsUpToDate, which compares
// sources only, so this is what guards it.
func TestGenShRecompilesWhatChanged(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	for _, pattern := range []string{"gen.sh", "kernels.manifest", "csrc/*", "ptx/*.ptx"} {
		files, err := filepath.Glob(pattern)
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: %v", pattern, err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	nvcc := filepath.Join(dir, "nvcc")
	if err := os.WriteFile(nvcc, []byte(fakeNVCC), 0o755); err != nil {
		t.Fatal(err)
	}
	// The version the manifest's third line names, so that the copy
	// starts up to date.
	manifest, err := os.ReadFile("kernels.manifest")
	if err != nil {
		t.Fatal(err)
	}
	version, _, ok := strings.Cut(strings.TrimPrefix(strings.Split(string(manifest), "\n")[2], "# "), "; flags:")
	if !ok {
		t.Fatalf("unexpected manifest header %q", strings.Split(string(manifest), "\n")[2])
	}
	log := filepath.Join(dir, "compiled.log")
	gen := func(env ...string) []string {
		t.Helper()
		if err := os.WriteFile(log, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bash, filepath.Join(dir, "gen.sh"))
		cmd.Env = append(os.Environ(), append([]string{"NVCC=" + nvcc, "FAKE_VERSION=" + version, "FAKE_LOG=" + log}, env...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gen.sh: %v\n%s", err, out)
		}
		data, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		compiled := strings.Fields(string(data))
		slices.Sort(compiled)
		return compiled
	}
	if compiled := gen(); len(compiled) != 0 {
		t.Fatalf("with the manifest up to date, gen.sh compiled %v", compiled)
	}

	// decode.cuh belongs to decode.cu alone.
	header := filepath.Join(dir, "csrc", "decode.cuh")
	data, err := os.ReadFile(header)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(header, append(data, "// changed\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if compiled := gen(); !slices.Equal(compiled, []string{"csrc/decode.cu"}) {
		t.Fatalf("after a change to decode.cuh, gen.sh compiled %v, want decode.cu alone", compiled)
	}
	newManifest, err := os.ReadFile(filepath.Join(dir, "kernels.manifest"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"csrc/decode.cuh", "ptx/decode_sm80.ptx"} {
		sum := fileSum(t, filepath.Join(dir, f))
		if !strings.Contains(string(newManifest), sum+"  "+f+"\n") {
			t.Errorf("the manifest does not list %s's new sum", f)
		}
	}
	if compiled := gen(); len(compiled) != 0 {
		t.Fatalf("run again, gen.sh compiled %v", compiled)
	}
	if compiled := gen("FORCE=1"); len(compiled) != 4 {
		t.Fatalf("FORCE=1 compiled %v, want the four modules", compiled)
	}
}
