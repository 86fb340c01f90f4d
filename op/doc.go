// Package op is the public face of this module: Attention, a Gorgonia op for
// exact fused attention, softmax(scale·Q·Kᵀ + mask)·V, that never builds the
// Nq×Nk score matrix, forward or backward.
//
// # Shapes
//
//	q       [B, H, Nq, D]
//	k, v    [B, H, Nk, D]
//	result  [B, H, Nq, D]
//
// Nq and Nk may differ (cross-attention; decoding with Nq = 1). All three
// inputs share one dtype, Float32 or Float64. Every dimension must be at
// least 1: Nk = 0 is rejected rather than given a meaning, since a softmax
// over no keys is undefined.
//
// # Masking
//
// WithCausal(true) applies a bottom-right aligned causal mask, as in
// FlashAttention ≥ 2.1: query i sees key j if and only if j ≤ i + (Nk − Nq).
// With Nq > Nk the first Nq − Nk query rows see no key; their output and
// their gradient are 0, never NaN.
//
// # Saved state and memory
//
// The forward keeps only the per-row log-sum-exp LSE = m + log l ([B, H,
// Nq]) for the backward, in state shared by the op and its backward nodes
// (package autograd). The backward recomputes the attention probabilities
// block by block from Q, K, V, O, dO and LSE. Memory is O(N) in the sequence
// length: see bench/RESULTS.md for the measured figures.
//
// # Differentiation
//
// The node works with gorgonia.Grad and a TapeMachine (SymDiff) and with a
// LispMachine (DoDiff). Second derivatives are not supported. A graph holding
// the op must not be run by two machines at once, since the saved LSE
// belongs to the node.
//
// # Errors
//
// Attention checks its inputs while the graph is built and returns an error
// wrapping ErrInvalidInput for a nil node, a node of another graph, a rank
// other than 4, mismatched B, H or D, k and v of different shapes, mixed or
// non-float dtypes, a zero dimension, or a scale that is NaN or infinite.
//
// # Backends
//
// The default backend is the pure-Go CPU one (package cpukernels), in the
// default build with no cgo. WithBackend selects another kernels.Backend.
package op
