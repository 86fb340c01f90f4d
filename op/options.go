package op

import (
	"slices"

	"github.com/gorgonia-flash/flashattention/kernels"
	"gorgonia.org/gorgonia"
)

// Option configures Attention.
type Option func(*config)

type config struct {
	causal     bool
	scale      float64
	scaleSet   bool
	backend    kernels.Backend
	backendSet bool
	device     Device
	deviceSet  bool
	prec       kernels.Precision
	precSet    bool
	window     kernels.Window
	softcap    float64
	alibi      []float64
	qLens      *gorgonia.Node
	kLens      *gorgonia.Node
	dropout    kernels.Dropout
	layout     Layout
	bias       *gorgonia.Node
	biasSet    bool // WithBias was given, so that a nil node is an error, not "no bias"
	cache      *KVCache
	cacheSet   bool // WithKVCache was given, so that a nil cache is an error
}

// WithCausal applies a bottom-right aligned causal mask: query i sees key j
// if and only if j ≤ i + (Nk − Nq).
func WithCausal(causal bool) Option { return func(c *config) { c.causal = causal } }

// WithScale sets the factor applied to Q·Kᵀ before the softmax. The default
// is 1/√D. It must be finite; 0 is allowed and gives uniform attention.
func WithScale(scale float64) Option {
	return func(c *config) { c.scale, c.scaleSet = scale, true }
}

// WithBackend runs the op on b, which the caller owns (and closes). It takes
// precedence over WithDevice, WithPrecision and the environment.
func WithBackend(b kernels.Backend) Option {
	return func(c *config) { c.backend, c.backendSet = b, true }
}

// WithDevice selects where the op runs, overriding FLASHATTN_DEVICE: CPU
// (the pure-Go backend) or GPU (CUDA device 0, in a build with the flashgpu
// tag). See the package documentation for who owns the GPU backend.
func WithDevice(d Device) Option { return func(c *config) { c.device, c.deviceSet = d, true } }

// WithPrecision selects the arithmetic of float32 attention on the GPU,
// overriding FLASHATTN_PRECISION: kernels.FP32 (the default), TF32, BF16 or FP16.
// Float64 attention always computes in float64, and the CPU backend always
// computes float32 exactly, so it ignores the precision.
func WithPrecision(p kernels.Precision) Option {
	return func(c *config) { c.prec, c.precSet = p, true }
}

// WithWindow restricts each query row to a local window of keys: row i sees
// key j if and only if a − left ≤ j ≤ a + right, where a = i + Nk − Nq is
// the row's bottom-right aligned position (as for WithCausal, with which it
// composes: the causal mask then bounds the right side at a). A bound of −1
// leaves that side unbounded; a bound below −1 is an error. The kernels
// visit only the key blocks a window reaches, so a window of w keys costs
// about w/Nk of full attention.
func WithWindow(left, right int) Option {
	return func(c *config) { c.window = kernels.Window{On: true, Left: left, Right: right} }
}

// WithSoftcap caps the scores smoothly: s = cap·tanh(s/cap), applied after
// the scale and before ALiBi and the masks. 0 (the default) is off; a
// negative, NaN or infinite cap is an error.
func WithSoftcap(cap float64) Option { return func(c *config) { c.softcap = cap } }

// WithALiBi adds the linear position bias of ALiBi: the score of query row
// i and key j in head h is lowered by slopes[h]·|a − j|, a = i + Nk − Nq,
// after the softcap. slopes holds one finite slope per query head (H of
// them); the op keeps its own copy. nil is off.
func WithALiBi(slopes []float64) Option {
	return func(c *config) { c.alibi = slices.Clone(slopes) }
}

// WithLengths gives each batch entry its own query and key lengths: qLens
// and kLens are integer vectors [B] (dtype Int, Int32 or Int64) in q's
// graph, read at every run, so one graph serves batches of different
// lengths. Rows i ≥ qLens[b] and keys j ≥ kLens[b] of entry b are padding:
// a padding row's output is 0 and its gradient 0, whatever the incoming
// gradient holds there, a padding key gets dK = dV = 0, and the kernels skip
// padded blocks, so a batch of short sequences costs what its real tokens
// cost. The masks align on the lengths: row i's position is a = i +
// kLens[b] − qLens[b] (bottom-right), for WithCausal, WithWindow and
// WithALiBi alike. Either may be nil (every row, or key, is real). A length
// outside [0, Nq] (or [0, Nk]) is an error at run time; a length of 0 is
// legal and gives zeros. The lengths take no gradient.
func WithLengths(qLens, kLens *gorgonia.Node) Option {
	return func(c *config) { c.qLens, c.kLens = qLens, kLens }
}

