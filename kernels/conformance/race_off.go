//go:build !race

package conformance

// raceDetector is set in race-detector builds, which run the short sweep.
const raceDetector = false
