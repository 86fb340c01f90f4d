package cudakernels

import (
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
)

const tableH200 = `{
  "device": "NVIDIA H200", "capability": "9.0", "date": "2026-12-02",
  "command": "flashtune -out tuned/h200.json", "problem": "H=16, B·N=16384",
  "entries": [
    {"precision": "bf16", "head_dim": 128, "causal": true, "backward": false, "n": 8192, "kernel": "sm80", "ms": {"sm80": 1.1, "sm90": 1.3}},
    {"precision": "bf16", "head_dim": 128, "causal": false, "backward": true, "n": 8192, "kernel": "sm90", "ms": {"sm80": 5, "sm90": 4}},
    {"precision": "bf16", "head_dim": 64, "causal": true, "backward": false, "n": 512, "kernel": "sm90-rowblock", "ms": {"sm80": 0.3, "sm90": 0.25, "sm90-rowblock": 0.2}},
    {"precision": "bf16", "head_dim": 64, "causal": true, "backward": false, "n": 2048, "kernel": "sm90", "ms": {"sm90": 0.5, "sm90-rowblock": 0.6}}
  ]
}`

// TestChooseTuned checks that a table moves exactly the calls it times,
// of a FamilyAuto backend, and no others.
func TestChooseTuned(t *testing.T) {
	tab, err := ParseTuneTable([]byte(tableH200))
	if err != nil {
		t.Fatal(err)
	}
	r := request{prec: BF16, d: 128, dir: forwardDir, causal: true, nq: 8192}
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
	heuristic(h200, FamilyAuto, request{prec: BF16, d: 128, dir: forwardDir, nq: 8192}, "an untimed kind (not causal)")
	heuristic(h200, FamilyAuto, request{prec: BF16, d: 100, dir: forwardDir, nq: 8192}, "another head dimension padded to 128, not causal")
	heuristic(h200, FamilySM90, r, "a backend of an explicit family")
	heuristic(h200, FamilyAuto, request{prec: BF16, d: 128, dir: forwardDir, causal: true, biasOrDropout: true, nq: 8192}, "a bias or dropout")
	heuristic(h200, FamilyAuto, request{prec: BF16, f64: true, d: 128, dir: forwardDir, causal: true, nq: 8192}, "float64")
	heuristic(a100, FamilyAuto, request{prec: BF16, d: 128, dir: backwardDir, nq: 8192}, "a family the device cannot run")
	heuristic(h200, FamilyAuto, request{prec: FP16, d: 64, dir: forwardDir, causal: true, nq: 512}, "another precision")
	// A head dimension padded to the timed one takes its entry, and a
	// kind timed at one length takes it at every length.
	for _, nq := range []int{1, 100, 8192, 1 << 20} {
		r.d, r.nq = 100, nq
		if got, _ := chooseTuned(h200, FamilyAuto, tab, r); got.kind != kindMMA {
			t.Errorf("D=100 (padded to 128), causal forward, Nq=%d: %v, want mma", nq, got.kind)
		}
	}
	// No table: the heuristic.
	if got, _ := chooseTuned(h200, FamilyAuto, nil, r); got.kind != kindWGMMA || got.plain != plainDefault {
		t.Errorf("without a table: %+v, want the warp-specialized wgmma forward", got)
	}
}

// TestChooseTunedLengths checks that a call takes the entry of the nearest
// length by ratio, the row-block candidate marking the Hopper choice and
// nothing else.
func TestChooseTunedLengths(t *testing.T) {
	tab, err := ParseTuneTable([]byte(tableH200))
	if err != nil {
		t.Fatal(err)
	}
	ws, _ := choose(h200, FamilySM90, request{prec: BF16, d: 64, dir: forwardDir, causal: true})
	rowblock := ws
	rowblock.plain = plainRowBlock
	for _, c := range []struct {
		nq   int
		want choice
	}{
		{1, rowblock}, {512, rowblock}, {1000, rowblock},
		// sqrt(512·2048) = 1024: equally near, the longer wins.
		{1023, rowblock}, {1024, ws}, {1025, ws}, {2048, ws}, {65536, ws},
	} {
		got, err := chooseTuned(h200, FamilyAuto, tab, request{prec: BF16, d: 64, dir: forwardDir, causal: true, nq: c.nq})
		if err != nil || got != c.want {
			t.Errorf("Nq=%d: %+v (%v), want %+v", c.nq, got, err, c.want)
		}
	}
	if got, _ := chooseTuned(h200, FamilyAuto, tab, request{prec: BF16, d: 64, dir: forwardDir, causal: true, nq: 512, bias: true,
		biasOrDropout: true}); got.plain != plainDefault {
		t.Error("a call with a bias took the row-block candidate")
	}
	if got, want := tab.lengths(), []int{512, 2048, 8192}; !slices.Equal(got, want) {
		t.Errorf("lengths = %v, want %v", got, want)
	}
	// The row-block candidate is a distinct registry key only where the
	// warp-specialized kernel is the plain one.
	if ws.plain != plainDefault || !wgmmaWSBuilt(BF16, 64) {
		t.Fatalf("the heuristic's BF16 D=64 forward is %+v", ws)
	}
	if _, err := parseCandidate("sm90-rowblock", TF32, 64, forwardDir); err == nil {
		t.Error("sm90-rowblock accepted for TF32 at D=64, whose plain Hopper forward is the row-block kernel already")
	}
	if _, err := parseCandidate("sm90-rowblock", BF16, 64, backwardDir); err == nil {
		t.Error("sm90-rowblock accepted for a backward")
	}
	// The two-consumer kernel exists where the default has three.
	for _, c := range []struct {
		prec Precision
		dp   int
		ok   bool
	}{{BF16, 64, true}, {FP16, 64, true}, {BF16, 128, false}, {TF32, 128, false}, {BF16, 32, false}} {
		_, err := parseCandidate("sm90-ws2", c.prec, c.dp, forwardDir)
		if (err == nil) != c.ok {
			t.Errorf("sm90-ws2 for %v at D=%d: %v, want accepted = %v", c.prec, c.dp, err, c.ok)
		}
		ch, _ := chooseCandidate(h200, candidate{fam: FamilySM90, plain: plainWS2}, request{prec: c.prec, d: c.dp, dir: forwardDir})
		if (ch.plain == plainWS2) != c.ok {
			t.Errorf("the sm90-ws2 candidate for %v at D=%d chose %+v", c.prec, c.dp, ch)
		}
	}
}

