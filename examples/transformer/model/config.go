package model

import (
	"errors"
	"fmt"

	"gorgonia.org/tensor"
)

// Attention selects how a block computes self-attention.
type Attention string

// The two attention paths. Both compute the same function.
const (
	AttentionFlash Attention = "flash"
	AttentionNaive Attention = "naive"
)

// ParseAttention maps a flag value onto an Attention.
func ParseAttention(s string) (Attention, error) {
	switch a := Attention(s); a {
	case AttentionFlash, AttentionNaive:
		return a, nil
	}
	return "", fmt.Errorf("unknown attention %q: want %q or %q", s, AttentionFlash, AttentionNaive)
}

// Config is the architecture. It is stored in checkpoints.
type Config struct {
	Vocab  int // number of distinct symbols
	Seq    int // context length T; the position table has Seq rows
	Layers int
	Heads  int
	Dim    int    // model width C, a multiple of Heads
	Dtype  string // "float32" or "float64"
}

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("invalid model configuration")

// Validate reports the first problem that makes c unusable.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"vocab", c.Vocab}, {"seq", c.Seq}, {"layers", c.Layers}, {"heads", c.Heads}, {"dim", c.Dim}} {
		if f.v < 1 {
			return fmt.Errorf("%w: %s = %d, must be at least 1", ErrInvalidConfig, f.name, f.v)
		}
	}
	if c.Dim%c.Heads != 0 {
		return fmt.Errorf("%w: dim = %d is not a multiple of heads = %d", ErrInvalidConfig, c.Dim, c.Heads)
	}
	if _, err := c.dtype(); err != nil {
		return err
	}
	return nil
}

// HeadDim is D = C/H.
func (c Config) HeadDim() int { return c.Dim / c.Heads }

func (c Config) dtype() (tensor.Dtype, error) {
	switch c.Dtype {
	case "float32":
		return tensor.Float32, nil
	case "float64":
		return tensor.Float64, nil
	}
	return tensor.Dtype{}, fmt.Errorf("%w: dtype %q, want float32 or float64", ErrInvalidConfig, c.Dtype)
}
