package main

import (
	"fmt"

	"github.com/gorgonia-flash/flashattention/op"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// decode runs the README's key/value cache: a graph of one new token per
// sequence, run once per generated token, each run appending the token's
// keys and values to the cache and attending to all it holds.
func decode() error {
	const B, H, Hkv, D, capacity, steps = 1, 8, 2, 64, 256, 5
	g := gorgonia.NewGraph()
	input := func(name string, heads int) *gorgonia.Node {
		return gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(B, heads, 1, D),
			gorgonia.WithName(name), gorgonia.WithInit(gorgonia.GlorotN(1)))
	}
	q, k, v := input("q", H), input("k", Hkv), input("v", Hkv)

	cache, err := op.NewKVCache(B, Hkv, D, capacity, tensor.Float32) // op.CachePageSize(n) pages it
	if err != nil {
		return err
	}
	defer cache.Close()
	out, err := op.Attention(q, k, v, op.WithCausal(true), op.WithKVCache(cache)) // k, v: the new tokens
	if err != nil {
		return err
	}
	m := gorgonia.NewTapeMachine(g)
	defer m.Close()
	for range steps {
		// A real model computes q, k and v of the newest token here.
		if err := m.RunAll(); err != nil {
			return op.Cause(err)
		}
		m.Reset()
	}
	fmt.Println("cached tokens", cache.Len(0), "output", out.Shape())
	return nil
}
