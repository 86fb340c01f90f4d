// Package autograd is attention as a differentiable Gorgonia op: the fused
// forward (Op) and its recomputing backward, side by side, with the state
// they share. Package op builds it from user options; build it directly
// with New only to place it with gorgonia.ApplyOp yourself.
//
// # The op pair
//
// Op computes o = softmax(scale·q·kᵀ + mask)·v through a kernels.Backend
// and keeps only the per-row log-sum-exp LSE = m + log l ([B, H, Nq]), the
// way Gorgonia's maxPoolOp keeps its mask for maxPoolDiffOp. Its SymDiff adds
// one gradOp node that runs the backend's backward on (q, k, v, o, dO) and
// that LSE, recomputing the probabilities block by block, and nodes that
// view dQ, dK and dV (and dBias) in its packed result (Gorgonia ops have a
// single output). DoDiff runs the same backward directly, for the LispMachine.
// Nothing of size Nq×Nk exists at any point but a bias the user gives and
// its gradient. Both directions reach the backend through one dispatch
// path (engine, in run.go).
//
// # Extra inputs and outputs
//
// An additive bias (Config.Bias) is the fourth input, right after v, in
// q's dtype and [Bb, Hb, Nq, Nk] in every layout; its gradient is a fourth
// part of the backward's packed result, [dQ | dK | dV | dBias], viewed by
// a fourth unpack node. Per-sequence lengths (Config.QLens, KLens) are
// integer vector inputs after those, read at every run, without gradient.
// With Config.LSE the Op's single output is the vector [O | LSE], which
// Op.Split views as two nodes whose gradients unpackOp's SymDiff places
// back into one packed gradient; the backward then folds dLSE into D.
// With Config.Cache (a Cache) each run appends k and v to the cache and
// attends q to all it holds; the cache keeps the lengths and block tables,
// and its rows in host memory (NewCache) or, for a NewDeviceCache, in a
// kernels.CacheStore of the Op's backend, made at the first run.
// With Config.BNHD the graph's tensors are [B, N, H, D] and the Op copies
// them, a row of D elements at a time, to and from the kernels' [B, H, N,
// D]. With Config.Dropout each forward run takes the number of runs before
// it as the mask's offset, saved for its backward.
//
// The shapes and dtype an Op is built for are checked again on every run:
// a node whose value was replaced by one of another shape or dtype gets an
// error wrapping kernels.ErrInvalidParams instead of a reinterpretation.
// Constant inputs (gorgonia.NewConstant) are allowed; they receive no
// gradient.
//
// # Saved state
//
// On a backend implementing kernels.Resident (the GPU), the forward also
// keeps its device copies of q, k, v, o and LSE for the backward, which then
// uploads only dO and releases them, so a training step ends holding no
// device memory for attention. The forward keeps them only once SymDiff has
// built the backward nodes, so a graph run only forward holds nothing; a
// forward that runs again releases the state of its previous run;
// Op.Release frees it on demand; and the garbage collector releases what a
// dropped graph still held.
//
// The backward nodes are not themselves differentiable: second derivatives
// of attention are not supported. Gradient checking lives in the
// subpackage gradcheck.
package autograd
