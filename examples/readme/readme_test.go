package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}

func TestDecode(t *testing.T) {
	if err := decode(); err != nil {
		t.Fatal(err)
	}
}

// TestREADMECode: every ```go block of the README is the text of a Go file
// in this folder tree, or a part of one (compared line by line, ignoring
// indentation), so the README's code is code that compiles.
func TestREADMECode(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(readme))
	if len(blocks) == 0 {
		t.Fatal("the README has no ```go block")
	}
	var sources []string
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		sources = append(sources, normalize(string(src)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range blocks {
		found := false
		for _, src := range sources {
			found = found || strings.Contains(src, normalize(b))
		}
		if !found {
			t.Errorf("README Go block %d is in no file of examples/readme:\n%s", i+1, b)
		}
	}
}

// goBlocks returns the contents of the ```go fences of a markdown text.
func goBlocks(md string) []string {
	var blocks []string
	for {
		_, rest, ok := strings.Cut(md, "```go\n")
		if !ok {
			return blocks
		}
		block, after, _ := strings.Cut(rest, "```")
		blocks = append(blocks, block)
		md = after
	}
}

// normalize drops each line's indentation and the blank lines at either end.
func normalize(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, "\n")
}
