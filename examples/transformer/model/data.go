package model

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Vocab maps characters to token ids and back. Ids follow rune order.
type Vocab struct {
	runes []rune
	ids   map[rune]int
}

// NewVocab returns the vocabulary of the distinct runes of text.
func NewVocab(text string) *Vocab {
	seen := map[rune]bool{}
	for _, r := range text {
		seen[r] = true
	}
	runes := make([]rune, 0, len(seen))
	for r := range seen {
		runes = append(runes, r)
	}
	slices.Sort(runes)
	return vocabOf(runes)
}

func vocabOf(runes []rune) *Vocab {
	v := &Vocab{runes: runes, ids: make(map[rune]int, len(runes))}
	for i, r := range runes {
		v.ids[r] = i
	}
	return v
}

// Size is the number of tokens.
func (v *Vocab) Size() int { return len(v.runes) }

// String returns all symbols in id order; NewVocab of it gives v back.
func (v *Vocab) String() string { return string(v.runes) }

// Encode maps text to ids. It fails on a rune outside the vocabulary.
func (v *Vocab) Encode(text string) ([]int, error) {
	ids := make([]int, 0, len(text))
	for i, r := range text {
		id, ok := v.ids[r]
		if !ok {
			return nil, fmt.Errorf("character %q at byte %d is not in the vocabulary", r, i)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// Decode maps ids to text.
func (v *Vocab) Decode(ids []int) string {
	var sb strings.Builder
	for _, id := range ids {
		sb.WriteRune(v.runes[id])
	}
	return sb.String()
}

// Split cuts tokens into a training part and a held-out tail of the given
// fraction. The tail is contiguous, so no validation window overlaps a
// training window.
func Split(tokens []int, valFraction float64) (train, val []int) {
	n := int(float64(len(tokens)) * (1 - valFraction))
	return tokens[:n], tokens[n:]
}

// Batch draws batch random windows of seq+1 consecutive tokens and returns
// them as inputs and next-token targets.
func Batch(tokens []int, batch, seq int, rng *rand.Rand) (inputs, targets [][]int, err error) {
	if len(tokens) < seq+1 {
		return nil, nil, fmt.Errorf("%d tokens cannot hold one window of %d", len(tokens), seq+1)
	}
	inputs, targets = make([][]int, batch), make([][]int, batch)
	for i := range batch {
		start := rng.IntN(len(tokens) - seq)
		inputs[i] = tokens[start : start+seq]
		targets[i] = tokens[start+1 : start+seq+1]
	}
	return inputs, targets, nil
}
