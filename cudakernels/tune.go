package cudakernels

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"path"
	"strconv"
	"strings"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// A TuneTable records, for one GPU model, which kernel family ran each kind
// of call fastest when Tune timed every family on it, with the times that
// decided. Selection reads the table of the device a backend opens on
// before its heuristic (chooseTuned); a GPU without a table keeps the
// heuristic, and so do calls with a bias or dropout (the table times plain
// attention, and their kernels are others), float64 and FP32 calls (CUDA
// cores in every family), and backends opened with a family other than
// FamilyAuto (their caller chose). Committed tables live in tuned/, one
// JSON file per GPU model.
type TuneTable struct {
	// Device is the GPU's name as the driver reports it (cuDeviceGetName),
	// Capability its compute capability, "major.minor": a backend takes
	// the table whose both match its device.
	Device     string `json:"device"`
	Capability string `json:"capability"`
	// Date, Command and Problem say when and how the times were taken and
	// on which problem (every entry times the same B, H and N).
	Date    string      `json:"date"`
	Command string      `json:"command"`
	Problem string      `json:"problem"`
	Entries []TuneEntry `json:"entries"`

	families map[tuneKey]Family
}

// A TuneEntry is one kind of call and its fastest family.
type TuneEntry struct {
	Precision string `json:"precision"` // tf32, bf16 or fp16
	HeadDim   int    `json:"head_dim"`  // a compiled (padded) head dimension: 32, 64, 128 or 256
	Causal    bool   `json:"causal"`
	Backward  bool   `json:"backward"`
	// Family is the fastest family's name (sm80 or sm90); Millis holds
	// every timed family's kernel time in milliseconds, Family's the least.
	Family string             `json:"family"`
	Millis map[string]float64 `json:"ms"`
}

type tuneKey struct {
	prec     Precision
	dp       int
	causal   bool
	backward bool
}

// ParseTuneTable reads a table (TuneTable's JSON) and checks it: a device
// and capability, and entries of known precisions, compiled head
// dimensions and families, each key once, each family's time finite and
// positive, Family the fastest. The error wraps ErrUnsupported.
func ParseTuneTable(data []byte) (*TuneTable, error) {
	var t TuneTable
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("%w: tuning table: %w", ErrUnsupported, err)
	}
	if t.Device == "" {
		return nil, fmt.Errorf("%w: tuning table without a device name", ErrUnsupported)
	}
	if _, _, err := parseCapability(t.Capability); err != nil {
		return nil, err
	}
	t.families = make(map[tuneKey]Family, len(t.Entries))
	for i, e := range t.Entries {
		k, f, err := e.check()
		if err != nil {
			return nil, fmt.Errorf("%w: tuning table for %s, entry %d: %w", ErrUnsupported, t.Device, i, err)
		}
		if _, dup := t.families[k]; dup {
			return nil, fmt.Errorf("%w: tuning table for %s, entry %d: %s D=%d causal=%v backward=%v appears twice",
				ErrUnsupported, t.Device, i, e.Precision, e.HeadDim, e.Causal, e.Backward)
		}
		t.families[k] = f
	}
	return &t, nil
}

