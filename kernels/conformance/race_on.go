//go:build race

package conformance

// raceDetector is set in race-detector builds, which run the short sweep:
// races depend on the parallel structure, which small sizes exercise fully,
// and the full sweep's float64 reference is ten times slower under the
// detector than the default test timeout allows.
const raceDetector = true