// TestPassesCandidate checks the candidates that make a persistent forward
// take the conversion passes: named after their kernel, accepted where
// that kernel is persistent only, and chosen with choice.passes there.
func TestPassesCandidate(t *testing.T) {
	for _, c := range []struct {
		name string
		prec Precision
		dp   int
		ok   bool
	}{
		{"sm90-passes", BF16, 128, true}, {"sm90-passes", TF32, 128, true},
		{"sm90-passes", BF16, 64, false}, // the three-consumer kernel is not persistent: it always takes the passes
		{"sm90-ws2-passes", FP16, 64, true}, {"sm90-ws2-passes", BF16, 128, false},
		{"sm90-rowblock-passes", BF16, 128, false}, {"sm80-passes", BF16, 128, false},
	} {
		cand, err := parseCandidate(c.name, c.prec, c.dp, forwardDir)
		if (err == nil) != c.ok {
			t.Errorf("%s for %v at D=%d: %v, want accepted = %v", c.name, c.prec, c.dp, err, c.ok)
			continue
		}
		if !c.ok {
			continue
		}
		ch, err := chooseCandidate(h200, cand, request{prec: c.prec, d: c.dp, dir: forwardDir})
		if err != nil || !ch.passes || ch.plain != cand.plain {
			t.Errorf("%s for %v at D=%d chose %+v, %v; want its plain kernel with the passes", c.name, c.prec, c.dp, ch, err)
		}
		// The backward has no such candidate, and the same candidate asks
		// nothing of it.
		if _, err := parseCandidate(c.name, c.prec, c.dp, backwardDir); err == nil {
			t.Errorf("%s accepted for a backward", c.name)
		}
		if ch, _ := chooseCandidate(h200, cand, request{prec: c.prec, d: c.dp, dir: backwardDir}); ch.passes {
			t.Errorf("%s for %v at D=%d set passes on the backward's choice", c.name, c.prec, c.dp)
		}
	}
	// The default candidates never ask for the passes.
	for _, cand := range candidates(BF16, 128, forwardDir) {
		if ch, _ := chooseCandidate(h200, cand, request{prec: BF16, d: 128, dir: forwardDir}); ch.passes != cand.passes {
			t.Errorf("%v chose passes = %v", cand, ch.passes)
		}
	}
}

