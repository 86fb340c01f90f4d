package model

import (
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// checkpointVersion changes whenever the gob layout below does. Version 1
// had no Schedule and no Adam state; Restore refuses it rather than resume
// with fresh moments and a restarted warm-up, which set training back.
const checkpointVersion = 2

// Checkpoint is everything needed to continue training where it stopped:
// the model, its vocabulary, the optimiser's state and learning-rate
// schedule, and the loss curve so far.
type Checkpoint struct {
	Version  int
	Config   Config
	Vocab    string // Vocab.String()
	Schedule Schedule
	Adam     AdamState // Adam.Steps is the number of optimiser steps taken
	History  []LossPoint
	Params   []SavedParam
}

// LossPoint is one point of the loss curve. Val is NaN where no validation
// loss was measured.
type LossPoint struct {
	Step       int
	Train, Val float64
}

// SavedParam is one parameter tensor; exactly one of F32 and F64 is set.
type SavedParam struct {
	Name  string
	Shape []int
	F32   []float32
	F64   []float64
}

// Snapshot copies the model's current parameters and the training state
// into a Checkpoint.
func (m *Model) Snapshot(v *Vocab, sched Schedule, adam AdamState, history []LossPoint) *Checkpoint {
	ck := &Checkpoint{
		Version: checkpointVersion, Config: m.Config, Vocab: v.String(), Schedule: sched,
		Adam:    AdamState{Steps: adam.Steps, M: cloneAll(adam.M), V: cloneAll(adam.V)},
		History: slices.Clone(history),
	}
	for _, p := range m.params {
		sp := SavedParam{Name: p.name, Shape: slices.Clone([]int(p.t.Shape()))}
		switch d := p.t.Data().(type) {
		case []float32:
			sp.F32 = slices.Clone(d)
		case []float64:
			sp.F64 = slices.Clone(d)
		}
		ck.Params = append(ck.Params, sp)
	}
	return ck
}

func cloneAll(s [][]float64) [][]float64 {
	if s == nil {
		return nil
	}
	out := make([][]float64, len(s))
	for i := range s {
		out[i] = slices.Clone(s[i])
	}
	return out
}

// Restore builds the model and vocabulary a Checkpoint describes, and checks
// that its Adam state fits the model's parameters.
func (ck *Checkpoint) Restore() (*Model, *Vocab, error) {
	if ck.Version < checkpointVersion {
		return nil, nil, fmt.Errorf("checkpoint version %d predates saved optimiser state (version %d); "+
			"resuming it would restart Adam and the learning-rate warm-up, so train afresh instead", ck.Version, checkpointVersion)
	}
	if ck.Version != checkpointVersion {
		return nil, nil, fmt.Errorf("checkpoint version %d, this program reads version %d", ck.Version, checkpointVersion)
	}
	v := vocabOf([]rune(ck.Vocab))
	if v.Size() != ck.Config.Vocab {
		return nil, nil, fmt.Errorf("checkpoint vocabulary has %d symbols, its config says %d", v.Size(), ck.Config.Vocab)
	}
	m, err := New(ck.Config, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint config: %w", err)
	}
	if len(ck.Params) != len(m.params) {
		return nil, nil, fmt.Errorf("checkpoint has %d parameters, the model %d", len(ck.Params), len(m.params))
	}
	for i, sp := range ck.Params {
		p := m.params[i]
		if sp.Name != p.name || !slices.Equal(sp.Shape, []int(p.t.Shape())) {
			return nil, nil, fmt.Errorf("checkpoint parameter %d is %s%v, the model expects %s%v", i, sp.Name, sp.Shape, p.name, p.t.Shape())
		}
		var n int
		switch d := p.t.Data().(type) {
		case []float32:
			n = copy(d, sp.F32)
		case []float64:
			n = copy(d, sp.F64)
		}
		if n != p.t.Shape().TotalSize() {
			return nil, nil, fmt.Errorf("checkpoint parameter %s holds %d values of %s, want %d", sp.Name, n, p.t.Dtype(), p.t.Shape().TotalSize())
		}
	}
	if err := ck.checkAdam(m); err != nil {
		return nil, nil, err
	}
	return m, v, nil
}

// checkAdam reports an Adam state that Adam.Step would reject later, in the
// middle of training.
func (ck *Checkpoint) checkAdam(m *Model) error {
	a := ck.Adam
	if a.Steps < 0 || (a.Steps == 0) != (a.M == nil) {
		return fmt.Errorf("checkpoint has %d optimiser steps and moments for %d parameters", a.Steps, len(a.M))
	}
	if a.M == nil {
		return nil
	}
	if len(a.M) != len(m.params) || len(a.V) != len(m.params) {
		return fmt.Errorf("checkpoint has Adam moments for %d and %d parameters, the model %d", len(a.M), len(a.V), len(m.params))
	}
	for i, p := range m.params {
		if n := p.t.Shape().TotalSize(); len(a.M[i]) != n || len(a.V[i]) != n {
			return fmt.Errorf("checkpoint Adam moments of %s hold %d and %d values, want %d", p.name, len(a.M[i]), len(a.V[i]), n)
		}
	}
	return nil
}

// Encode writes the checkpoint with encoding/gob.
func (ck *Checkpoint) Encode(w io.Writer) error { return gob.NewEncoder(w).Encode(ck) }

// ReadCheckpoint decodes a checkpoint written by Encode.
func ReadCheckpoint(r io.Reader) (*Checkpoint, error) {
	var ck Checkpoint
	if err := gob.NewDecoder(r).Decode(&ck); err != nil {
		return nil, fmt.Errorf("decoding checkpoint: %w", err)
	}
	return &ck, nil
}

// SaveFile writes the checkpoint to path through a temporary file, so an
// interrupted save never leaves a truncated checkpoint behind.
func (ck *Checkpoint) SaveFile(path string) (err error) {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err = ck.Encode(f); err != nil {
		return errors.Join(err, f.Close(), os.Remove(tmp))
	}
	if err = f.Close(); err != nil {
		return errors.Join(err, os.Remove(tmp))
	}
	return os.Rename(tmp, path)
}

// LoadFile reads a checkpoint from path.
func LoadFile(path string) (*Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ck, err := ReadCheckpoint(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ck, nil
}
