// Package conformance is the one test suite every attention backend must
// pass: the CPU backend and each GPU kernel family call Run from their own
// tests, as gonum's testblas is called by each BLAS implementation.
//
// # What it checks
//
//   - Golden cases: testdata/golden/*.json.gz at the module root, computed by
//     PyTorch in float64 (an independent reference), and the variant cases
//     testdata/variants/*.json.gz (GQA, a local causal window, a cross
//     window, softcap, ALiBi, varlen, an MQA decode with cache lengths, a
//     full bias and one broadcast over the batch; testdata/variants/README.md
//     names them), whose bias cases compare dBias too.
//   - A variant sweep against the float64 reference: GQA ratios 1, 2, 8
//     and all heads on one key head; windows of width 0, one-sided, and with
//     bounds that cut tiles at odd places; softcaps well below large scores;
//     ALiBi; a bias full and broadcast over the batch, the heads or both,
//     with −Inf, +Inf and NaN entries (those of masked pairs must change
//     nothing), and dBias exactly 0 at pairs no head sharing it sees; and
//     all of them at once; causal on and off, Nq = Nk and Nq ≠ Nk. A
//     backend's variant cases run only for the variants it claims
//     (WithVariants); the others skip, naming the variant.
//   - Decode problems, as a key/value cache makes them: 1 to 4 new rows
//     against up to 3000 cached keys, with grouped heads, cache lengths of
//     0 and 1, windows, softcap, ALiBi and NaN and ±Inf in the cache; and
//     each again with its keys in shuffled pages of 16 and 7 keys (the
//     Paged variant, forward only) from a pool whose unused rows are NaN.
//     A backend that does not claim Paged must refuse paged keys with an
//     error.
//   - A sweep of odd sizes against kernels.NaiveForward/NaiveBackward in
//     float64: N in {1, 17, 113, 255, 1023}, D in {8, 24, 40, 64, 80, 128},
//     causal on and off, Nq = Nk and Nq ≠ Nk both ways.
//   - Rows that see no key (causal, Nq > Nk): output, LSE and gradients are
//     0, +Inf and 0, never NaN.
//   - NaN and ±Inf in the inputs (a query row, keys, values, dO; with and
//     without a causal mask, and with rows that see no key): the pattern of
//     NaN and ±Inf in O, LSE, dQ, dK and dV must equal the float64
//     reference's exactly, in every precision, and finite elements meet the
//     tolerances below. Rows that see no key stay 0, +Inf and 0 whatever
//     the other rows hold. The rules are in the kernels package doc.
//   - Determinism: two calls give bit-identical results, dBias summed
//     over broadcast heads included (skipped for a backend configured to
//     sum in a varying order, with NonDeterministic).
//   - Inputs are not modified, and bad slice lengths give an error.
//
// # Tolerances
//
// Float64 results must be within 1e-10 of the reference, relative to the
// reference's largest magnitude. For float32 results no constant is tuned:
// the same inputs go through a naive computation in the backend's precision
// (kernels.Precision), and the backend's error must be at most twice that baseline's
// error, both measured against float64 — FlashAttention's own rule. On top
// comes the larger of two rounding units of the precision's format times
// the output's own magnitude, and two units of the float32 accumulator
// times the error that rounding cannot avoid in the output's formula (its
// floor), from the √n·u bound for sums of n rounded terms, or the
// worst-case n·u for the tensor-core precisions, whose accumulators
// truncate: a whole float32 unit there instead of half (see checks in
// compare.go and roundingAllowance in suite.go). The floor's sums are of
// operands that the baseline and the backend round alike, so their
// difference is in the additions, which are float32 in every precision.
// Without it a gradient that is exactly 0 through cancellation, such as dQ
// when every row sees a single key, would demand an exact zero that only
// the naive summation order happens to produce.
//
// # Test cost
//
// With testing.Short, and in race-detector builds, the sweep keeps N ≤ 255
// and three head dimensions: races depend on the parallel structure, which
// these sizes exercise fully, while the full sweep's float64 reference runs
// past the default test timeout under the detector.
//
// The float64 references and the naive baselines are nearly all of a run's
// work on a GPU backend. A process that runs the suite on several backends
// with the same problems (a GPU's kernel sets) can keep them between runs
// with KeepReferences, so that each is computed once.
package conformance
