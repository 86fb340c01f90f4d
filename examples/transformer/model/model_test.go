package model

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/gorgonia-flash/flashattention/op"
)

const corpusPath = "../../../testdata/corpus/tinyshakespeare_head.txt"

func loadCorpus(t *testing.T) (*Vocab, []int) {
	t.Helper()
	text, err := os.ReadFile(corpusPath)
	if err != nil {
		t.Fatal(err)
	}
	v := NewVocab(string(text))
	toks, err := v.Encode(string(text))
	if err != nil {
		t.Fatal(err)
	}
	return v, toks
}

// randomBatch returns batch sequences of seq random tokens and their targets.
func randomBatch(rng *rand.Rand, batch, seq, vocab int) (in, tg [][]int) {
	for range batch {
		s := make([]int, seq+1)
		for i := range s {
			s[i] = rng.IntN(vocab)
		}
		in, tg = append(in, s[:seq]), append(tg, s[1:])
	}
	return in, tg
}

// maxRelDiff is max |a−b| / max(1, max |b|) over two equal-length slices.
func maxRelDiff(t *testing.T, a, b []float64) float64 {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("lengths %d and %d differ", len(a), len(b))
	}
	scale, diff := 1.0, 0.0
	for i := range a {
		scale = max(scale, math.Abs(b[i]))
		diff = max(diff, math.Abs(a[i]-b[i]))
	}
	return diff / scale
}

func TestTrainingLowersLoss(t *testing.T) {
	v, toks := loadCorpus(t)
	cfg := Config{Vocab: v.Size(), Seq: 16, Layers: 1, Heads: 2, Dim: 32, Dtype: "float32"}
	m, err := New(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	gr, err := m.NewGraph(8, AttentionFlash, true)
	if err != nil {
		t.Fatal(err)
	}
	solver := G.NewAdamSolver(G.WithLearnRate(1e-2))
	rng := rand.New(rand.NewPCG(7, 7))
	const steps = 30
	var losses []float64
	for range steps {
		in, tg, err := Batch(toks, 8, cfg.Seq, rng)
		if err != nil {
			t.Fatal(err)
		}
		l, err := gr.Run(in, tg)
		if err != nil {
			t.Fatal(err)
		}
		if err := gr.Step(solver); err != nil {
			t.Fatal(err)
		}
		losses = append(losses, l)
	}
	mean := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	first, last := mean(losses[:3]), mean(losses[steps-5:])
	t.Logf("mean loss of the first 3 steps %.3f, of the last 5 %.3f", first, last)
	// Uniform guessing costs log(vocab) ≈ 4.1 nats; 30 steps of Adam learn at
	// least the character frequencies, which are worth well over half a nat.
	if first-last < 0.5 {
		t.Errorf("loss fell from %.3f to %.3f over %d steps, want a drop of at least 0.5", first, last, steps)
	}
}

// TestNaiveMatchesFlash runs the same float64 model through both attention
// paths: logits and every parameter gradient must agree to rounding.
func TestNaiveMatchesFlash(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		tol  float64
	}{
		{"two layers", Config{Vocab: 11, Seq: 12, Layers: 2, Heads: 2, Dim: 16, Dtype: "float64"}, 1e-10},
		{"one head odd dim", Config{Vocab: 7, Seq: 9, Layers: 1, Heads: 1, Dim: 5, Dtype: "float64"}, 1e-10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(tc.cfg, 3)
			if err != nil {
				t.Fatal(err)
			}
			in, tg := randomBatch(rand.New(rand.NewPCG(3, 3)), 2, tc.cfg.Seq, tc.cfg.Vocab)
			run := func(a Attention) (float64, []float64, [][]float64) {
				gr, err := m.NewGraph(2, a, true)
				if err != nil {
					t.Fatal(err)
				}
				loss, err := gr.Run(in, tg)
				if err != nil {
					t.Fatal(err)
				}
				grads, err := gr.Gradients()
				if err != nil {
					t.Fatal(err)
				}
				return loss, gr.Logits(), grads
			}
			lossN, logitsN, gradsN := run(AttentionNaive)
			lossF, logitsF, gradsF := run(AttentionFlash)
			if d := math.Abs(lossN - lossF); d > tc.tol {
				t.Errorf("loss: naive %v, flash %v", lossN, lossF)
			}
			if d := maxRelDiff(t, logitsF, logitsN); d > tc.tol {
				t.Errorf("logits differ by %.3g (relative), tol %.0g", d, tc.tol)
			}
			for i, name := range m.ParamNames() {
				if d := maxRelDiff(t, gradsF[i], gradsN[i]); d > tc.tol {
					t.Errorf("gradient of %s differs by %.3g (relative), tol %.0g", name, d, tc.tol)
				}
			}
		})
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	v, toks := loadCorpus(t)
	cfg := Config{Vocab: v.Size(), Seq: 8, Layers: 1, Heads: 2, Dim: 8, Dtype: "float32"}
	m, err := New(cfg, 11)
	if err != nil {
		t.Fatal(err)
	}
	// Train a little so that no parameter still has its initial value.
	gr, err := m.NewGraph(4, AttentionFlash, true)
	if err != nil {
		t.Fatal(err)
	}
	solver := &Adam{LR: 1e-2, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8}
	rng := rand.New(rand.NewPCG(11, 11))
	for range 3 {
		in, tg, err := Batch(toks, 4, cfg.Seq, rng)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gr.Run(in, tg); err != nil {
			t.Fatal(err)
		}
		if err := gr.Step(solver); err != nil {
			t.Fatal(err)
		}
	}
	history := []LossPoint{{Step: 3, Train: 3.5, Val: math.NaN()}}
	sched := Schedule{Peak: 1e-2, Warmup: 2, Floor: 0.1, Steps: 10}
	var buf bytes.Buffer
	if err := m.Snapshot(v, sched, solver.AdamState, history).Encode(&buf); err != nil {
		t.Fatal(err)
	}
	ck, err := ReadCheckpoint(&buf)
	if err != nil {
		t.Fatal(err)
	}
	m2, v2, err := ck.Restore()
	if err != nil {
		t.Fatal(err)
	}
	if v2.String() != v.String() || ck.Adam.Steps != 3 || len(ck.History) != 1 || m2.Config != cfg || ck.Schedule != sched {
		t.Errorf("restored vocab %q, step %d, history %v, config %+v, schedule %+v", v2, ck.Adam.Steps, ck.History, m2.Config, ck.Schedule)
	}
	for i := range solver.M {
		if !slices.Equal(ck.Adam.M[i], solver.M[i]) || !slices.Equal(ck.Adam.V[i], solver.V[i]) {
			t.Fatalf("Adam moments of parameter %d changed in the round trip", i)
		}
	}
	in, tg, err := Batch(toks, 2, cfg.Seq, rng)
	if err != nil {
		t.Fatal(err)
	}
	logits := func(m *Model) []float64 {
		g, err := m.NewGraph(2, AttentionFlash, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Run(in, tg); err != nil {
			t.Fatal(err)
		}
		return g.Logits()
	}
	a, b := logits(m), logits(m2)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("logit %d: %v before saving, %v after loading", i, a[i], b[i])
		}
	}
}

