package cudakernels

// The GPU's key splits for decoding (decode_gpu.go). kernels.SplitKV
// serves the CPU, where a unit is a goroutine's and 64 cores are plenty;
// on the GPU a unit is one warp, and one multiprocessor holds several,
// each of which waits on memory most of the time, so the device needs
// many more of them in flight than it has multiprocessors.
const (
	decodeMaxSplits    = 256 // splits per key head and row tile at most
	decodeMinSplitKeys = 64  // keys a split gets at least: four chunks
	decodeUnitsPerSM   = 16  // resident units per multiprocessor at most
)

// decodeResident is the number of units a device of sms multiprocessors,
// each with smemPerSM bytes of shared memory, holds at once when a unit
// takes unitBytes and a block perBlock units: whole blocks, as the
// hardware places them.
func decodeResident(sms, smemPerSM, unitBytes, perBlock int) int {
	return sms * max(1, min(decodeUnitsPerSM, smemPerSM/(unitBytes*perBlock)*perBlock))
}

// decodeSplits returns the key splits of a decode over units units (key
// heads times row tiles) of at most keys keys each, on a device holding
// resident units: 1 when the units fill it already, else enough splits to
// fill it once, each of at least decodeMinSplitKeys keys, at most
// decodeMaxSplits. It is a pure function of the problem and the device,
// never of timing, so a result never depends on how a run was scheduled.
func decodeSplits(units, keys, resident int) int {
	if units >= resident {
		return 1
	}
	n := (resident + units - 1) / units
	return max(1, min(n, keys/decodeMinSplitKeys, decodeMaxSplits))
}
