// Package gradcheck checks the gradients Gorgonia computes for any graph
// against central finite differences. It has no tie to attention: use it on
// your own ops and models.
//
// Check takes a scalar float64 cost and the input nodes to differentiate
// with respect to, computes the analytic gradients (gorgonia.Grad on a
// TapeMachine by default, or each op's DoDiff with WithLispMachine), then
// perturbs every element of every input by ± h·max(1, |x|) and compares. It
// returns a Report naming the worst element of each input and overall
// (input, index, analytic and numeric value, error); report.Err() is nil
// when every element is within atol + rtol·|numeric|. WithStep,
// WithTolerance and WithMaxElements (a reproducible random subset of
// elements, for large inputs) change the defaults, whose derivation is
// given beside DefaultStep.
//
// Inputs are restored exactly, whatever happens. Call gorgonia.Grad before
// Check, not after, on graphs whose gradient nodes are themselves not
// differentiable (such as attention's): Check then reuses those nodes.
package gradcheck
