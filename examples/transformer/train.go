package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gorgonia-flash/flashattention/examples/transformer/model"
)

// Files written into -out.
const (
	checkpointFile = "checkpoint.gob"
	lossPlotFile   = "loss.png"
	sampleFile     = "sample.txt"
)

// Adam's constants. β₂ = 0.99 rather than the usual 0.999: with batches
// this small, the slower second moment let loss spikes through at the
// default rate (seen at 3e-3).
const (
	adamBeta1 = 0.9
	adamBeta2 = 0.99
	adamEps   = 1e-8
)

// batchStream marks the random streams of the training batches, one per
// step (rand.NewPCG(seed, batchStream|step)), apart from the fixed streams
// of validation and sampling. The batches of a step depend only on the seed
// and the step, so a resumed run draws what the uninterrupted run would.
const batchStream = 1 << 63

// setup loads or creates the model and encodes the corpus with its vocabulary.
func setup(o *options) (*model.Model, *model.Vocab, *model.Checkpoint, []int, error) {
	var ck *model.Checkpoint
	if o.resume != "" {
		var err error
		if ck, err = model.LoadFile(o.resume); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("-resume: %w", err)
		}
	}
	text, err := os.ReadFile(o.data)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("reading the corpus (run from the repository root or pass -data): %w", err)
	}
	if ck == nil {
		vocab := model.NewVocab(string(text))
		cfg := o.arch
		cfg.Vocab = vocab.Size()
		m, err := model.New(cfg, o.seed)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		tokens, err := vocab.Encode(string(text))
		return m, vocab, nil, tokens, err
	}
	m, vocab, err := ck.Restore()
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("-resume %s: %w", o.resume, err)
	}
	c := m.Config
	given := map[string]struct{ flag, ck any }{
		"seq": {o.arch.Seq, c.Seq}, "layers": {o.arch.Layers, c.Layers}, "heads": {o.arch.Heads, c.Heads},
		"dim": {o.arch.Dim, c.Dim}, "dtype": {o.arch.Dtype, c.Dtype},
	}
	for name := range o.archSet {
		if v := given[name]; v.flag != v.ck {
			return nil, nil, nil, nil, fmt.Errorf("%w: -%s=%v conflicts with the checkpoint, which has %v", errUsage, name, v.flag, v.ck)
		}
	}
	tokens, err := vocab.Encode(string(text))
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("%s does not fit the checkpoint's vocabulary: %w", o.data, err)
	}
	return m, vocab, ck, tokens, nil
}

