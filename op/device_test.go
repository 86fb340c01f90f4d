package op_test

import (
	"errors"
	"testing"

	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func qkv(g *gorgonia.ExprGraph, d int) (q, k, v *gorgonia.Node) {
	n := func(name string) *gorgonia.Node {
		return gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(1, 2, 8, d), gorgonia.WithName(name))
	}
	return n("q"), n("k"), n("v")
}

// TestDeviceSelectionErrors: unknown values of the environment variables and
// of WithDevice are input errors, reported when the node is built.
func TestDeviceSelectionErrors(t *testing.T) {
	cases := []struct {
		name, dev, prec string
		opts            []op.Option
	}{
		{"unknown device", "tpu", "", nil},
		{"unknown precision", "", "int8", nil},
		{"unknown Device", "", "", []op.Option{op.WithDevice(op.Device(7))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(op.EnvDevice, c.dev)
			t.Setenv(op.EnvPrecision, c.prec)
			q, k, v := qkv(gorgonia.NewGraph(), 8)
			_, err := op.Attention(q, k, v, c.opts...)
			if !errors.Is(err, op.ErrInvalidInput) {
				t.Fatalf("error %v, want one wrapping ErrInvalidInput", err)
			}
			t.Log(err)
		})
	}
	// The option wins over the environment, and cpu ignores the precision.
	t.Setenv(op.EnvDevice, "tpu")
	t.Setenv(op.EnvPrecision, "bf16")
	q, k, v := qkv(gorgonia.NewGraph(), 8)
	if _, err := op.Attention(q, k, v, op.WithDevice(op.CPU)); err != nil {
		t.Fatal(err)
	}
	t.Setenv(op.EnvDevice, " CPU ")
	if _, err := op.Attention(q, k, v); err != nil {
		t.Fatal(err)
	}
}
