package cudakernels

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readManifest parses kernels.manifest: sha256sum lines "HEX  PATH" after
// '#' comments.
func readManifest(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("kernels.manifest")
	if err != nil {
		t.Fatalf("%v: the generated kernels are missing; run `go generate ./cudakernels` where nvcc exists", err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sum, path, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("kernels.manifest: malformed line %q", line)
		}
		sums[path] = sum
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sums
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestGeneratedKernelsUpToDate fails when a CUDA source or gen.sh changed
// after the PTX was generated, when a source is not covered by the manifest,
// or when a generated file was edited by hand.
func TestGeneratedKernelsUpToDate(t *testing.T) {
	sums := readManifest(t)
	sources, err := filepath.Glob("csrc/*")
	if err != nil {
		t.Fatal(err)
	}
	outputs, err := filepath.Glob("ptx/*.ptx")
	if err != nil {
		t.Fatal(err)
	}
	if len(outputs) == 0 {
		t.Fatal("no generated PTX under ptx/")
	}
	inputs := append([]string{"gen.sh"}, sources...)
	for _, path := range inputs {
		want, ok := sums[path]
		switch {
		case !ok:
			t.Errorf("%s is not in kernels.manifest: run `go generate ./cudakernels` where nvcc exists", path)
		case fileSum(t, path) != want:
			t.Errorf("%s changed since the kernels were generated: run `go generate ./cudakernels` where nvcc exists and commit ptx/ and kernels.manifest", path)
		}
	}
	for _, path := range outputs {
		want, ok := sums[path]
		switch {
		case !ok:
			t.Errorf("%s was not produced by the last go generate", path)
		case fileSum(t, path) != want:
			t.Errorf("%s was edited after generation: regenerate it instead", path)
		}
	}
	for path := range sums {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("kernels.manifest lists %s, which is gone: regenerate", path)
		}
	}
}

var generatedHeader = regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.$`)

// TestGeneratedHeader checks the marker tools use to recognise generated
// files.
func TestGeneratedHeader(t *testing.T) {
	outputs, _ := filepath.Glob("ptx/*.ptx")
	for _, path := range append(outputs, "kernels.manifest") {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan()
		first := sc.Text()
		f.Close()
		if strings.HasPrefix(path, "ptx/") && !generatedHeader.MatchString(first) {
			t.Errorf("%s: first line %q is not a Code generated header", path, first)
		}
		if path == "kernels.manifest" && !strings.HasPrefix(first, "# Code generated ") {
			t.Errorf("%s: first line %q is not a Code generated header", path, first)
		}
	}
}
