package cudakernels

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

const tableH200 = `{
  "device": "NVIDIA H200", "capability": "9.0", "date": "2026-12-02",
  "command": "flashtune -out tuned/h200.json", "problem": "B=1 H=16 N=8192",
  "entries": [
    {"precision": "bf16", "head_dim": 128, "causal": true, "backward": false, "family": "sm80", "ms": {"sm80": 1.1, "sm90": 1.3}},
    {"precision": "bf16", "head_dim": 128, "causal": false, "backward": true, "family": "sm90", "ms": {"sm80": 5, "sm90": 4}}
  ]
}`

// TestChooseTuned checks that a table moves exactly the calls it times,
// of a FamilyAuto backend, and no others.
func TestChooseTuned(t *testing.T) {
	tab, err := ParseTuneTable([]byte(tableH200))
	if err != nil {
		t.Fatal(err)
	}
	r := request{prec: BF16, d: 128, dir: forwardDir, causal: true}
	got, err := chooseTuned(h200, FamilyAuto, tab, r)
	want, _ := choose(h200, FamilySM80, r)
	if err != nil || got != want || got.kind != kindMMA {
		t.Errorf("tuned causal forward = %v, %v; want the sm80 family's %v", got.kind, err, want.kind)
	}
	heuristic := func(c Capability, fam Family, r request, why string) {
		t.Helper()
		got, err := chooseTuned(c, fam, tab, r)
		want, werr := choose(c, fam, r)
		if got != want || (err == nil) != (werr == nil) {
			t.Errorf("%s: %+v (%v), want the heuristic's %+v (%v)", why, got, err, want, werr)
		}
	}
	heuristic(h200, FamilyAuto, request{prec: BF16, d: 128, dir: forwardDir}, "an untimed kind (not causal)")
	heuristic(h200, FamilyAuto, request{prec: BF16, d: 100, dir: forwardDir}, "another head dimension padded to 128, not causal")
	heuristic(h200, FamilySM90, r, "a backend of an explicit family")
	heuristic(h200, FamilyAuto, request{prec: BF16, d: 128, dir: forwardDir, causal: true, biasOrDropout: true}, "a bias or dropout")
	heuristic(h200, FamilyAuto, request{prec: BF16, f64: true, d: 128, dir: forwardDir, causal: true}, "float64")
	heuristic(a100, FamilyAuto, request{prec: BF16, d: 128, dir: backwardDir}, "a family the device cannot run")
	// A head dimension padded to the timed one takes its entry.
	r.d = 100
	got, _ = chooseTuned(h200, FamilyAuto, tab, r)
	if got.kind != kindMMA {
		t.Errorf("D=100 (padded to 128), causal forward: %v, want mma", got.kind)
	}
	// No table: the heuristic.
	if got, _ := chooseTuned(h200, FamilyAuto, nil, r); got.kind != kindWGMMA {
		t.Errorf("without a table: %v, want wgmma", got.kind)
	}
}

// TestParseTuneTableErrors checks that a table that says something wrong
// or unclear is refused, with an error wrapping ErrUnsupported.
func TestParseTuneTableErrors(t *testing.T) {
	entry := `{"precision": "bf16", "head_dim": 64, "causal": false, "backward": false, "family": "sm90", "ms": {"sm80": 2, "sm90": 1}}`
	table := func(head, entries string) string {
		return `{` + head + `, "date": "d", "command": "c", "problem": "p", "entries": [` + entries + `]}`
	}
	const head = `"device": "NVIDIA H200", "capability": "9.0"`
	if _, err := ParseTuneTable([]byte(table(head, entry))); err != nil {
		t.Fatalf("a valid table: %v", err)
	}
	for name, data := range map[string]string{
		"not JSON":          `{`,
		"unknown field":     strings.Replace(table(head, entry), `"date"`, `"dates"`, 1),
		"no device":         table(`"device": "", "capability": "9.0"`, entry),
		"bad capability":    table(`"device": "X", "capability": "nine"`, entry),
		"fp32":              table(head, strings.Replace(entry, "bf16", "fp32", 1)),
		"unknown precision": table(head, strings.Replace(entry, "bf16", "int8", 1)),
		"uncompiled head":   table(head, strings.Replace(entry, `"head_dim": 64`, `"head_dim": 96`, 1)),
		"family auto":       table(head, strings.Replace(entry, `"family": "sm90"`, `"family": "auto"`, 1)),
		"unknown family":    table(head, strings.Replace(entry, `"family": "sm90"`, `"family": "sm70"`, 1)),
		"no chosen time":    table(head, strings.Replace(entry, `"sm90": 1`, `"sm100": 1`, 1)),
		"not the fastest":   table(head, strings.Replace(entry, `"sm80": 2`, `"sm80": 0.5`, 1)),
		"zero time":         table(head, strings.Replace(entry, `"sm80": 2`, `"sm80": 0`, 1)),
		"twice":             table(head, entry+", "+entry),
	} {
		if _, err := ParseTuneTable([]byte(data)); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: err = %v, want ErrUnsupported", name, err)
		}
	}
}

// TestTunedTablesParse checks every committed table, and that a device
// without one gets none.
func TestTunedTablesParse(t *testing.T) {
	files, err := fs.Glob(tunedTables, "tuned/*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := tunedTables.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseTuneTable(data); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if tab, err := tunedTable("a GPU no one tuned", h200); tab != nil || err != nil {
		t.Errorf("an untuned device: %v, %v; want no table", tab, err)
	}
}

// TestTuneTableJSONRoundTrip checks that JSON writes what ParseTuneTable
// reads back, entries and choices included.
func TestTuneTableJSONRoundTrip(t *testing.T) {
	tab, err := ParseTuneTable([]byte(tableH200))
	if err != nil {
		t.Fatal(err)
	}
	data, err := tab.JSON()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseTuneTable(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if back.Device != tab.Device || back.Capability != tab.Capability || back.Problem != tab.Problem ||
		back.Command != tab.Command || back.Date != tab.Date || len(back.Entries) != len(tab.Entries) {
		t.Fatalf("round trip changed the table:\n%s", data)
	}
	for k, f := range tab.families {
		if back.families[k] != f {
			t.Errorf("%+v: %v after the round trip, want %v", k, back.families[k], f)
		}
	}
}
