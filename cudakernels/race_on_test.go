//go:build race

package cudakernels

// raceEnabled: the race detector is on (the emulated kernels skip: it
// does not see into their C++, which the run without it covers).
const raceEnabled = true
