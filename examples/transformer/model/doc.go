// Package model is the decoder-only, character-level GPT used by the example
// command and the N-sweep. It builds Gorgonia graphs; it does not run a
// training loop itself.
//
// # Architecture
//
// Tokens enter as one-hot rows (the vocabulary of a character corpus is a few
// dozen symbols, so a one-hot matrix product is the cheapest differentiable
// embedding lookup Gorgonia offers). Each of the Layers blocks is pre-norm:
//
//	x = x + Wo · Attention(LN₁(x))
//	x = x + W₂ · ReLU(W₁ · LN₂(x) + b₁) + b₂
//
// followed by a final LayerNorm and a linear head onto the vocabulary. The
// loss is the mean cross-entropy of next-character prediction.
//
// # Shapes
//
// Activations are kept as matrices [B·T, C] so that every projection is one
// Mul. Only attention sees [B, H, T, D] with D = C/H, which is what both
// attention paths consume:
//
//	AttentionFlash  op.Attention with a causal mask, O(T) extra memory
//	AttentionNaive  internal/naivegraph: BatchedMatMul + additive causal
//	                mask + SoftMax, O(T²) memory
//
// # Parameters and graphs
//
// A Model owns its parameter tensors. Every graph built from it (training,
// evaluation, sampling) binds the same tensors, so an optimiser step made
// through one graph is seen by all of them. Graphs must be run with a
// TapeMachine: SoftMax's DoDiff in gorgonia v0.9.18 is wrong on the
// LispMachine.
package model
