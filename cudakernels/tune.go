package cudakernels

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// A TuneTable records, for one GPU model, which kernel ran each kind of
// call fastest when Tune timed every candidate on it, with the times that
// decided. A kind of call is a precision, a padded head dimension, the
// causal mask or not, a direction and a sequence length; the candidates
// are the two families' kernels and, for the Hopper family's forward where
// its plain kernel is the warp-specialized one, the other kernels beside
// it (see candidate). Selection reads the table of the device a
// backend opens on before its heuristic (chooseTuned); a GPU without a
// table keeps the heuristic, and so do calls with a bias or dropout (the
// table times plain attention, and their kernels are others), float64 and
// FP32 calls (CUDA cores in every family), and backends opened with a
// family other than FamilyAuto (their caller chose). Committed tables
// live in tuned/, one JSON file per GPU model; WithTuneTable gives a
// backend another.
type TuneTable struct {
	// Device is the GPU's name as the driver reports it (cuDeviceGetName),
	// Capability its compute capability, "major.minor": a backend takes
	// the committed table whose both match its device.
	Device     string `json:"device"`
	Capability string `json:"capability"`
	// Date, Command and Problem say when and how the times were taken and
	// on which problems (the heads, and the tokens B·N that each length's
	// batch fills).
	Date    string      `json:"date"`
	Command string      `json:"command"`
	Problem string      `json:"problem"`
	Entries []TuneEntry `json:"entries"`

	picks map[tuneKey][]tunePick // each kind's lengths, ascending
}

// A TuneEntry is one kind of call at one sequence length and its fastest
// kernel.
type TuneEntry struct {
	Precision string `json:"precision"` // tf32, bf16 or fp16
	HeadDim   int    `json:"head_dim"`  // a compiled (padded) head dimension: 32, 64, 128 or 256
	Causal    bool   `json:"causal"`
	Backward  bool   `json:"backward"`
	// N is the queries and keys of the timed problem. A call takes, of
	// its kind's entries, the one whose N is nearest its query count by
	// ratio (the longer of two equally near): the query count decides how
	// many blocks a forward launches and how much of the last one is
	// padding, where the candidates differ most.
	N int `json:"n"`
	// Kernel is the fastest candidate's name (candidate.String: sm80,
	// sm90, sm90-rowblock, sm90-ws2, sm90-passes, sm90-ws2-passes); Millis holds every timed
	// candidate's kernel time in milliseconds, Kernel's the least.
	Kernel string             `json:"kernel"`
	Millis map[string]float64 `json:"ms"`
}

type tuneKey struct {
	prec     Precision
	dp       int
	causal   bool
	backward bool
}

type tunePick struct {
	n    int
	cand candidate
}

// A candidate is a kernel a tuning table can choose: a family's, as choose
// picks it within that family, or in the Hopper family's forward, where
// its plain kernel is the warp-specialized one, another kernel for plain
// problems (plainForward): the two-warpgroup row-block kernel (the one the
// variants take; 128 query rows, no producer warpgroup), or at dp = 64 the
// warp-specialized kernel with two consumer warpgroups instead of three.
// They differ in block shape (at dp = 64 the default's 192 query rows pad
// a sequence of 512 or 1024 queries by an eighth, where 128 pad nothing)
// and in how loads overlap the products. Where that plain kernel is a
// persistent one (plainForward.persistentFor), passes asks it to take its
// K and Vᵀ images from the two conversion passes instead of making them
// itself where wgmmaFwdOwnKVPays says it pays: a rule measured on an
// H100, which a table replaces by measurement on its own GPU.
type candidate struct {
	fam    Family
	plain  plainForward
	passes bool
}

func (c candidate) String() string {
	s := c.fam.String()
	switch c.plain {
	case plainRowBlock:
		s += "-rowblock"
	case plainWS2:
		s += "-ws2"
	}
	if c.passes {
		s += "-passes"
	}
	return s
}

