package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/schollz/progressbar/v3"
	G "gorgonia.org/gorgonia"

	"github.com/gorgonia-flash/flashattention/examples/transformer/model"
)

// Files written into -out.
const (
	checkpointFile = "checkpoint.gob"
	lossPlotFile   = "loss.png"
	sampleFile     = "sample.txt"
)

// adamBeta2 is the decay of Adam's second-moment average.
const adamBeta2 = 0.99

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
	cfg := m.Config
	trainToks, valToks := model.Split(tokens, o.valFraction)
	if len(valToks) < cfg.Seq+1 || len(trainToks) < cfg.Seq+1 {
		return fmt.Errorf("%w: %d tokens with -val=%v leave too little text for -seq=%d", errUsage, len(tokens), o.valFraction, cfg.Seq)
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "model: %d layers, %d heads, dim %d, seq %d, vocab %d, %d parameters, %s, %s attention on %s\n",
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

	step0 := 0
	var history []model.LossPoint
	if ck != nil {
		step0, history = ck.Step, ck.History
		fmt.Fprintf(stdout, "resumed from %s at step %d (Adam moments restart)\n", o.resume, step0)
	}
	save := func(step int) error {
		return m.Snapshot(vocab, step, history).SaveFile(filepath.Join(o.out, checkpointFile))
	}
	if ck == nil {
		v, err := validate()
		if err != nil {
			return err
		}
		history = append(history, model.LossPoint{Step: 0, Train: math.NaN(), Val: v})
	}

	// β₂ = 0.99 rather than 0.999: with batches this small, the slower second
	// moment let loss spikes through at the default rate (seen at 3e-3).
	// The learning rate is set before every step (learningRate).
	solver := G.NewAdamSolver(G.WithLearnRate(o.lr), G.WithBeta2(adamBeta2))
	rng := rand.New(rand.NewPCG(o.seed, uint64(step0)))
	bar := progressbar.NewOptions(o.steps,
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetVisibility(o.progress),
		progressbar.OptionSetWidth(25),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionShowElapsedTimeOnFinish(),
	)
	tokPerStep := o.batch * cfg.Seq
	start := time.Now()
	lastVal := history[len(history)-1].Val
	var firstLoss, lastLoss float64
	for i := range o.steps {
		step := step0 + i + 1
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
		G.WithLearnRate(o.learningRate(i))(solver)
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
			if err := save(step); err != nil {
				return fmt.Errorf("saving the checkpoint: %w", err)
			}
		}
		tps := float64((i+1)*tokPerStep) / time.Since(start).Seconds()
		bar.Describe(fmt.Sprintf("loss %.3f  val %.3f  %.0f tok/s", loss, lastVal, tps))
		if err := bar.Add(1); err != nil {
			return err
		}
	}
	elapsed := time.Since(start)
	if err := bar.Finish(); err != nil {
		return err
	}
	fmt.Fprintln(stderr)
	step := step0 + o.steps
	if err := save(step); err != nil {
		return fmt.Errorf("saving the checkpoint: %w", err)
	}
	if o.steps > 0 {
		fmt.Fprintf(stdout, "step %d: train loss %.4f (first step %.4f), val loss %.4f, %.0f tok/s, %s\n",
			step, lastLoss, firstLoss, lastVal, float64(o.steps*tokPerStep)/elapsed.Seconds(), elapsed.Round(time.Second))
	}
	var errs []error
	if err := writeLossPlot(filepath.Join(o.out, lossPlotFile), history); err != nil {
		errs = append(errs, fmt.Errorf("loss plot: %w", err))
	}
	fmt.Fprintf(stdout, "wrote %s and %s in %s\n", checkpointFile, lossPlotFile, o.out)
	if o.sampleLen > 0 {
		if err := sample(m, vocab, o, stdout); err != nil {
			errs = append(errs, fmt.Errorf("sampling: %w", err))
		}
	}
	return errors.Join(errs...)
}

// sample prints and saves -sample characters continuing -prompt.
func sample(m *model.Model, vocab *model.Vocab, o *options, stdout io.Writer) error {
	prompt, err := vocab.Encode(o.prompt)
	if err != nil {
		return fmt.Errorf("-prompt: %w", err)
	}
	s, err := m.NewSampler(o.attention, o.flashOpts...)
	if err != nil {
		return err
	}
	ids, err := s.Sample(prompt, o.sampleLen, o.temperature, rand.New(rand.NewPCG(o.seed, 0x5a3)))
	if err != nil {
		return err
	}
	text := vocab.Decode(ids)
	fmt.Fprintf(stdout, "--- sample (temperature %.2f) ---\n%s\n---\n", o.temperature, text)
	return os.WriteFile(filepath.Join(o.out, sampleFile), []byte(text+"\n"), 0o644)
}