func train(o *options, stdout, stderr io.Writer) error {
	m, vocab, ck, tokens, err := setup(o)
	if err != nil {
		return err
	}
	// Checked before training, not after it: the vocabulary is known now.
	var prompt []int
	if o.sampleLen > 0 {
		if prompt, err = vocab.Encode(o.prompt); err != nil {
			return fmt.Errorf("%w: -prompt: %w", errUsage, err)
		}
	}
	cfg := m.Config
	trainToks, valToks := model.Split(tokens, o.valFraction)
	if len(valToks) < cfg.Seq+1 || len(trainToks) < cfg.Seq+1 {
		return fmt.Errorf("%w: %d tokens with -val=%v leave too little text for -seq=%d", errUsage, len(tokens), o.valFraction, cfg.Seq)
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "model: %d layers, %d heads, dim %d, seq %d, vocab %d, %d parameters, %s, %s attention on %v\n",
		cfg.Layers, cfg.Heads, cfg.Dim, cfg.Seq, cfg.Vocab, m.NumParams(), cfg.Dtype, o.attention, o.device)
	fmt.Fprintf(stdout, "data: %s, %d train / %d validation characters\n", o.data, len(trainToks), len(valToks))

	trainG, err := m.NewGraph(o.batch, o.attention, true, o.flashOpts...)
	if err != nil {
		return fmt.Errorf("building the training graph: %w", err)
	}
	evalG, err := m.NewGraph(o.batch, o.attention, false, o.flashOpts...)
	if err != nil {
		return fmt.Errorf("building the evaluation graph: %w", err)
	}
	// The same validation windows every time, so the curve compares like with like.
	valRng := rand.New(rand.NewPCG(o.seed, 0xba1))
	var valBatches [][2][][]int
	for range o.evalBatches {
		in, tg, err := model.Batch(valToks, o.batch, cfg.Seq, valRng)
		if err != nil {
			return err
		}
		valBatches = append(valBatches, [2][][]int{in, tg})
	}
	validate := func() (float64, error) {
		sum := 0.0
		for _, b := range valBatches {
			l, err := evalG.Run(b[0], b[1])
			if err != nil {
				return 0, fmt.Errorf("validation: %w", err)
			}
			sum += l
		}
		return sum / float64(len(valBatches)), nil
	}

	solver := &model.Adam{Beta1: adamBeta1, Beta2: adamBeta2, Eps: adamEps}
	sched := o.schedule
	var history []model.LossPoint
	if ck != nil {
		solver.AdamState, history = ck.Adam, ck.History
		sched = resumedSchedule(ck.Schedule, o)
		fmt.Fprintf(stdout, "resumed from %s at step %d (optimiser state and learning-rate schedule restored)\n", o.resume, solver.Steps)
	}
	step0 := solver.Steps
	if sched.Steps == 0 {
		sched.Steps = step0 + o.steps
	}
	save := func() error {
		return m.Snapshot(vocab, sched, solver.AdamState, history).SaveFile(filepath.Join(o.out, checkpointFile))
	}
	if ck == nil {
		v, err := validate()
		if err != nil {
			return err
		}
		history = append(history, model.LossPoint{Step: 0, Train: math.NaN(), Val: v})
	}

	prog := newProgress(stderr, o.progress, step0, o.steps, o.evalEvery)
	tokPerStep := o.batch * cfg.Seq
	start := time.Now()
	lastVal := history[len(history)-1].Val
	var firstLoss, lastLoss float64
	for i := range o.steps {
		step := step0 + i + 1
		rng := rand.New(rand.NewPCG(o.seed, batchStream|uint64(step)))
		in, tg, err := model.Batch(trainToks, o.batch, cfg.Seq, rng)
		if err != nil {
			return err
		}
		loss, err := trainG.Run(in, tg)
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return fmt.Errorf("step %d: loss is %v; try a smaller -lr", step, loss)
		}
		if _, err := trainG.ClipGradNorm(o.clip); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		solver.LR = sched.Rate(step - 1)
		if err := trainG.Step(solver); err != nil {
			return fmt.Errorf("step %d: optimiser: %w", step, err)
		}
		if i == 0 {
			firstLoss = loss
		}
		lastLoss = loss
		point := model.LossPoint{Step: step, Train: loss, Val: math.NaN()}
		if (i+1)%o.evalEvery == 0 || i == o.steps-1 {
			if point.Val, err = validate(); err != nil {
				return err
			}
			lastVal = point.Val
		}
		history = append(history, point)
		if (i+1)%o.evalEvery == 0 {
			if err := save(); err != nil {
				return fmt.Errorf("saving the checkpoint: %w", err)
			}
		}
		tps := float64((i+1)*tokPerStep) / time.Since(start).Seconds()
		if err := prog.update(i, loss, lastVal, solver.LR, tps); err != nil {
			return err
		}
	}
	elapsed := time.Since(start)
	if err := prog.finish(); err != nil {
		return err
	}
	if err := save(); err != nil {
		return fmt.Errorf("saving the checkpoint: %w", err)
	}
	if o.steps > 0 {
		fmt.Fprintf(stdout, "step %d: train loss %.4f (first step %.4f), val loss %.4f, %.0f tok/s, %s\n",
			solver.Steps, lastLoss, firstLoss, lastVal, float64(o.steps*tokPerStep)/elapsed.Seconds(), elapsed.Round(time.Second))
	}
	written := []string{checkpointFile}
	var errs []error
	if err := writeLossPlot(filepath.Join(o.out, lossPlotFile), history); err != nil {
		errs = append(errs, fmt.Errorf("loss plot: %w", err))
	} else {
		written = append(written, lossPlotFile)
	}
	if o.sampleLen > 0 {
		if err := sample(m, vocab, prompt, o, stdout); err != nil {
			errs = append(errs, fmt.Errorf("sampling: %w", err))
		} else {
			written = append(written, sampleFile)
		}
	}
	fmt.Fprintf(stdout, "wrote %s in %s\n", joinAnd(written), o.out)
	return errors.Join(errs...)
}

