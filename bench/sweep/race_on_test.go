//go:build race

package main

// raceEnabled reports a race-detector build, whose shadow memory needs far
// more address space than the sweep's per-child limit allows.
const raceEnabled = true
