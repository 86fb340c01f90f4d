// Package hostmem tells a kernel, before it allocates, whether the host
// memory it is about to ask for can still exist, so that it can return an
// error wrapping kernels.ErrOutOfMemory where the Go runtime would otherwise
// end the process with "fatal error: out of memory", which no caller can
// recover from.
//
// # Policy
//
// Check(need) fails when need exceeds the smallest of these budgets, each
// consulted only where it exists:
//
//   - the Go memory limit (debug.SetMemoryLimit, GOMEMLIMIT) minus the memory
//     the runtime holds now, counted as the runtime counts it against that
//     limit (runtime/metrics: all mapped memory less released heap);
//   - on Linux, the memory limit of the process's cgroup (v2 memory.max or
//     v1 memory.limit_in_bytes), and of each cgroup above it, minus its
//     usage less the file cache the kernel can reclaim (inactive_file);
//   - on Linux, MemAvailable of /proc/meminfo.
//
// Requests under 1 MiB are not checked: a process with less than that left
// fails anyway, and reading the figures costs a few file reads per call.
// For the same reason the operating system's figures are read again only
// when a request is at least a sixteenth of what the last reading found
// or that reading is a second old; smaller requests pass on it. The Go
// memory limit's budget is computed afresh for every request.
//
// # A pre-check, not a guarantee
//
// The figures change while the caller runs: other goroutines and processes
// allocate, the kernel reclaims cache, a garbage collection returns memory.
// Check can therefore pass for an allocation that then fails, and fail for
// one that would have succeeded after a collection. It catches the common
// case, a request far beyond what the machine or container has, which is
// what turns a huge but valid attention shape into a crash.
package hostmem
