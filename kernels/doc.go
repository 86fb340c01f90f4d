// Package kernels defines what every attention backend of this module
// computes, independently of Gorgonia: the problem description (Params), the
// contract a backend implements (Backend), and the plain row-by-row
// computation (NaiveForward, NaiveBackward) that serves as the float64
// reference and as the precision baseline for derived tolerances.
//
// # Shapes
//
// All tensors are dense, row-major and contiguous:
//
//	q, o, dq, do  [B, H, Nq, D]
//	k, v, dk, dv  [B, H, Nk, D]
//	lse           [B, H, Nq]
//
// # Semantics
//
// For every batch b and head h,
//
//	S   = scale · Q·Kᵀ + mask          (Nq × Nk, never stored by fast backends)
//	LSE = log Σ_j exp(S_ij)            (per row)
//	O   = exp(S − LSE) · V
//
// The backward takes dO, the gradient of the loss with respect to O, and
// returns dQ, dK and dV. With P = exp(S − LSE) and D_i = Σ_d dO_id·O_id:
//
//	dV = Pᵀ·dO,  dP = dO·Vᵀ,  dS = P∘(dP − D),  dQ = scale·dS·K,  dK = scale·dSᵀ·Q
//
// # Masking convention
//
// A causal mask is bottom-right aligned, as in FlashAttention ≥ 2.1: query
// row i sees key j if and only if j ≤ i + (Nk − Nq). When Nq > Nk the first
// Nq − Nk rows see no key at all. Such a row has LSE = +Inf, output 0 and
// gradient 0, never NaN; a backend must not divide by a zero row sum.
//
// # Saved state
//
// The forward writes the per-row log-sum-exp LSE = m + log l, where m is the
// row maximum and l the sum of exp(S − m). It is the only statistic the
// backward needs to recompute P block by block.
package kernels
