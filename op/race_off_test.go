//go:build !race

package op_test

const raceDetector = false
