package cpukernels

import (
	"container/heap"
	"fmt"
	"slices"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// forwardUnitCost is the number of (row, key) pairs forward unit (bh, qb)
// of p computes: what its time grows with.
func forwardUnitCost(p kernels.Params, bh, qb int) int {
	mask := p.Mask(bh / p.H)
	cost := 0
	for r := qb * blockRows; r < min(p.Nq, (qb+1)*blockRows); r++ {
		if r < mask.Lq {
			cost += mask.VisibleKeys(r)
		}
	}
	return cost
}

// backwardUnitCost is the number of (row, key) pairs backward unit (u, c)
// of p computes, over the query heads that read its key heads.
func backwardUnitCost(p kernels.Params, u, c int) int {
	_, per := keyGroups(p)
	kBlocks := ceilDiv(p.Nk, blockCols)
	perChunk := ceilDiv(kBlocks, keyChunks(p))
	cost := 0
	for x := range per {
		kvh := groupKeyHead(p, u, x)
		mask := p.Mask(kvh / p.KVHeads())
		for j := c * perChunk * blockCols; j < min(p.Nk, (c+1)*perChunk*blockCols); j++ {
			if j < mask.Lk {
				lo, hi := mask.QueryRange(j)
				cost += (hi - lo) * (p.H / p.KVHeads())
			}
		}
	}
	return cost
}

// forwardCosts and backwardCosts list the units' costs in the order the
// workers take them.
func forwardCosts(p kernels.Params) []int {
	qBlocks := ceilDiv(p.Nq, blockRows)
	costs := make([]int, p.B*p.H*qBlocks)
	for unit := range costs {
		bh, qb := forwardUnit(unit, qBlocks, p.B*p.H)
		costs[unit] = forwardUnitCost(p, bh, qb)
	}
	return costs
}

func backwardCosts(p kernels.Params) []int {
	groups, _ := keyGroups(p)
	costs := make([]int, groups*keyChunks(p))
	for unit := range costs {
		u, c := backwardUnit(unit, groups)
		costs[unit] = backwardUnitCost(p, u, c)
	}
	return costs
}

// idleShare models parallelFor: each unit in order goes to the worker that
// frees first, and the call ends when the last one finishes. It returns
// the share of the workers' time spent waiting for that.
func idleShare(costs []int, workers int) float64 {
	free := make(minHeap, workers)
	total := 0
	for _, c := range costs {
		free[0] += c
		heap.Fix(&free, 0)
		total += c
	}
	return 1 - float64(total)/float64(workers*slices.Max(free))
}

type minHeap []int

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *minHeap) Pop() any          { x := (*h)[len(*h)-1]; *h = (*h)[:len(*h)-1]; return x }

// TestUnitsLongestFirst checks the order in which the workers take the
// units: every unit once, and under a causal mask the forward's row blocks
// from the longest within each band of heads, and the backward's key
// chunks from the longest across every group. It also checks what the
// order is for, by a model of the dynamic hand-out: the share of 16
// workers' time left idle at the end of bench's causal shapes, which the
// old orders (row blocks in order, head by head; chunks group by group)
// left at 5–22 % forward and 29–32 % backward.
func TestUnitsLongestFirst(t *testing.T) {
	for _, p := range []kernels.Params{
		{B: 1, H: 8, Nq: 2048, Nk: 2048, D: 64, Causal: true},
		{B: 1, H: 8, Nq: 512, Nk: 512, D: 64, Causal: true},
		{B: 2, H: 5, Nq: 320, Nk: 320, D: 64, Causal: true}, // a last band of fewer heads
		{B: 2, H: 4, Hkv: 2, Nq: 704, Nk: 900, D: 32, Causal: true},
		{B: 1, H: 2, Nq: 8192, Nk: 8192, D: 64, Causal: true},
	} {
		heads, qBlocks := p.B*p.H, ceilDiv(p.Nq, blockRows)
		seen := make(map[[2]int]bool)
		costs := make([]int, heads*qBlocks)
		for unit := range costs {
			bh, qb := forwardUnit(unit, qBlocks, heads)
			if bh < 0 || bh >= heads || qb < 0 || qb >= qBlocks || seen[[2]int{bh, qb}] {
				t.Fatalf("%+v: forward unit %d is (head %d, row block %d): out of range or twice", p, unit, bh, qb)
			}
			seen[[2]int{bh, qb}] = true
			costs[unit] = forwardUnitCost(p, bh, qb)
		}
		// A band holds whole heads, bandUnits units or more.
		band := min(heads, ceilDiv(bandUnits, qBlocks)) * qBlocks
		for start := 0; start < len(costs); start += band {
			checkLongestFirst(t, p, fmt.Sprintf("forward units %d to %d", start, min(start+band, len(costs))-1), costs[start:min(start+band, len(costs))])
		}
		checkLongestFirst(t, p, "backward", backwardCosts(p))
	}
	for _, c := range []struct {
		n                 int
		forward, backward float64
	}{{2048, 0.001, 0.001}, {512, 0.001, 0.001}} {
		p := kernels.Params{B: 1, H: 8, Nq: c.n, Nk: c.n, D: 64, Causal: true}
		if got := idleShare(forwardCosts(p), 16); got > c.forward {
			t.Errorf("N = %d: the forward leaves %.3f of 16 workers idle, want at most %.3f", c.n, got, c.forward)
		}
		if got := idleShare(backwardCosts(p), 16); got > c.backward {
			t.Errorf("N = %d: the backward leaves %.3f of 16 workers idle, want at most %.3f", c.n, got, c.backward)
		}
	}
}

// checkLongestFirst fails t unless costs never grow.
func checkLongestFirst(t *testing.T, p kernels.Params, what string, costs []int) {
	t.Helper()
	if !slices.IsSortedFunc(costs, func(a, b int) int { return b - a }) {
		t.Errorf("%+v: %s not longest first: %v", p, what, costs)
	}
}