// resumedSchedule is the checkpoint's learning-rate schedule with the
// schedule flags given on this command line in place of its values.
func resumedSchedule(s model.Schedule, o *options) model.Schedule {
	for name := range o.scheduleSet {
		switch name {
		case "lr":
			s.Peak = o.schedule.Peak
		case "warmup":
			s.Warmup = o.schedule.Warmup
		case "lr-floor":
			s.Floor = o.schedule.Floor
		case "lr-steps":
			s.Steps = o.schedule.Steps
		}
	}
	return s
}

// joinAnd lists names as "a", "a and b" or "a, b and c".
func joinAnd(names []string) string {
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// sample prints and saves -sample characters continuing prompt.
func sample(m *model.Model, vocab *model.Vocab, prompt []int, o *options, stdout io.Writer) error {
	text, err := generateText(m, vocab, prompt, o.sampleLen, o, stdout)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.out, sampleFile), []byte(text+"\n"), 0o644)
}

// generate is -generate: it prints -generate characters continuing -prompt
// from the -resume checkpoint, without training.
func generate(o *options, stdout io.Writer) error {
	ck, err := model.LoadFile(o.resume)
	if err != nil {
		return fmt.Errorf("-resume: %w", err)
	}
	m, vocab, err := ck.Restore()
	if err != nil {
		return fmt.Errorf("-resume %s: %w", o.resume, err)
	}
	prompt, err := vocab.Encode(o.prompt)
	if err != nil {
		return fmt.Errorf("%w: -prompt: %w", errUsage, err)
	}
	cfg := m.Config
	fmt.Fprintf(stdout, "model: %d layers, %d heads, dim %d, seq %d, vocab %d, %s, from %s\n",
		cfg.Layers, cfg.Heads, cfg.Dim, cfg.Seq, cfg.Vocab, cfg.Dtype, o.resume)
	_, err = generateText(m, vocab, prompt, o.generate, o, stdout)
	return err
}

// generateText draws n characters continuing prompt with the generator the
// flags choose, prints them with the speed, and returns the text (prompt
// included).
func generateText(m *model.Model, vocab *model.Vocab, prompt []int, n int, o *options, stdout io.Writer) (_ string, err error) {
	gen, how, closeGen, err := newGenerator(m, o)
	if err != nil {
		return "", err
	}
	defer func() { err = errors.Join(err, closeGen()) }()
	start := time.Now()
	ids, err := gen.Sample(prompt, n, o.temperature, rand.New(rand.NewPCG(o.seed, 0x5a3)))
	if err != nil {
		return "", err
	}
	elapsed := time.Since(start)
	text := vocab.Decode(ids)
	fmt.Fprintf(stdout, "--- sample (temperature %.2f) ---\n%s\n---\n", o.temperature, text)
	fmt.Fprintf(stdout, "generated %d characters in %s: %.0f tokens/s (%s)\n", n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), how)
	return text, nil
}

// newGenerator returns the sampler the flags choose, what it is, and how to
// release it: the cached one for flash attention with -kv-cache (its
// caches on -device: host memory for the CPU, device memory for the
// GPU), else the one that re-runs the context (the cache needs the flash
// op; naive attention is the reference).
func newGenerator(m *model.Model, o *options) (model.Generator, string, func() error, error) {
	if o.kvCache && o.attention == model.AttentionFlash {
		s, err := m.NewCachedSampler(o.device, o.flashOpts...)
		if err != nil {
			return nil, "", nil, err
		}
		return s, fmt.Sprintf("key/value cache on the %v", o.device), s.Close, nil
	}
	s, err := m.NewSampler(o.attention, o.flashOpts...)
	if err != nil {
		return nil, "", nil, err
	}
	return s, fmt.Sprintf("%s attention, whole context per token", o.attention), func() error { return nil }, nil
}
