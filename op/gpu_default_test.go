//go:build !flashgpu

package op_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
)

// builtWithGPU says whether the tests were built with the flashgpu tag.
const builtWithGPU = false

// TestGPUWithoutTag: without the flashgpu tag, asking for the GPU by option
// or environment is an error that says how to build, never a panic.
func TestGPUWithoutTag(t *testing.T) {
	t.Setenv(op.EnvDevice, "")
	q, k, v := qkv(gorgonia.NewGraph(), 8)
	_, err := op.Attention(q, k, v, op.WithDevice(op.GPU))
	if !errors.Is(err, op.ErrNoGPU) || !strings.Contains(err.Error(), "flashgpu") {
		t.Fatalf("WithDevice(GPU): error %v, want ErrNoGPU naming the flashgpu tag", err)
	}
	t.Log(err)
	t.Setenv(op.EnvDevice, "gpu")
	if _, err := op.Attention(q, k, v); !errors.Is(err, op.ErrNoGPU) {
		t.Fatalf("%s=gpu: error %v, want ErrNoGPU", op.EnvDevice, err)
	}
	if err := op.CloseGPU(); err != nil {
		t.Fatal(err)
	}
}
