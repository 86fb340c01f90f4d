package conformance

import (
	"math"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// result holds the outputs of one forward and backward pass; dbias is nil
// without a bias. mass, in a reference's result only, is the largest
// column mass of its P (columnMass), which the checks' floors read: it
// costs as much as the reference's forward, so it is found once per
// problem rather than once per check.
type result[T kernels.Float] struct {
	o, lse, dq, dk, dv, dbias []T
	mass                      float64
}

// naive32 is the baseline for precision prec: attention as an eager
// framework computes it in float32, one row at a time, with the rounding of
// prec applied to matrix-product operands and results (see
// rounding). For FP32 it is kernels.NaiveForward/Backward in
// float32 with D taken from P·dP, as autograd of softmax computes it. With
// a bias, p must hold its float32 data; dBias is dS rounded as stored,
// summed in head order.
func naive32(p kernels.Params, prec kernels.Precision, q, k, v, do, dlse []float32) result[float32] {
	kept, digest, ok := baselines.get(p, prec, [][]float32{q, k, v, do, dlse})
	if ok {
		return kept
	}
	r := naiveProducts(p, prec, nil, q, k, v, do, dlse)
	baselines.put(p, prec, digest, r, resultBytes(r))
	return r
}

// naiveProducts is naive32 with every multiplication of a matrix product's
// operands taken by mul, so that a test can ask what error another scheme
// of products would give the same naive computation (study_test.go). A nil
// mul is the plain float32 product, written inline: through a function
// value per product, the baseline took 3.5 times as long as the float64
// reference and 61 % of the CPU backend's whole suite (dev, 2026-12-05),
// and every GPU suite computes it for every case too.
func naiveProducts(p kernels.Params, prec kernels.Precision, mul func(a, b float32) float32, q, k, v, do, dlse []float32) result[float32] {
	in, out := rounding(prec)
	r := result[float32]{
		o: make([]float32, p.QLen()), lse: make([]float32, p.LSELen()),
		dq: make([]float32, p.QLen()), dk: make([]float32, p.KLen()), dv: make([]float32, p.KLen()),
	}
	if p.Bias != nil {
		r.dbias = make([]float32, p.BiasLen())
	}
	rnd := func(x []float32) []float32 {
		y := make([]float32, len(x))
		for i, xi := range x {
			y[i] = in(xi)
		}
		return y
	}
	qr, kr, vr, dor := rnd(q), rnd(k), rnd(v), rnd(do)
	// Each product is rounded to float32 before it is summed (the
	// conversion forbids fusing the two into an FMA), as mul's result is.
	dot := func(a, b []float32) float32 {
		var s float32
		if mul == nil {
			for i, x := range a {
				s += float32(x * b[i])
			}
			return s
		}
		for i, x := range a {
			s += mul(x, b[i])
		}
		return s
	}
	// axpy adds a·x to y elementwise, a product at a time.
	axpy := func(y []float32, a float32, x []float32) {
		if mul == nil {
			for d, xd := range x {
				y[d] += float32(a * xd)
			}
			return
		}
		for d, xd := range x {
			y[d] += mul(a, xd)
		}
	}
	scale := float32(p.Scale)
	pr := make([]float32, p.Nk) // P of one row, rounded as stored
	dsr, grad := make([]float32, p.Nk), make([]float32, p.Nk)
	keep := make([]float32, p.Nk) // dropout's factor per key: 1/(1−p) or 0; 1 without dropout
	for bh := range p.B * p.H {
		qOff, kOff := bh*p.Nq*p.D, p.KVHead(bh)*p.Nk*p.D
		row := func(t []float32, off, i int) []float32 { return t[off+i*p.D : off+(i+1)*p.D] }
		mask := p.Mask(bh / p.H)
		for i := range p.Nq {
			lo, hi := mask.KeyRange(i)
			if lo == hi {
				r.lse[bh*p.Nq+i] = float32(math.Inf(1))
				continue
			}
			m := float32(math.Inf(-1))
			for j := lo; j < hi; j++ {
				pr[j], grad[j] = kernels.ModifyScore(p, bh, i, j, out(scale*dot(row(qr, qOff, i), row(kr, kOff, j))))
				m = max(m, pr[j])
			}
			var l float32
			for j := lo; j < hi; j++ {
				pr[j] = float32(math.Exp(float64(pr[j] - m)))
				l += pr[j]
			}
			for j := lo; j < hi; j++ {
				pr[j] = out(pr[j] / l)
				keep[j] = 1
				if p.Dropout.On() {
					keep[j] = 0
					if p.Dropout.Kept(bh, i, j) {
						keep[j] = float32(p.Dropout.KeepScale())
					}
				}
			}
			r.lse[bh*p.Nq+i] = m + float32(math.Log(float64(l)))
			if math.IsInf(float64(m), 0) { // as in kernels.NaiveForward
				r.lse[bh*p.Nq+i] = m
			}
			oi := row(r.o, qOff, i)
			for j := lo; j < hi; j++ {
				axpy(oi, in(pr[j]*keep[j]), row(vr, kOff, j))
			}
			for d := range oi {
				oi[d] = out(oi[d])
			}
			// Backward of this row.
			doi := row(dor, qOff, i)
			var rowD float32
			for j := lo; j < hi; j++ {
				dsr[j] = out(dot(doi, row(vr, kOff, j))) * keep[j] // dP
				rowD += pr[j] * dsr[j]
			}
			if dlse != nil {
				rowD -= dlse[bh*p.Nq+i] // as in kernels.NaiveBackward
			}
			dqi := row(r.dq, qOff, i)
			for j := lo; j < hi; j++ {
				if r.dbias != nil {
					r.dbias[p.BiasOffset(bh)+i*p.Nk+j] += out(pr[j] * (dsr[j] - rowD))
				}
				ds := in(out(pr[j] * (dsr[j] - rowD) * grad[j]))
				axpy(dqi, ds, row(kr, kOff, j))
				axpy(row(r.dk, kOff, j), ds, row(qr, qOff, i))
				axpy(row(r.dv, kOff, j), in(pr[j]*keep[j]), doi)
			}
			for d := range dqi {
				dqi[d] = out(scale * dqi[d])
			}
		}
	}
	for i := range r.dk {
		r.dk[i] = out(scale * r.dk[i])
		r.dv[i] = out(r.dv[i])
	}
	for i := range r.dbias {
		r.dbias[i] = out(r.dbias[i])
	}
	return r
}
