package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// goldenCase is one file of testdata/golden (see its README).
type goldenCase struct {
	Name               string
	Params             kernels.Params
	Q, K, V, DO        []float64
	O, LSE, DQ, DK, DV []float64
}

// goldenFloats decodes a JSON array whose entries are numbers or the
// strings "inf" / "-inf" / "nan", since JSON has no infinities.
type goldenFloats []float64

func (g *goldenFloats) UnmarshalJSON(b []byte) error {
	var raw []any
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*g = make([]float64, len(raw))
	for i, x := range raw {
		switch x := x.(type) {
		case float64:
			(*g)[i] = x
		case string:
			switch strings.ToLower(x) {
			case "inf", "+inf", "infinity":
				(*g)[i] = math.Inf(1)
			case "-inf", "-infinity":
				(*g)[i] = math.Inf(-1)
			default:
				return fmt.Errorf("entry %d: unexpected string %q", i, x)
			}
		default:
			return fmt.Errorf("entry %d: unexpected %T", i, x)
		}
	}
	return nil
}

// GoldenDir finds testdata/golden by walking up from the working directory
// to the module root, so that test binaries run from any package folder, or
// carried to another machine and run from the repository root, find it.
func GoldenDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "testdata", "golden"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("conformance: no go.mod above the working directory, so testdata/golden cannot be found")
		}
		dir = parent
	}
}

func loadGolden() ([]goldenCase, error) {
	dir, err := GoldenDir()
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("conformance: no golden cases in %s", dir)
	}
	var cases []goldenCase
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var c struct {
			B, H, Nq, Nk, D     int
			Causal              bool
			Scale               float64
			Q, K, V, Do, O, Lse goldenFloats
			Dq, Dk, Dv          goldenFloats
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("conformance: %s: %w", f, err)
		}
		gc := goldenCase{
			Name:   strings.TrimSuffix(filepath.Base(f), ".json"),
			Params: kernels.Params{B: c.B, H: c.H, Nq: c.Nq, Nk: c.Nk, D: c.D, Scale: c.Scale, Causal: c.Causal},
			Q:      c.Q, K: c.K, V: c.V, DO: c.Do, O: c.O, LSE: c.Lse, DQ: c.Dq, DK: c.Dk, DV: c.Dv,
		}
		if err := kernels.CheckBackward(gc.Params, gc.Q, gc.K, gc.V, gc.O, gc.LSE, gc.DO, gc.DQ, gc.DK, gc.DV); err != nil {
			return nil, fmt.Errorf("conformance: %s: %w", f, err)
		}
		cases = append(cases, gc)
	}
	return cases, nil
}
