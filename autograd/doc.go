// Package autograd is the Gorgonia side of attention's backward pass: the op
// that recomputes the gradients from the forward's saved statistics, and a
// finite-difference gradient checker that works on any Gorgonia graph.
//
// # The backward op
//
// Package op's forward saves only the per-row log-sum-exp LSE = m + log l
// (shape [B, H, Nq]) in a Saved value shared with its backward, the way
// gorgonia's maxPoolOp shares its mask with maxPoolDiffOp. Gradient builds
// one node that runs the backend's backward on (Q, K, V, O, dO) and that
// LSE, and three nodes that copy dQ, dK and dV out of its packed result
// (Gorgonia ops have a single output). Nothing of size Nq×Nk exists at any
// point; the packed result has the size of Q, K and V together.
//
// On a backend implementing kernels.Resident, Saved also carries the
// forward's device copies of Q, K, V, O and LSE from the forward to the
// backward, which then uploads only dO and releases them; see Saved for
// the whole lifetime. The forward keeps them only once Gradient has been
// called, so graphs run only forward hold no device memory. The three
// gradient nodes are views of the packed result, not copies.
//
// Values computes the same three tensors directly, for ops' DoDiff under
// gorgonia's LispMachine.
//
// The backward nodes are not themselves differentiable: second derivatives
// of attention are not supported.
//
// # Gradient checking
//
// CheckGrad compares the gradients Gorgonia computes for any scalar float64
// cost against central finite differences, element by element, and returns a
// GradReport naming the worst element (input, index, analytic and numeric
// value, error); report.Err() is nil when every element is within
// atol + rtol·|numeric|. By default it uses gorgonia.Grad and a TapeMachine
// (adding gradient nodes to the graph, or reusing those of an earlier Grad);
// WithLispMachine checks the ops' DoDiff instead. Inputs are restored
// exactly. Call gorgonia.Grad before CheckGrad, not after, on graphs whose
// gradient nodes are themselves not differentiable (such as attention's).
package autograd
