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
//	k, v, dk, dv  [B, Hkv, Nk, D]   (Hkv = Params.KVHeads(), H unless grouped)
//	lse           [B, H, Nq]
//	bias, dbias   [Bb, Hb, Nq, Nk]  (Params.Bias; Bb ∈ {1, B}, Hb ∈ {1, H})
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
// When the loss also depends on the LSE, with gradient dLSE, then since
// ∂LSE_i/∂S_ij = P_ij the same formulas hold with D_i − dLSE_i for D_i.
//
// # Variants
//
// Params has one field per variant of plain attention, each off at its zero
// value, so that the zero Params is plain attention:
//
//   - Hkv (0 means H): grouped-query attention. k and v have Hkv heads, Hkv
//     dividing H; query head h reads key head h/(H/Hkv) (Params.KVHead), and
//     dK, dV of a key head sum over its H/Hkv query heads. A backend never
//     copies K or V per query head.
//   - Dropout (P = 0 is off): each probability P_ij is dropped with
//     probability P and the kept ones scaled by 1/(1−P): O = Z·V with
//     Z = P∘M/(1−P). The mask M is drawn, never stored, from (Seed,
//     Offset, b·H+h, i, j) by Dropout.Kept; the backward draws it again,
//     dV = Zᵀ·dO and dP = (dO·Vᵀ)∘M/(1−P), while D = rowsum(dO∘O) and
//     LSE are those of the undropped softmax.
//   - QLens, KLens (nil means all Nq rows, all Nk keys): per-sequence
//     lengths. Rows i ≥ QLens[b] and keys j ≥ KLens[b] of batch entry b are
//     padding: a padding row sees no key (output 0, LSE +Inf, dQ 0), a
//     padding key is seen by no row (dK = dV = 0). Every other mask aligns
//     on the entry's lengths Lq, Lk (Params.Mask(b)).
//   - Window{On, Left, Right}: with a = i + Lk − Lq the row's bottom-right
//     aligned position (the causal mask's; Lk − Lq = Nk − Nq without
//     lengths), row i sees keys j with
//     a − Left ≤ j ≤ a + Right; a bound of −1 is unbounded on that side.
//     The explicit On keeps Window{} "off" apart from the window (0, 0),
//     which is the diagonal. It composes with Causal, which bounds the right
//     side at a.
//   - Softcap (0 is off): s = Softcap·tanh(s/Softcap).
//   - ALiBi (nil is off): one slope per query head, s = s − ALiBi[h]·|a − j|.
//   - Bias (nil is off): an additive bias [Bb, Hb, Nq, Nk], Bb ∈ {1, B},
//     Hb ∈ {1, H}, broadcast over the dimensions of size 1: s = s +
//     bias[b or 0, h or 0, i, j]. It is the caller's, the only Nq×Nk object
//     of a problem; a backend reads its visible entries in place. Its
//     gradient dBias = dS, the gradient of the loss with respect to S_ij,
//     summed over the broadcast dimensions, is written by the backward when
//     asked for (Bias.Grad32, Grad64), and is exactly 0 at every pair no
//     head sharing the entry sees (masked or padding). A −Inf entry removes
//     a key from its row like a mask, but it is arithmetic, not a mask: a
//     row whose visible keys all have −Inf scores is the all-−Inf row of
//     the rules below (O NaN, LSE −Inf), not a row without keys, and its
//     gradients are NaN as the naive computation's are. A backward that
//     sums dBias over broadcast heads must still be deterministic.
//
// The score of row i and key j is computed in this order, then masked:
//
//	s = scale·q_i·k_j
//	s = Softcap·tanh(s/Softcap)             if Softcap ≠ 0
//	s = s − ALiBi[h]·|a − j|                if ALiBi ≠ nil
//	s = s + bias[b', h', i, j]              if Bias ≠ nil (b' = b or 0, h' = h or 0)
//	S_ij = s if j is visible to i (causal, window), else −∞
//
// and the backward multiplies dS by the softcap's derivative 1 − tanh²
// before it reaches dQ and dK (ModifyScore computes both, for references);
// dBias takes dS before that factor and without the scale.
// Every mask leaves a row a contiguous range of keys, Mask.KeyRange(i) =
// [lo, hi), and a key a contiguous range of rows, Mask.QueryRange(j); both
// bounds grow with i (with j), so a fused backend skips whole blocks outside
// them and a window of w keys costs about w/Nk of full attention.
// Validate refuses an Hkv that does not divide H, a window bound below −1, a
// negative or non-finite Softcap, ALiBi slopes that are not H finite
// numbers, and a bias whose Bb or Hb does not broadcast or whose slices do
// not hold Bb·Hb·Nq·Nk elements (CheckForward and CheckBackward also
// require the data of the call's element type). Backends that do not compute a variant yet refuse it with an
// error (cudakernels: ErrUnsupported), never computing another problem.
//
// Paged keys (Params.Pages, a key/value cache's pool read through block
// tables; forward only) change where keys live, not what is computed:
// Params.KeyRow maps a key to its row, and the naive reference reads
// through it. Decoding splits the keys of problems with few query rows per
// key head: SplitKV picks the number of splits from the problem and a core
// count, and MergePartials combines the splits' outputs through their
// log-sum-exp, exactly (in float64), a split without a visible key being
// empty. A backend with memory of its own (a GPU) may hold a cache's rows
// there: a CacheBackend makes a CacheStore, which the cache's owner
// (autograd.Cache) tells where each new row goes, and whose forward
// appends and attends in one call.
//
// # Masking convention
//
// A causal mask is bottom-right aligned, as in FlashAttention ≥ 2.1: query
// row i sees key j if and only if j ≤ i + (Nk − Nq). When Nq > Nk the first
// Nq − Nk rows see no key at all; a window can leave rows without keys too. Such a row has LSE = +Inf and output 0,
// never NaN, whatever q, k, v and do hold; with finite inputs its gradient
// is 0 too (its dQ row is 0 and it adds nothing to dK or dV). A backend
// must not divide by a zero row sum. Whether a row is such a row is decided
// by the mask alone (Mask.VisibleKeys(i) == 0), never from a row sum of 0
// or a maximum of −Inf, which other rows can reach too.
//
// # NaN and infinities
//
// NaN never becomes a number. Every row that sees a key follows IEEE
// arithmetic on the formulas above, as the naive computation does, with
// LSE the value of log Σ_j exp(S_ij) over the visible keys:
//
//   - a NaN among the row's scores (a NaN in its q, or in a key it sees)
//     gives O = NaN and LSE = NaN for the row;
//   - a +Inf score (and no NaN) gives O = NaN (∞/∞) and LSE = +Inf;
//   - scores that are all −Inf give O = NaN (0/0) and LSE = −Inf;
//   - a ±Inf in a value v_j reaches the columns of O it multiplies, as
//     Σ_j P_ij·v_j does in IEEE arithmetic.
//
// Gradients follow the backward formulas from the saved LSE in the same
// way: a row whose O or LSE is NaN gets a NaN dQ row and spreads NaN into
// dK and dV of every key it sees. The contract is the pattern: where the
// naive float64 computation gives NaN, a backend gives NaN; where it gives
// ±Inf, the same infinity or NaN (an infinity that meets another inside a
// blocked sum, ∞ − ∞, becomes NaN); finite elements are compared with the
// usual tolerances.
//
// The naive computation never touches a masked (row, key) pair. The CPU
// backend keeps that too: a masked key's NaN or ±Inf never reaches the row,
// and a row's never reaches a key it does not see; nor does a bias entry of
// a masked pair, which is never read. Tiled GPU kernels do not:
// they multiply the zero probabilities of a tile that the causal mask cuts
// with every key, value and row of the tile, and 0·NaN = 0·Inf = NaN. With
// non-finite inputs under a causal mask they may therefore give NaN where
// the naive result is finite (never the reverse), as FlashAttention does;
// conformance.MaskedNaNMayPropagate states this exception in the suite.
// Rows that see no key still get O = 0 and LSE = +Inf there.
//
// # Saved state
//
// The forward writes the per-row log-sum-exp LSE = m + log l, where m is the
// row maximum and l the sum of exp(S − m). It is the only statistic the
// backward needs to recompute P block by block.
package kernels
