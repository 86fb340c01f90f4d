//go:build !flashgpu

package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestGPUWithoutTag(t *testing.T) {
	err := run([]string{"-device=gpu", "-progress=false"}, new(bytes.Buffer), new(bytes.Buffer))
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "flashgpu") {
		t.Errorf("got %v, want a usage error naming the flashgpu tag", err)
	}
}
