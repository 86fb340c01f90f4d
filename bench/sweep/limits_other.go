//go:build !linux

package main

import (
	"errors"
	"os"
)

// limitMemory is only implemented on Linux (setrlimit RLIMIT_AS).
func limitMemory(int64) error {
	return errors.New("the sweep limits child memory on Linux only")
}

// peakRSS is unknown off Linux.
func peakRSS(*os.ProcessState) int64 { return 0 }
