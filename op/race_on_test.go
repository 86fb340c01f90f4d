//go:build race

package op_test

// raceDetector is set in race-detector builds. gorgonia v0.9.18's
// LispMachine races with itself when a node fails during the backward pass:
// RunAll's deferred reset of its queue runs while its worker goroutine still
// reads the queue (vm_genera.go), so tests of that error path skip here.
const raceDetector = true
