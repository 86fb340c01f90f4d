package main

import (
	"os"
	"runtime/debug"
	"syscall"
)

// limitMemory caps this process's address space, so that an allocation past
// the limit fails (the Go runtime then exits with "out of memory") instead
// of pushing the machine into swap or the kernel's OOM killer. The soft Go
// memory limit below it makes the collector work harder before that point,
// so the limit is met by live data, not by garbage not yet collected.
func limitMemory(bytes int64) error {
	debug.SetMemoryLimit(bytes * 3 / 4)
	return syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: uint64(bytes), Max: uint64(bytes)})
}

// peakRSS is the largest resident set size of a finished child, in bytes.
func peakRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss * 1024 // Linux reports KiB
	}
	return 0
}
