package kernels

import "fmt"

// Pages describes keys and values stored in fixed-size pages of one pool,
// as a paged key/value cache keeps them (vLLM's block table): with
// Params.Pages set, k and v are not [B, Hkv, Nk, D] but the pools
// [Count, Hkv, Size, D], and key j of batch entry b is row j mod Size of
// page Table[b][j / Size]. A page holds Size consecutive keys of one
// sequence for every key head, so a sequence takes whole pages from the
// pool as it grows and returns them when it is reset, and sequences of very
// different lengths share the pool without reserving B·Nk keys.
//
// Nk stays the number of key positions of the problem and KLens, when not
// nil, each sequence's real keys; Table[b] must name a page for every
// position below KLens[b] (Nk without lengths). Pages may appear in any
// order. Pages are read, never written, and only by a forward: a backward refuses them (a paged
// cache serves inference).
type Pages struct {
	Size  int     // keys per page, at least 1
	Count int     // pages in the pool: k and v hold Count·Hkv·Size·D elements
	Table [][]int // Table[b][i]: the pool page of keys [i·Size, (i+1)·Size) of entry b
}

// KeyRow returns the offset in k (and v) of the first element of key j of
// key head kvh (of the B·KVHeads()): (kvh·Nk + j)·D when the keys are
// dense, its page's row when p.Pages is set. It is the one place that
// knows the paged layout; the naive reference reads every key through it.
func (p Params) KeyRow(kvh, j int) int {
	if p.Pages == nil {
		return (kvh*p.Nk + j) * p.D
	}
	hkv := p.KVHeads()
	pg := p.Pages
	page := pg.Table[kvh/hkv][j/pg.Size]
	return ((page*hkv+kvh%hkv)*pg.Size + j%pg.Size) * p.D
}

// validatePages checks the page size, the pool's size and every block
// table entry that a real key reads.
func (p Params) validatePages() error {
	pg := p.Pages
	if pg == nil {
		return nil
	}
	if pg.Size < 1 || pg.Count < 0 {
		return fmt.Errorf("%w: pages of %d keys in a pool of %d pages: want at least 1 key per page", ErrInvalidParams, pg.Size, pg.Count)
	}
	if len(pg.Table) != p.B {
		return fmt.Errorf("%w: %d block tables for B = %d batch entries", ErrInvalidParams, len(pg.Table), p.B)
	}
	if p.Bias != nil {
		return fmt.Errorf("%w: a bias with paged keys (a paged cache attends without one)", ErrInvalidParams)
	}
	if n := float64(pg.Count) * float64(p.KVHeads()) * float64(pg.Size) * float64(p.D); n > MaxElements {
		return fmt.Errorf("%w: the page pool has %.0f elements, more than the supported %d", ErrInvalidParams, n, MaxElements)
	}
	for b, table := range pg.Table {
		lk := p.Nk
		if p.KLens != nil {
			lk = p.KLens[b]
		}
		if need := (lk + pg.Size - 1) / pg.Size; len(table) < need {
			return fmt.Errorf("%w: entry %d has %d keys in %d pages of %d, but its block table names %d", ErrInvalidParams, b, lk, need, pg.Size, len(table))
		}
		for i, page := range table {
			if page < 0 || page >= pg.Count {
				return fmt.Errorf("%w: block table %d, page %d is %d, outside the pool's %d pages", ErrInvalidParams, b, i, page, pg.Count)
			}
		}
	}
	return nil
}