// candidates returns the kernels a table may choose for plain calls of
// prec at padded head dimension dp in direction dir: both families', the
// Hopper forward's other plain kernels where they are built, and each
// persistent one's form with the conversion passes.
func candidates(prec Precision, dp int, dir direction) []candidate {
	cs := []candidate{{fam: FamilySM80}, {fam: FamilySM90}}
	if dir == forwardDir {
		for _, k := range []plainForward{plainRowBlock, plainWS2} {
			if k.builtFor(prec, dp) {
				cs = append(cs, candidate{fam: FamilySM90, plain: k})
			}
		}
		for _, k := range []plainForward{plainDefault, plainWS2} {
			if k.persistentFor(prec, dp) {
				cs = append(cs, candidate{fam: FamilySM90, plain: k, passes: true})
			}
		}
	}
	return cs
}

// tunedCandidates returns the candidates of prec that no family option
// names (another plain kernel, or the passes), at any head dimension: the
// ones a backend opens with a forcing table (forcingTable).
func tunedCandidates(prec Precision) []candidate {
	var out []candidate
	for _, dp := range headDims {
		for _, c := range candidates(prec, dp, forwardDir) {
			if (c.plain != plainDefault || c.passes) && !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// distinctCandidates returns the candidates of prec, dp and dir that run
// distinct kernels on a device of capability c, in candidates' order: the
// first of those that choose the same kernel stands for them, and one that
// fails there (a kernel that does not fit) is left out. What Tune times.
func distinctCandidates(c Capability, prec Precision, dp int, dir direction) []candidate {
	var out []candidate
	seen := map[choice]bool{}
	for _, cand := range candidates(prec, dp, dir) {
		ch, err := chooseCandidate(c, cand, request{prec: prec, d: dp, dir: dir})
		if err != nil || seen[ch] {
			continue
		}
		seen[ch] = true
		out = append(out, cand)
	}
	return out
}

// parseCandidate returns the candidate of prec, dp and dir named s.
func parseCandidate(s string, prec Precision, dp int, dir direction) (candidate, error) {
	var names []string
	for _, c := range candidates(prec, dp, dir) {
		if c.String() == s {
			return c, nil
		}
		names = append(names, c.String())
	}
	return candidate{}, fmt.Errorf("kernel %q: want one of %s here", s, strings.Join(names, ", "))
}

// ParseTuneTable reads a table (TuneTable's JSON) and checks it: a device
// and capability, and entries of known precisions, compiled head
// dimensions, positive lengths and kernels that exist for their kind, each
// kind and length once, each kernel's time finite and positive, Kernel the
// fastest. The error wraps ErrUnsupported.
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
	t.picks = make(map[tuneKey][]tunePick)
	for i, e := range t.Entries {
		k, pick, err := e.check()
		if err != nil {
			return nil, fmt.Errorf("%w: tuning table for %s, entry %d: %w", ErrUnsupported, t.Device, i, err)
		}
		for _, q := range t.picks[k] {
			if q.n == pick.n {
				return nil, fmt.Errorf("%w: tuning table for %s, entry %d: %s D=%d causal=%v backward=%v N=%d appears twice",
					ErrUnsupported, t.Device, i, e.Precision, e.HeadDim, e.Causal, e.Backward, e.N)
			}
		}
		t.picks[k] = append(t.picks[k], pick)
	}
	for _, ps := range t.picks {
		slices.SortFunc(ps, func(a, b tunePick) int { return a.n - b.n })
	}
	return &t, nil
}

// check returns the entry's key and choice, or what is wrong with it.
func (e TuneEntry) check() (tuneKey, tunePick, error) {
	prec, err := kernels.ParsePrecision(e.Precision)
	if err != nil {
		return tuneKey{}, tunePick{}, err
	}
	switch prec {
	case TF32, BF16, FP16:
	default:
		return tuneKey{}, tunePick{}, fmt.Errorf("precision %v: only the tensor-core precisions are tuned", prec)
	}
	if dp, err := paddedDim(e.HeadDim); err != nil || dp != e.HeadDim {
		return tuneKey{}, tunePick{}, fmt.Errorf("head dimension %d is not one kernels are compiled for (%v)", e.HeadDim, headDims)
	}
	if e.N < 1 {
		return tuneKey{}, tunePick{}, fmt.Errorf("sequence length %d", e.N)
	}
	dir := forwardDir
	if e.Backward {
		dir = backwardDir
	}
	cand, err := parseCandidate(e.Kernel, prec, e.HeadDim, dir)
	if err != nil {
		return tuneKey{}, tunePick{}, err
	}
	best, ok := e.Millis[e.Kernel]
	if !ok {
		return tuneKey{}, tunePick{}, fmt.Errorf("no time for the chosen kernel %s", e.Kernel)
	}
	for name, ms := range e.Millis {
		if _, err := parseCandidate(name, prec, e.HeadDim, dir); err != nil {
			return tuneKey{}, tunePick{}, fmt.Errorf("a time for %w", err)
		}
		if !(ms > 0) || math.IsInf(ms, 1) {
			return tuneKey{}, tunePick{}, fmt.Errorf("kernel %s took %v ms", name, ms)
		}
		if ms < best {
			return tuneKey{}, tunePick{}, fmt.Errorf("kernel %s (%v ms) is chosen over the faster %s (%v ms)", e.Kernel, best, name, ms)
		}
	}
	return tuneKey{prec, e.HeadDim, e.Causal, e.Backward}, tunePick{e.N, cand}, nil
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

// pick returns the candidate t chose for calls of r's kind at padded head
// dimension dp, from the entry whose length is nearest r's query count by
// ratio (the longer of two equally near), and whether t times that kind.
func (t *TuneTable) pick(r request, dp int) (candidate, bool) {
	if t == nil {
		return candidate{}, false
	}
	ps := t.picks[tuneKey{r.prec, dp, r.causal, r.dir == backwardDir}]
	if len(ps) == 0 {
		return candidate{}, false
	}
	n := float64(max(r.nq, 1))
	best, bestDist := ps[0], math.Inf(1)
	for _, p := range ps { // ascending: a tie keeps the longer
		if d := math.Abs(math.Log(float64(p.n) / n)); d <= bestDist {
			best, bestDist = p, d
		}
	}
	return best.cand, true
}

// forcingTable returns a table, at every length, that chooses cand for
// every plain kind of call of prec where cand is a candidate: Tune opens
// the backend that times a candidate no family option names with it, and
// the tests one that runs it.
func forcingTable(prec Precision, cand candidate) *TuneTable {
	t := &TuneTable{Device: "any", Capability: "9.0", picks: map[tuneKey][]tunePick{}}
	for _, dp := range headDims {
		for _, dir := range []direction{forwardDir, backwardDir} {
			if !slices.Contains(candidates(prec, dp, dir), cand) {
				continue
			}
			for _, causal := range []bool{false, true} {
				t.picks[tuneKey{prec, dp, causal, dir == backwardDir}] = []tunePick{{n: 1, cand: cand}}
			}
		}
	}
	return t
}

// lengths returns every length t has an entry for, ascending, once each.
func (t *TuneTable) lengths() []int {
	if t == nil {
		return nil
	}
	var ns []int
	for _, ps := range t.picks {
		for _, p := range ps {
			ns = append(ns, p.n)
		}
	}
	slices.Sort(ns)
	return slices.Compact(ns)
}

// chooseTuned is choose with the device's tuning table t (nil: none): a
// call of a FamilyAuto backend in TF32, BF16 or FP16 without a bias or
// dropout, whose kind (precision, padded head dimension, causal,
// direction) t times, takes the kernel t found fastest at the nearest
// length, if its family runs on the device; every other call, choose's
// heuristic.
func chooseTuned(c Capability, fam Family, t *TuneTable, r request) (choice, error) {
	if t != nil && fam == FamilyAuto && !r.biasOrDropout && !r.f64 && r.prec != FP32 {
		if dp, err := paddedDim(r.d); err == nil {
			if cand, ok := t.pick(r, dp); ok && checkDevice(c, cand.fam) == nil {
				return chooseCandidate(c, cand, r)
			}
		}
	}
	return choose(c, fam, r)
}

// chooseCandidate is choose within cand's family, with cand's plain
// kernel where the family's choice is the Hopper plain forward and that
// kernel is built for it, and the conversion passes where cand asks for
// them and that kernel is persistent.
func chooseCandidate(c Capability, cand candidate, r request) (choice, error) {
	ch, err := choose(c, cand.fam, r)
	if err == nil && ch.kind == kindWGMMA && ch.dir == forwardDir && !ch.full && cand.plain.builtFor(ch.prec, ch.dp) {
		ch.plain = cand.plain
		ch.passes = cand.passes && cand.plain.persistentFor(ch.prec, ch.dp)
	}
	return ch, err
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