// check returns the entry's key and family, or what is wrong with it.
func (e TuneEntry) check() (tuneKey, Family, error) {
	prec, err := kernels.ParsePrecision(e.Precision)
	if err != nil {
		return tuneKey{}, 0, err
	}
	switch prec {
	case TF32, BF16, FP16:
	default:
		return tuneKey{}, 0, fmt.Errorf("precision %v: only the tensor-core precisions are tuned", prec)
	}
	if dp, err := paddedDim(e.HeadDim); err != nil || dp != e.HeadDim {
		return tuneKey{}, 0, fmt.Errorf("head dimension %d is not one kernels are compiled for (%v)", e.HeadDim, headDims)
	}
	f, err := ParseFamily(e.Family)
	if err != nil || f == FamilyAuto {
		return tuneKey{}, 0, fmt.Errorf("family %q: want sm80 or sm90", e.Family)
	}
	best, ok := e.Millis[e.Family]
	if !ok {
		return tuneKey{}, 0, fmt.Errorf("no time for the chosen family %s", e.Family)
	}
	for name, ms := range e.Millis {
		if g, err := ParseFamily(name); err != nil || g == FamilyAuto {
			return tuneKey{}, 0, fmt.Errorf("a time for family %q: want sm80 or sm90", name)
		}
		if !(ms > 0) || math.IsInf(ms, 1) {
			return tuneKey{}, 0, fmt.Errorf("family %s took %v ms", name, ms)
		}
		if ms < best {
			return tuneKey{}, 0, fmt.Errorf("family %s (%v ms) is chosen over the faster %s (%v ms)", e.Family, best, name, ms)
		}
	}
	return tuneKey{prec, e.HeadDim, e.Causal, e.Backward}, f, nil
}

// JSON returns the table as ParseTuneTable reads it, indented, one entry
// per line.
func (t *TuneTable) JSON() ([]byte, error) {
	head, err := json.Marshal(struct {
		Device     string `json:"device"`
		Capability string `json:"capability"`
		Date       string `json:"date"`
		Command    string `json:"command"`
		Problem    string `json:"problem"`
	}{t.Device, t.Capability, t.Date, t.Command, t.Problem})
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Write(head[:len(head)-1]) // without its closing brace
	b.WriteString(`, "entries": [`)
	for i, e := range t.Entries {
		line, err := json.Marshal(e)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n  ")
		b.Write(line)
	}
	b.WriteString("\n]}\n")
	return b.Bytes(), nil
}

// parseCapability splits "major.minor".
func parseCapability(s string) (major, minor int, err error) {
	a, b, ok := strings.Cut(s, ".")
	if ok {
		if major, err = strconv.Atoi(a); err == nil {
			minor, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || major < 0 || minor < 0 {
		return 0, 0, fmt.Errorf("%w: compute capability %q, want major.minor", ErrUnsupported, s)
	}
	return major, minor, nil
}

// family returns the family t chose for calls of r's kind, and whether t
// has one.
func (t *TuneTable) family(r request, dp int) (Family, bool) {
	if t == nil {
		return 0, false
	}
	f, ok := t.families[tuneKey{r.prec, dp, r.causal, r.dir == backwardDir}]
	return f, ok
}

// chooseTuned is choose with the device's tuning table t (nil: none): a
// call of a FamilyAuto backend in TF32, BF16 or FP16 without a bias or
// dropout, whose kind (precision, padded head dimension, causal,
// direction) t times, takes the kernel of the family t found fastest, if
// that family runs on the device; every other call, choose's heuristic.
func chooseTuned(c Capability, fam Family, t *TuneTable, r request) (choice, error) {
	if t != nil && fam == FamilyAuto && !r.biasOrDropout && !r.f64 && r.prec != FP32 {
		if dp, err := paddedDim(r.d); err == nil {
			if f, ok := t.family(r, dp); ok && checkDevice(c, f) == nil {
				return choose(c, f, r)
			}
		}
	}
	return choose(c, fam, r)
}

// tunedTables holds the committed tables (TuneTable).
//
//go:embed tuned
var tunedTables embed.FS

// tunedTable returns the committed table of the device called name with
// capability c, nil if there is none, or the error of a table that does
// not parse.
func tunedTable(name string, c Capability) (*TuneTable, error) {
	files, err := fs.Glob(tunedTables, "tuned/*.json")
	if err != nil {
		return nil, err
	}
	for _, file := range files {
		data, err := tunedTables.ReadFile(file)
		if err != nil {
			return nil, err
		}
		t, err := ParseTuneTable(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path.Base(file), err)
		}
		major, minor, _ := parseCapability(t.Capability)
		if t.Device == name && major == c.Major && minor == c.Minor {
			return t, nil
		}
	}
	return nil, nil
}
