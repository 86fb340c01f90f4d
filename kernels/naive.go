package kernels

import "math"

// NaiveForward computes attention row by row in the precision of T: the
// scores of one query row, their maximum, the exponentials, and the weighted
// sum of values, each summed left to right. Instantiated with float64 it is
// the reference every backend is checked against; instantiated with float32
// it is the baseline whose error defines the float32 tolerance.
//
// It keeps one row of Nk scores, never an Nq×Nk matrix, but it is slow: use a
// Backend for real work.
func NaiveForward[T Float](p Params, q, k, v, o, lse []T) error {
	if err := CheckForward(p, q, k, v, o, lse); err != nil {
		return err
	}
	scale := T(p.Scale)
	s := make([]T, p.Nk)
	for bh := range p.B * p.H {
		kv := p.KVHead(bh)
		qh := q[bh*p.Nq*p.D:]
		oh, lh := o[bh*p.Nq*p.D:], lse[bh*p.Nq:]
		mask := p.Mask(bh / p.H)
		for i := range p.Nq {
			oi := oh[i*p.D : (i+1)*p.D]
			clear(oi)
			lo, hi := mask.KeyRange(i)
			if lo == hi {
				lh[i] = T(math.Inf(1))
				continue
			}
			qi := qh[i*p.D : (i+1)*p.D]
			// The built-in max returns NaN when either operand is NaN, so a
			// NaN score makes m, and through it l, O and LSE, NaN.
			m := T(math.Inf(-1))
			for j := lo; j < hi; j++ {
				at := p.KeyRow(kv, j) // dense or paged
				s[j], _ = ModifyScore(p, bh, i, j, scale*dot(qi, k[at:at+p.D]))
				m = max(m, s[j])
			}
			var l T
			for j := lo; j < hi; j++ {
				s[j] = T(math.Exp(float64(s[j] - m)))
				l += s[j]
			}
			for j := lo; j < hi; j++ {
				pj := s[j] / l
				if p.Dropout.On() {
					pj = dropped(p.Dropout, bh, i, j, pj)
				}
				at := p.KeyRow(kv, j)
				for d, vd := range v[at : at+p.D] {
					oi[d] += pj * vd
				}
			}
			// With m = ±Inf, exp(S − m) is NaN at the scores equal to m, so
			// l and O are NaN (∞/∞ or 0/0), but log Σ exp(S) is m itself.
			lh[i] = m + T(math.Log(float64(l)))
			if math.IsInf(float64(m), 0) {
				lh[i] = m
			}
		}
	}
	return nil
}

// NaiveBackward computes dq, dk and dv row by row in the precision of T from
// the saved lse, following the formulas in the package documentation; dlse,
// when not nil, is the gradient with respect to the LSE. With a bias whose
// Grad of type T is not nil it writes dBias there too: dS before the
// softcap's derivative and the scale, summed over the heads that share a
// slice in head order.
func NaiveBackward[T Float](p Params, q, k, v, o, lse, do, dlse, dq, dk, dv []T) error {
	if err := CheckBackward(p, q, k, v, o, lse, do, dlse, dq, dk, dv); err != nil {
		return err
	}
	clear(dq)
	clear(dk)
	clear(dv)
	dbias := BiasGrad[T](p.Bias)
	clear(dbias)
	scale := T(p.Scale)
	pr, grad := make([]T, p.Nk), make([]T, p.Nk)
	for bh := range p.B * p.H {
		// dK and dV of a key head sum over the query heads that read it.
		qOff, kOff := bh*p.Nq*p.D, p.KVHead(bh)*p.Nk*p.D
		mask := p.Mask(bh / p.H)
		for i := range p.Nq {
			lo, hi := mask.KeyRange(i)
			row := qOff + i*p.D
			qi, oi, doi, dqi := q[row:row+p.D], o[row:row+p.D], do[row:row+p.D], dq[row:row+p.D]
			rowD := dot(doi, oi)
			if dlse != nil && lo < hi {
				// ∂LSE_i/∂s_ij = P_ij: dS gains P_ij·dLSE_i, which is D_i
				// lowered by dLSE_i. A row without keys has no gradient.
				rowD -= dlse[bh*p.Nq+i]
			}
			for j := lo; j < hi; j++ {
				kj := k[kOff+j*p.D : kOff+(j+1)*p.D]
				var s T
				s, grad[j] = ModifyScore(p, bh, i, j, scale*dot(qi, kj))
				pr[j] = T(math.Exp(float64(s - lse[bh*p.Nq+i])))
			}
			for j := lo; j < hi; j++ {
				at := kOff + j*p.D
				kj, vj := k[at:at+p.D], v[at:at+p.D]
				dkj, dvj := dk[at:at+p.D], dv[at:at+p.D]
				// With dropout O = Z·V, Z = P∘M/(1−p): dV takes Z, and
				// dP = dZ∘M/(1−p) with dZ = dO·Vᵀ; D = Σ dO∘O is still
				// Σ_j P_ij·dP_ij. The softcap's derivative turns the
				// gradient of the capped score into that of scale·q·k.
				dp, z := dot(doi, vj), pr[j]
				if p.Dropout.On() {
					dp, z = dropped(p.Dropout, bh, i, j, dp), dropped(p.Dropout, bh, i, j, z)
				}
				ds := pr[j] * (dp - rowD)
				if dbias != nil {
					// The bias is added to the score after the softcap:
					// its gradient is dS itself.
					dbias[p.BiasOffset(bh)+i*p.Nk+j] += ds
				}
				ds *= grad[j]
				for d := range p.D {
					dvj[d] += z * doi[d]
					dqi[d] += scale * ds * kj[d]
					dkj[d] += scale * ds * qi[d]
				}
			}
		}
	}
	return nil
}

// dropped is x times entry (bh, i, j)'s dropout factor: 1/(1−P) when the
// entry is kept, else 0.
func dropped[T Float](d Dropout, bh, i, j int, x T) T {
	if d.Kept(bh, i, j) {
		return x * T(d.KeepScale())
	}
	return 0
}

func dot[T Float](a, b []T) T {
	var s T
	for i, x := range a {
		s += x * b[i]
	}
	return s
}