// TestDistinctCandidates pins what Tune times on an H200 (every kind where
// two candidates differ) and that a device of one family has nothing to
// time.
func TestDistinctCandidates(t *testing.T) {
	names := func(cs []candidate) string {
		var s []string
		for _, c := range cs {
			s = append(s, c.String())
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct {
		dev  Capability
		prec Precision
		dp   int
		dir  direction
		want string
	}{
		{h200, BF16, 64, forwardDir, "sm80 sm90 sm90-rowblock sm90-ws2 sm90-ws2-passes"},
		{h200, FP16, 128, forwardDir, "sm80 sm90 sm90-rowblock sm90-passes"},
		{h200, BF16, 256, forwardDir, "sm80 sm90"},
		{h200, BF16, 32, forwardDir, "sm80"}, // no Hopper kernel at 32: one kernel, nothing to tune
		{h200, TF32, 64, forwardDir, "sm80 sm90"},
		{h200, TF32, 128, forwardDir, "sm80 sm90 sm90-rowblock sm90-passes"},
		{h200, TF32, 256, forwardDir, "sm80"},
		{h200, BF16, 128, backwardDir, "sm80 sm90"},
		{h200, TF32, 64, backwardDir, "sm80 sm90"},
		{h200, BF16, 256, backwardDir, "sm80"},
		{a100, BF16, 64, forwardDir, "sm80"},
	} {
		if got := names(distinctCandidates(c.dev, c.prec, c.dp, c.dir)); got != c.want {
			t.Errorf("%v D=%d %v on %d.%d: %q, want %q", c.prec, c.dp, c.dir, c.dev.Major, c.dev.Minor, got, c.want)
		}
	}
	// Tune opens a backend for a candidate only where the precision has
	// it: the two-consumer kernel is BF16/FP16 only, the row-block
	// candidate exists for TF32 at D = 128.
	for prec, want := range map[Precision]string{
		BF16: "sm90-rowblock sm90-ws2 sm90-ws2-passes sm90-passes",
		TF32: "sm90-rowblock sm90-passes",
	} {
		if got := names(tunedCandidates(prec)); got != want {
			t.Errorf("the backends Tune opens for %v beside the families: %q, want %q", prec, got, want)
		}
	}
	// The forcing table of a candidate marks exactly the kinds where it is
	// built, and every length takes it.
	ws2 := forcingTable(BF16, candidate{fam: FamilySM90, plain: plainWS2})
	for _, dp := range headDims {
		for _, dir := range []direction{forwardDir, backwardDir} {
			got, ok := ws2.pick(request{prec: BF16, d: dp, dir: dir, causal: true, nq: 100000}, dp)
			if want := dir == forwardDir && dp == 64; ok != want || (ok && got.plain != plainWS2) {
				t.Errorf("forcing table of sm90-ws2, D=%d %v: %v, %v; want it only at D=64 forward", dp, dir, got, ok)
			}
		}
	}
}

// TestParseTuneTableErrors checks that a table that says something wrong
// or unclear is refused, with an error wrapping ErrUnsupported.
func TestParseTuneTableErrors(t *testing.T) {
	entry := `{"precision": "bf16", "head_dim": 64, "causal": false, "backward": false, "n": 1024, "kernel": "sm90", "ms": {"sm80": 2, "sm90": 1}}`
	table := func(head, entries string) string {
		return `{` + head + `, "date": "d", "command": "c", "problem": "p", "entries": [` + entries + `]}`
	}
	const head = `"device": "NVIDIA H200", "capability": "9.0"`
	if _, err := ParseTuneTable([]byte(table(head, entry))); err != nil {
		t.Fatalf("a valid table: %v", err)
	}
	other := strings.Replace(entry, `"n": 1024`, `"n": 2048`, 1)
	if _, err := ParseTuneTable([]byte(table(head, entry+", "+other))); err != nil {
		t.Fatalf("a kind at two lengths: %v", err)
	}
	for name, data := range map[string]string{
		"not JSON":            `{`,
		"unknown field":       strings.Replace(table(head, entry), `"date"`, `"dates"`, 1),
		"no device":           table(`"device": "", "capability": "9.0"`, entry),
		"bad capability":      table(`"device": "X", "capability": "nine"`, entry),
		"fp32":                table(head, strings.Replace(entry, "bf16", "fp32", 1)),
		"unknown precision":   table(head, strings.Replace(entry, "bf16", "int8", 1)),
		"uncompiled head":     table(head, strings.Replace(entry, `"head_dim": 64`, `"head_dim": 96`, 1)),
		"no length":           table(head, strings.Replace(entry, `"n": 1024, `, ``, 1)),
		"negative length":     table(head, strings.Replace(entry, `"n": 1024`, `"n": -1`, 1)),
		"kernel auto":         table(head, strings.Replace(entry, `"kernel": "sm90"`, `"kernel": "auto"`, 1)),
		"unknown kernel":      table(head, strings.Replace(entry, `"kernel": "sm90"`, `"kernel": "sm70"`, 1)),
		"a family field":      table(head, strings.Replace(entry, `"kernel": "sm90"`, `"family": "sm90"`, 1)),
		"no chosen time":      table(head, strings.Replace(entry, `"sm90": 1`, `"sm100": 1`, 1)),
		"time of no kernel":   table(head, strings.Replace(entry, `"sm80": 2`, `"sm80": 2, "sm90-ws": 3`, 1)),
		"rowblock, backward":  table(head, strings.Replace(strings.Replace(entry, `"backward": false`, `"backward": true`, 1), `"sm80": 2`, `"sm90-rowblock": 2`, 1)),
		"not the fastest":     table(head, strings.Replace(entry, `"sm80": 2`, `"sm80": 0.5`, 1)),
		"zero time":           table(head, strings.Replace(entry, `"sm80": 2`, `"sm80": 0`, 1)),
		"twice":               table(head, entry+", "+entry),
		"twice at one length": table(head, entry+", "+strings.Replace(entry, `"sm80": 2`, `"sm80": 3`, 1)),
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
	for k, ps := range tab.picks {
		if !slices.Equal(back.picks[k], ps) {
			t.Errorf("%+v: %v after the round trip, want %v", k, back.picks[k], ps)
		}
	}
}
