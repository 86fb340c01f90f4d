package cudakernels

// maxScratchPerData bounds a chunk's scratch (the operand copies and tile
// images a kernel family converts its inputs into) relative to the bytes
// the chunk copies. The images pad every head to whole tiles (128 rows in
// the Hopper family), so for many short sequences (N = 1, say) a chunk's
// scratch would otherwise be up to 128 times its data: [2097152, 1, 1, 64]
// in BF16 asked for tens of GiB of device memory for 1.5 GiB of inputs.
const maxScratchPerData = 2

// minScratchCap is the scratch every chunk may use whatever its data, so
// that capping never splits work into chunks too small to pay for their
// launches.
const minScratchCap = 64 << 20

// capScratch returns hc, the (batch, head) pairs of a chunk, lowered so
// that the chunk's scratch, scratchPerHead bytes a pair, stays within
// max(maxScratchPerData × the bytes the chunk of hc pairs copies,
// minScratchCap); never below one pair. Chunks of hc pairs hold at most an
// eighth of a call's data (chunkHeads), so the scratch of both slots stays
// below half the call's data plus 2·minScratchCap. For ordinary sequence
// lengths the scratch is smaller than the data and hc is returned as it is.
func capScratch(hc int, scratchPerHead, bytesPerHead int64) int {
	if scratchPerHead <= maxScratchPerData*bytesPerHead {
		return hc
	}
	limit := max(maxScratchPerData*bytesPerHead*int64(hc), minScratchCap)
	return max(1, min(hc, int(limit/scratchPerHead)))
}
