package kernels

import "testing"

// recordingResident records which ForwardKeep and BackwardKept ran.
type recordingResident struct {
	Backend
	called string
}

func (r *recordingResident) ForwardKeep32(Params, []float32, []float32, []float32, []float32, []float32) (DeviceState, error) {
	r.called = "ForwardKeep32"
	return nil, nil
}

func (r *recordingResident) ForwardKeep64(Params, []float64, []float64, []float64, []float64, []float64) (DeviceState, error) {
	r.called = "ForwardKeep64"
	return nil, nil
}

func (r *recordingResident) BackwardKept32(DeviceState, Params, []float32, []float32, []float32, []float32, []float32) error {
	r.called = "BackwardKept32"
	return nil
}

func (r *recordingResident) BackwardKept64(DeviceState, Params, []float64, []float64, []float64, []float64, []float64) error {
	r.called = "BackwardKept64"
	return nil
}

func TestResidentEntryPoints(t *testing.T) {
	r := &recordingResident{}
	f32, b32 := ResidentEntryPoints[float32](r)
	f64, b64 := ResidentEntryPoints[float64](r)
	for want, call := range map[string]func(){
		"ForwardKeep32":  func() { _, _ = f32(Params{}, nil, nil, nil, nil, nil) },
		"BackwardKept32": func() { _ = b32(nil, Params{}, nil, nil, nil, nil, nil) },
		"ForwardKeep64":  func() { _, _ = f64(Params{}, nil, nil, nil, nil, nil) },
		"BackwardKept64": func() { _ = b64(nil, Params{}, nil, nil, nil, nil, nil) },
	} {
		call()
		if r.called != want {
			t.Errorf("called %s, want %s", r.called, want)
		}
	}
}
