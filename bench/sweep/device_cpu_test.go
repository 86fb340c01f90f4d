//go:build !flashgpu

package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestGPUWithoutTag(t *testing.T) {
	err := run([]string{"-device", "gpu"}, new(bytes.Buffer), new(bytes.Buffer))
	if err == nil || !strings.Contains(err.Error(), "flashgpu") {
		t.Errorf("got %v, want an error naming the flashgpu tag", err)
	}
}