func TestRestoreRejectsMismatch(t *testing.T) {
	m, err := New(Config{Vocab: 3, Seq: 4, Layers: 1, Heads: 1, Dim: 4, Dtype: "float64"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	ck := m.Snapshot(NewVocab("abc"), Schedule{}, AdamState{}, nil)
	ck.Params[2].Shape = []int{5, 4}
	if _, _, err := ck.Restore(); err == nil {
		t.Error("Restore accepted a parameter of the wrong shape")
	}
	ck = m.Snapshot(NewVocab("ab"), Schedule{}, AdamState{}, nil)
	if _, _, err := ck.Restore(); err == nil {
		t.Error("Restore accepted a vocabulary of the wrong size")
	}
	ck = m.Snapshot(NewVocab("abc"), Schedule{}, AdamState{Steps: 1, M: [][]float64{{0}}, V: [][]float64{{0}}}, nil)
	if _, _, err := ck.Restore(); err == nil {
		t.Error("Restore accepted Adam moments of the wrong shape")
	}
}

// TestRestoreRejectsVersion1: a checkpoint written before the optimiser
// state was saved is refused with a message that says why, rather than
// resumed with fresh moments.
func TestRestoreRejectsVersion1(t *testing.T) {
	m, err := New(Config{Vocab: 3, Seq: 4, Layers: 1, Heads: 1, Dim: 4, Dtype: "float64"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	ck := m.Snapshot(NewVocab("abc"), Schedule{}, AdamState{}, nil)
	ck.Version = 1
	var buf bytes.Buffer
	if err := ck.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	if ck, err = ReadCheckpoint(&buf); err != nil {
		t.Fatal(err)
	}
	_, _, err = ck.Restore()
	if err == nil || !strings.Contains(err.Error(), "version 1 predates saved optimiser state") {
		t.Errorf("version 1: got %v, want an error saying it has no optimiser state", err)
	}
}

func TestVocab(t *testing.T) {
	v := NewVocab("hello, world")
	ids, err := v.Encode("world hello")
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Decode(ids); got != "world hello" {
		t.Errorf("round trip gave %q", got)
	}
	if _, err := v.Encode("hello!"); err == nil {
		t.Error("Encode accepted a character outside the vocabulary")
	}
}

func TestSampleIsSeeded(t *testing.T) {
	m, err := New(Config{Vocab: 5, Seq: 6, Layers: 1, Heads: 1, Dim: 4, Dtype: "float32"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSampler(AttentionFlash)
	if err != nil {
		t.Fatal(err)
	}
	draw := func() []int {
		ids, err := s.Sample([]int{1, 2}, 10, 1, rand.New(rand.NewPCG(9, 9)))
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	a, b := draw(), draw()
	if len(a) != 12 {
		t.Fatalf("got %d tokens, want 12", len(a))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("two runs with the same seed differ: %v and %v", a, b)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Vocab: 5, Seq: 6, Layers: 1, Heads: 2, Dim: 4, Dtype: "float32"}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Config{
		{Vocab: 5, Seq: 6, Layers: 1, Heads: 3, Dim: 4, Dtype: "float32"},
		{Vocab: 5, Seq: 0, Layers: 1, Heads: 2, Dim: 4, Dtype: "float32"},
		{Vocab: 5, Seq: 6, Layers: 1, Heads: 2, Dim: 4, Dtype: "float16"},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// TestGradientsDoNotAccumulate runs a training graph twice without an
// optimiser step: the second run must report the same gradients, not twice
// them (Gorgonia's TapeMachine adds into bound gradients).
func TestGradientsDoNotAccumulate(t *testing.T) {
	m, err := New(Config{Vocab: 5, Seq: 4, Layers: 1, Heads: 1, Dim: 4, Dtype: "float64"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []Attention{AttentionFlash, AttentionNaive} {
		gr, err := m.NewGraph(1, a, true)
		if err != nil {
			t.Fatal(err)
		}
		in := [][]int{{1, 2, 3, 4}}
		var grads [2][][]float64
		for i := range grads {
			if _, err := gr.Run(in, in); err != nil {
				t.Fatal(err)
			}
			if grads[i], err = gr.Gradients(); err != nil {
				t.Fatal(err)
			}
		}
		for j, name := range m.ParamNames() {
			if d := maxRelDiff(t, grads[1][j], grads[0][j]); d != 0 {
				t.Errorf("%s: gradient of %s changed by %.3g between two identical runs", a, name, d)
			}
		}
	}
}

// TestCausal changes the token at one position: logits before it must not
// move (no leak from the future through the head reshapes and transposes),
// logits at and after it must (attention does carry context).
func TestCausal(t *testing.T) {
	cfg := Config{Vocab: 6, Seq: 8, Layers: 2, Heads: 2, Dim: 8, Dtype: "float64"}
	m, err := New(cfg, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []Attention{AttentionFlash, AttentionNaive} {
		gr, err := m.NewGraph(2, a, false)
		if err != nil {
			t.Fatal(err)
		}
		base := [][]int{{0, 1, 2, 3, 4, 5, 0, 1}, {5, 4, 3, 2, 1, 0, 5, 4}}
		if _, err := gr.Run(base, nil); err != nil {
			t.Fatal(err)
		}
		before := gr.Logits()
		const at = 4
		changed := [][]int{base[0], append([]int(nil), base[1]...)}
		changed[1][at] = 0
		if _, err := gr.Run(changed, nil); err != nil {
			t.Fatal(err)
		}
		after := gr.Logits()
		for s := range 2 {
			for i := range cfg.Seq {
				row := (s*cfg.Seq + i) * cfg.Vocab
				d := maxRelDiff(t, after[row:row+cfg.Vocab], before[row:row+cfg.Vocab])
				moved := s == 1 && i >= at
				if moved && d == 0 {
					t.Errorf("%s: sequence %d position %d did not see the change at position %d", a, s, i, at)
				}
				if !moved && d != 0 {
					t.Errorf("%s: sequence %d position %d moved by %.3g after a change at sequence 1 position %d", a, s, i, d, at)
				}
			}
		}
	}
}

// TestGradientsMatchFiniteDifferences checks the whole graph's backward pass
// (embeddings, LayerNorm, attention reshapes, MLP, LogSoftMax loss) against
// central differences of the loss in float64, on both attention paths. The
// naive/flash comparison alone cannot catch a wrong gradient in the layers
// the two paths share.
func TestGradientsMatchFiniteDifferences(t *testing.T) {
	cfg := Config{Vocab: 7, Seq: 6, Layers: 2, Heads: 2, Dim: 8, Dtype: "float64"}
	m, err := New(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	// Move the parameters off their initial values (unit gains, zero biases)
	// so that every term of the gradient is exercised.
	prng := rand.New(rand.NewPCG(5, 6))
	for _, p := range m.params {
		d := p.t.Data().([]float64)
		for i := range d {
			d[i] += 0.3 * prng.NormFloat64()
		}
	}
	in, tg := randomBatch(rand.New(rand.NewPCG(5, 5)), 2, cfg.Seq, cfg.Vocab)
	eval, err := m.NewGraph(2, AttentionNaive, false)
	if err != nil {
		t.Fatal(err)
	}
	loss := func() float64 {
		l, err := eval.Run(in, tg)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, a := range []Attention{AttentionFlash, AttentionNaive} {
		gr, err := m.NewGraph(2, a, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gr.Run(in, tg); err != nil {
			t.Fatal(err)
		}
		grads, err := gr.Gradients()
		if err != nil {
			t.Fatal(err)
		}
		for pi, p := range m.params {
			d := p.t.Data().([]float64)
			// A few entries of every parameter: first, last and one between.
			for _, i := range []int{0, len(d) / 2, len(d) - 1} {
				const h = 1e-5
				orig := d[i]
				d[i] = orig + h
				up := loss()
				d[i] = orig - h
				down := loss()
				d[i] = orig
				fd := (up - down) / (2 * h)
				if diff := math.Abs(fd - grads[pi][i]); diff > 1e-6*max(1, math.Abs(fd)) {
					t.Errorf("%s: d loss / d %s[%d] = %.8g, finite difference %.8g", a, p.name, i, grads[pi][i], fd)
				}
			}
		}
	}
}

func TestClipGradNorm(t *testing.T) {
	m, err := New(Config{Vocab: 5, Seq: 4, Layers: 1, Heads: 1, Dim: 4, Dtype: "float64"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	gr, err := m.NewGraph(1, AttentionFlash, true)
	if err != nil {
		t.Fatal(err)
	}
	in := [][]int{{1, 2, 3, 4}}
	if _, err := gr.Run(in, in); err != nil {
		t.Fatal(err)
	}
	before, err := gr.Gradients()
	if err != nil {
		t.Fatal(err)
	}
	norm, err := gr.ClipGradNorm(0)
	if err != nil {
		t.Fatal(err)
	}
	sq := 0.0
	for _, g := range before {
		for _, x := range g {
			sq += x * x
		}
	}
	if math.Abs(norm-math.Sqrt(sq)) > 1e-12 {
		t.Fatalf("norm %v, want %v", norm, math.Sqrt(sq))
	}
	if n, _ := gr.ClipGradNorm(2 * norm); n != norm {
		t.Errorf("a loose limit changed the norm to %v", n)
	}
	if _, err := gr.ClipGradNorm(norm / 4); err != nil {
		t.Fatal(err)
	}
	after, _ := gr.Gradients()
	for i := range before {
		for j := range before[i] {
			if want := before[i][j] / 4; math.Abs(after[i][j]-want) > 1e-15 {
				t.Fatalf("gradient %d[%d]: %v after clipping to a quarter of the norm, want %v", i, j, after[i][j], want)
			}
		}
	}
}

// TestCachedSamplerMatchesUncached draws text with the key/value caches,
// with the whole context re-run per token, and with naive attention, in
// both dtypes, from a prompt shorter than Seq and one longer: the tokens
// must be the same, through several segment restarts (Seq = 8, 30
// tokens).
func TestCachedSamplerMatchesUncached(t *testing.T) {
	for _, dtype := range []string{"float32", "float64"} {
		m, err := New(Config{Vocab: 11, Seq: 8, Layers: 2, Heads: 2, Dim: 8, Dtype: dtype}, 3)
		if err != nil {
			t.Fatal(err)
		}
		cached, err := m.NewCachedSampler(op.CPU)
		if err != nil {
			t.Fatal(err)
		}
		defer cached.Close()
		flash, err := m.NewSampler(AttentionFlash)
		if err != nil {
			t.Fatal(err)
		}
		naive, err := m.NewSampler(AttentionNaive)
		if err != nil {
			t.Fatal(err)
		}
		for _, prompt := range [][]int{{1, 2, 3}, {4, 5, 6, 7, 8, 9, 10, 0, 1, 2, 3}} {
			var texts [][]int
			for _, g := range []Generator{cached, flash, naive} {
				ids, err := g.Sample(prompt, 30, 0.8, rand.New(rand.NewPCG(5, 6)))
				if err != nil {
					t.Fatal(err)
				}
				texts = append(texts, ids)
			}
			for i, name := range []string{"without the cache", "with naive attention"} {
				if !slices.Equal(texts[0], texts[i+1]) {
					t.Errorf("%s, prompt %v: with the cache %v, %s %v", dtype, prompt, texts[0], name, texts[i+1])
				}
			}
			if len(texts[0]) != len(prompt)+30 {
				t.Errorf("%d tokens, want %d", len(texts[0]), len(prompt)+30)
			}
		}
	}
}