// WithDropout drops each attention probability with probability p, in
// [0, 1), and scales the kept ones by 1/(1−p), as attention dropout in
// training does; 0 is off. Use it in the graph you train, and build the
// graph you evaluate or generate with without it.
//
// p is used in steps of 2^−16 (rounded down; a p below 2^−16 drops
// nothing), and the kept probabilities are scaled by the inverse of the
// exact keep probability, within 2^−16 of 1/(1−p) (kernels.Dropout).
//
// The mask is not stored: it is a pure function (Philox4x32-10, see
// kernels.Dropout) of seed, the run and the position (batch entry, head,
// row, key), which the backward draws again. Every run of the node draws a
// fresh mask: run r (counted from 0 for each node, forward runs only) uses
// offset r. So a training loop gets a new mask every step, and a program
// that builds the same graph with the same seed and runs it the same
// number of times draws the same masks: the run is reproducible. A
// different seed per process (or per rank) gives independent masks. The
// CPU draws the same bits as the reference, kernels.Dropout.Kept.
func WithDropout(p float64, seed uint64) Option {
	return func(c *config) { c.dropout = kernels.Dropout{P: p, Seed: seed} }
}

// WithBias adds bias to the scores: s_ij = scale·q_i·k_j (softcapped,
// lowered by ALiBi) + bias[b, h, i, j], before the masks and the softmax.
// bias is a node of q's graph and dtype, of shape [Bb, Hb, Nq, Nk] with Bb
// 1 or B and Hb 1 or H (a dimension of 1 is broadcast over the batch or
// the heads), whatever the layout. Its value is read at every run, in
// place: it is the one Nq×Nk tensor of the op, and the caller's.
//
// The bias is differentiable: its gradient is dS, the gradient of the loss
// with respect to the scores, summed over the broadcast dimensions, and 0
// at the pairs the masks hide and at padding rows and keys (WithLengths);
// it is the only other Nq×Nk tensor the op allocates, and it is
// deterministic, bit for bit, from run to run. A masked key stays masked
// whatever its bias; a −Inf entry removes a key from its row (a row whose
// every visible key has a −Inf bias gets NaN, as naive attention does).
// A nil node, a rank other than 4, a shape that does not broadcast, or a
// dtype other than q's is an error. On the CPU only, for now: the GPU
// refuses it with an error wrapping cudakernels.ErrUnsupported.
func WithBias(bias *gorgonia.Node) Option {
	return func(c *config) { c.bias, c.biasSet = bias, true }
}

// WithKVCache makes k and v the new tokens of cache: each run of the node
// appends them to it and attends q to everything it holds. k and v are
// [B, Hkv, T, D] (T = the prompt's length for a prefill, then 1 per
// generated token) and must match the cache's batch, key heads, head
// dimension and dtype; q is [B, H, T, D]. With WithLengths(qLens, nil)
// sequence b appends only its first qLens[b] tokens, so prompts of
// different lengths share a batch (its rows past qLens[b] are padding).
// The masks align on each sequence's end: with WithCausal(true) new row i
// of sequence b, holding L_b tokens after the append, sees keys
// j ≤ L_b − qLens[b] + i, as in full causal attention over the sequence;
// WithWindow, WithSoftcap and WithALiBi measure from the same positions.
//
// A run that would take a sequence past the capacity is an error that
// appends nothing, and a run that fails for any other reason undoes its
// append: the cache stays as it was. The node is inference only: asking
// for its gradient (gorgonia.Grad, the LispMachine's backward) is an
// error, as are key lengths, dropout, a bias, a nil or closed cache, and
// an op on the GPU (the cache is in host memory).
func WithKVCache(cache *KVCache) Option {
	return func(c *config) { c.cache, c.cacheSet = cache, true }
}
