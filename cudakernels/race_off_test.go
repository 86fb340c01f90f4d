//go:build !race

package cudakernels

const raceEnabled = false
