package native

import "math"

// The naive reference: the original pure-Go bodies of the kernels, one
// output element at a time, used by the tests to check the C kernels.

// naiveLinear computes y[t, r] = Σ_c x[t, c]·W[r, c] for t < n.
// x is [n, W.Cols], y is [n, W.Rows]; y must not alias x.
func naiveLinear(y, x []float32, w Matrix, n int) {
	for t := 0; t < n; t++ {
		xr := x[t*w.Cols : (t+1)*w.Cols]
		for r := 0; r < w.Rows; r++ {
			var s float32
			if w.DType == F32 {
				wr := w.F32[r*w.Cols : (r+1)*w.Cols]
				for c, v := range xr {
					s += v * wr[c]
				}
			} else {
				wr := w.BF16[r*w.Cols : (r+1)*w.Cols]
				for c, v := range xr {
					s += v * math.Float32frombits(uint32(wr[c])<<16)
				}
			}
			y[t*w.Rows+r] = s
		}
	}
}

// naiveRMSNorm computes y = x / sqrt(mean(x²) + eps) · w over each row of width
// dim; w == nil means no scale. y may alias x.
func naiveRMSNorm(y, x, w []float32, dim int, eps float32) {
	for o := 0; o+dim <= len(x); o += dim {
		var ss float32
		for _, v := range x[o : o+dim] {
			ss += v * v
		}
		inv := float32(1 / math.Sqrt(float64(ss/float32(dim)+eps)))
		for i := 0; i < dim; i++ {
			if w != nil {
				y[o+i] = x[o+i] * inv * w[i]
			} else {
				y[o+i] = x[o+i] * inv
			}
		}
	}
}

// naiveRowRMS writes out[r] = sqrt(max(mean(x_r²), floor)) for each row of width dim.
func naiveRowRMS(out, x []float32, dim int, floor float32) {
	for r := range out {
		var ss float32
		for _, v := range x[r*dim : (r+1)*dim] {
			ss += v * v
		}
		m := ss / float32(dim)
		if m < floor {
			m = floor
		}
		out[r] = float32(math.Sqrt(float64(m)))
	}
}

// naiveScaleRows multiplies row r (width dim) of x by s[r], in place.
func naiveScaleRows(x, s []float32, dim int) {
	for r := range s {
		for i := r * dim; i < (r+1)*dim; i++ {
			x[i] *= s[r]
		}
	}
}

// naiveRoPE rotates x [n, heads, headDim] in place with the rotate-half (NeoX)
// convention: position pos[t], frequencies invFreq[headDim/2].
func naiveRoPE(x []float32, pos []int32, heads, headDim int, invFreq []float32) {
	half := headDim / 2
	for t, p := range pos {
		for h := 0; h < heads; h++ {
			b := (t*heads + h) * headDim
			for i := 0; i < half; i++ {
				f := float32(p) * invFreq[i]
				c := float32(math.Cos(float64(f)))
				s := float32(math.Sin(float64(f)))
				a, bb := x[b+i], x[b+half+i]
				x[b+i] = a*c - bb*s
				x[b+half+i] = bb*c + a*s
			}
		}
	}
}

// naiveAttention computes causal (optionally sliding-window) attention; see AttnParams.
func naiveAttention(out, q, k, v []float32, p AttnParams) {
	d := p.HeadDim
	group := p.HeadsQ / p.HeadsKV
	sc := make([]float32, p.NK)
	for i := 0; i < p.NQ; i++ {
		qp := int(p.QPos[i])
		lo := 0
		if p.Window > 0 && qp-p.Window+1 > lo {
			lo = qp - p.Window + 1
		}
		hi := qp
		if hi > p.NK-1 {
			hi = p.NK - 1
		}
		for h := 0; h < p.HeadsQ; h++ {
			kh := h / group
			qv := q[(i*p.HeadsQ+h)*d : (i*p.HeadsQ+h+1)*d]
			m := float32(math.Inf(-1))
			for j := lo; j <= hi; j++ {
				kv := k[(j*p.HeadsKV+kh)*d : (j*p.HeadsKV+kh+1)*d]
				var s float32
				for c := range qv {
					s += qv[c] * kv[c]
				}
				s *= p.Scale
				sc[j] = s
				if s > m {
					m = s
				}
			}
			var sum float32
			for j := lo; j <= hi; j++ {
				sc[j] = float32(math.Exp(float64(sc[j] - m)))
				sum += sc[j]
			}
			o := out[(i*p.HeadsQ+h)*d : (i*p.HeadsQ+h+1)*d]
			for c := range o {
				o[c] = 0
			}
			for j := lo; j <= hi; j++ {
				w := sc[j] / sum
				vv := v[(j*p.HeadsKV+kh)*d : (j*p.HeadsKV+kh+1)*d]
				for c := range o {
					o[c] += w * vv[c]
				}
			}
		}
	}
}

func naiveGelu(x float32) float32 {
	const c = 0.7978845608028654 // sqrt(2/pi)
	return 0.5 * x * (1 + float32(math.Tanh(float64(c*(x+0.044715*x*x*x)))))
}

// naiveGeluTanh applies tanh-approximated GELU in place.
func naiveGeluTanh(x []float32) {
	for i, v := range x {
		x[i] = naiveGelu(v)
	}
}

