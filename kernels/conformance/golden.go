package conformance

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// goldenCase is one file of testdata/golden (see its README). Params.Bias,
// when not nil, gives the bias's shape; Bias holds its values and DBias
// its gradient.
type goldenCase struct {
	Name               string
	Params             kernels.Params
	Q, K, V, DO, Bias  []float64
	O, LSE, DQ, DK, DV []float64
	DBias              []float64
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
	// Stored gzipped (as the variants are), which keeps the tree that a
	// GPU run carries small; a plain .json case, such as a new one copied
	// from the shared set, is read as well.
	plain, err := loadCases(filepath.Join(dir, "*.json.gz"), readGzip)
	if err != nil {
		return nil, err
	}
	unzipped, err := loadCases(filepath.Join(dir, "*.json"), readPlain)
	if err != nil {
		return nil, err
	}
	plain = append(plain, unzipped...)
	if len(plain) == 0 {
		return nil, fmt.Errorf("conformance: no golden cases in %s", dir)
	}
	variants, err := loadCases(filepath.Join(filepath.Dir(dir), "variants", "*.json.gz"), readGzip)
	if err != nil {
		return nil, err
	}
	if len(variants) == 0 {
		return nil, fmt.Errorf("conformance: no variant cases beside %s", dir)
	}
	return append(plain, variants...), nil
}

func readPlain(f string) ([]byte, error) { return os.ReadFile(f) }

func readGzip(f string) ([]byte, error) {
	fh, err := os.Open(f)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	z, err := gzip.NewReader(fh)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(z)
}

// goldenFile is the JSON of one case: testdata/golden/README.md gives the
// fields, testdata/variants/README.md the optional ones.
type goldenFile struct {
	B, H, Nq, Nk, D     int
	Causal              bool
	Scale               float64
	Q, K, V, Do, O, Lse goldenFloats
	Dq, Dk, Dv          goldenFloats

	Hkv         *int
	WindowLeft  *int `json:"window_left"`
	WindowRight *int `json:"window_right"`
	Softcap     float64
	AlibiSlopes []float64    `json:"alibi_slopes"`
	SeqlensQ    []int        `json:"seqlens_q"`
	SeqlensK    []int        `json:"seqlens_k"`
	BiasShape   []int        `json:"bias_shape"`
	Bias, Dbias goldenFloats // with bias_shape: [Bb, Hb, Nq, Nk] each
}

// params returns the problem c describes, its Bias (when bias_shape is
// not null) with the shape alone.
func (c goldenFile) params() (kernels.Params, error) {
	p := kernels.Params{B: c.B, H: c.H, Nq: c.Nq, Nk: c.Nk, D: c.D, Scale: c.Scale, Causal: c.Causal,
		Softcap: c.Softcap, ALiBi: c.AlibiSlopes, QLens: c.SeqlensQ, KLens: c.SeqlensK}
	if c.BiasShape != nil {
		s := c.BiasShape
		if len(s) != 4 || s[2] != c.Nq || s[3] != c.Nk {
			return p, fmt.Errorf("bias_shape %v, want [Bb, Hb, Nq, Nk] with Nq = %d, Nk = %d", s, c.Nq, c.Nk)
		}
		p.Bias = &kernels.Bias{Bb: s[0], Hb: s[1]}
		if len(c.Bias) != p.BiasLen() || len(c.Dbias) != p.BiasLen() {
			return p, fmt.Errorf("bias and dbias have %d and %d elements, want %d", len(c.Bias), len(c.Dbias), p.BiasLen())
		}
	}
	if c.Hkv != nil && *c.Hkv != c.H {
		p.Hkv = *c.Hkv
	}
	left, right := -1, -1
	if c.WindowLeft != nil {
		left = *c.WindowLeft
	}
	if c.WindowRight != nil {
		right = *c.WindowRight
	}
	if left != -1 || right != -1 {
		p.Window = kernels.Window{On: true, Left: left, Right: right}
	}
	return p, nil
}

func loadCases(pattern string, read func(string) ([]byte, error)) ([]goldenCase, error) {
	files, err := filepath.Glob(pattern)
	if err != nil {
		return nil, err
	}
	var cases []goldenCase
	for _, f := range files {
		raw, err := read(f)
		if err != nil {
			return nil, err
		}
		var c goldenFile
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("conformance: %s: %w", f, err)
		}
		p, err := c.params()
		if err != nil {
			return nil, fmt.Errorf("conformance: %s: %w", f, err)
		}
		base := filepath.Base(f)
		gc := goldenCase{
			Name:   strings.TrimSuffix(strings.TrimSuffix(base, ".gz"), ".json"),
			Params: p,
			Q:      c.Q, K: c.K, V: c.V, DO: c.Do, O: c.O, LSE: c.Lse, DQ: c.Dq, DK: c.Dk, DV: c.Dv,
		}
		if p.Bias != nil {
			gc.Bias, gc.DBias = c.Bias, c.Dbias
		}
		if err := kernels.CheckBackward(withBiasData(gc.Params, nil, gc.Bias), gc.Q, gc.K, gc.V, gc.O, gc.LSE, gc.DO, nil, gc.DQ, gc.DK, gc.DV); err != nil {
			return nil, fmt.Errorf("conformance: %s: %w", f, err)
		}
		cases = append(cases, gc)
	}
	return cases, nil
}