// naiveGeluMul computes g = gelu_tanh(g)·u elementwise, in place in g.
func naiveGeluMul(g, u []float32) {
	for i := range g {
		g[i] = naiveGelu(g[i]) * u[i]
	}
}

// naiveSparseGeluMul applies Gemma 3n's Gaussian top-k to each row of g (width
// dim): g = relu(g − (mean + std·z)) with population std, then
// g = gelu_tanh(g)·u, in place in g.
func naiveSparseGeluMul(g, u []float32, dim int, z float32) {
	for o := 0; o < len(g); o += dim {
		row := g[o : o+dim]
		var s float32
		for _, v := range row {
			s += v
		}
		mu := s / float32(dim)
		var vs float32
		for _, v := range row {
			vs += (v - mu) * (v - mu)
		}
		sd := float32(math.Sqrt(float64(vs / float32(dim))))
		cut := mu + sd*z
		for i, v := range row {
			v -= cut
			if v < 0 {
				v = 0
			}
			row[i] = naiveGelu(v) * u[o+i]
		}
	}
}

// naiveSoftcap computes x = cap·tanh(x/cap) in place.
func naiveSoftcap(x []float32, cap float32) {
	for i, v := range x {
		x[i] = cap * float32(math.Tanh(float64(v/cap)))
	}
}

// naiveTanh applies tanh in place.
func naiveTanh(x []float32) {
	for i, v := range x {
		x[i] = float32(math.Tanh(float64(v)))
	}
}

// naiveAdd computes y = a + b elementwise; y may alias a or b.
func naiveAdd(y, a, b []float32) {
	for i := range y {
		y[i] = a[i] + b[i]
	}
}

// naiveMul computes y = a·b elementwise; y may alias a or b.
func naiveMul(y, a, b []float32) {
	for i := range y {
		y[i] = a[i] * b[i]
	}
}

// naiveMulRows multiplies every row (width len(w)) of x by w elementwise, in place.
func naiveMulRows(x, w []float32) {
	d := len(w)
	for o := 0; o < len(x); o += d {
		for i := 0; i < d; i++ {
			x[o+i] *= w[i]
		}
	}
}

// naiveScale computes x = x·s in place.
func naiveScale(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}

// naiveAddScaled computes y[i] = (y[i] + a[i])·s in place.
func naiveAddScaled(y, a []float32, s float32) {
	for i := range y {
		y[i] = (y[i] + a[i]) * s
	}
}

// naiveAltUpPredict mixes the four AltUp streams. h and pred are [4, n, d]
// (stream-major); coef is [n, 16] with A[j][k] = coef[t*16 + 4j + k]:
// pred_j[t] = h_j[t] + Σ_k A[j][k]·h_k[t].
func naiveAltUpPredict(pred, h, coef []float32, n, d int) {
	for j := 0; j < 4; j++ {
		for t := 0; t < n; t++ {
			a := coef[t*16+4*j : t*16+4*j+4]
			for i := 0; i < d; i++ {
				s := h[(j*n+t)*d+i]
				for k := 0; k < 4; k++ {
					s += a[k] * h[(k*n+t)*d+i]
				}
				pred[(j*n+t)*d+i] = s
			}
		}
	}
}

// naiveAltUpCorrect computes out_i[t] = pred_i[t] + c[t*4+i]·(act[t] − pred_0[t])
// for the four streams; out and pred are [4, n, d], act is [n, d], c is [n, 4].
// out may alias pred.
func naiveAltUpCorrect(out, pred, act, c []float32, n, d int) {
	for t := 0; t < n; t++ {
		for x := 0; x < d; x++ {
			inn := act[t*d+x] - pred[t*d+x]
			for i := 0; i < 4; i++ {
				out[(i*n+t)*d+x] = pred[(i*n+t)*d+x] + c[t*4+i]*inn
			}
		}
	}
}

// naiveLogSumExp writes out[r] = log Σ exp(x_r) for each row of width dim.
func naiveLogSumExp(out, x []float32, dim int) {
	for r := range out {
		row := x[r*dim : (r+1)*dim]
		m := row[0]
		for _, v := range row {
			if v > m {
				m = v
			}
		}
		var s float64
		for _, v := range row {
			s += math.Exp(float64(v - m))
		}
		out[r] = m + float32(math.Log(s))
	}
}

// naiveArgmax writes out[r] = the index of the largest element of each row of
// width dim (the lowest index on ties).
func naiveArgmax(out []int32, x []float32, dim int) {
	for r := range out {
		row := x[r*dim : (r+1)*dim]
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		out[r] = int32(best)
	}
}

// naiveAddConst computes x += c.
func naiveAddConst(x []float32, c float32) {
	for i := range x {
		x[i] += c
	}
}

// naiveDiv computes y = a/b elementwise.
func naiveDiv(y, a, b []float32) {
	for i := range y {
		y[i] = a[i] / b[i]
	}
}

// naiveBF16ToF32 widens bfloat16 bits to float32.
func naiveBF16ToF32(dst []float32, src []uint16) {
	for i, v := range src {
		dst[i] = math.Float32frombits(uint32(v) << 16)
	}
}
