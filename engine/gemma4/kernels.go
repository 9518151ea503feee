package gemma4

import "math"

// The CPU kernels of the forward pass, on float32 rows. Arithmetic: the dot
// products of the linear layers and of attention accumulate in float32 with
// fused multiply-adds (as transformers' float32 run does on the GPU, whose
// summation order differs); attention's weighted sum of values too; the reductions transformers runs through float32 library
// calls with better-than-naive summation (RMSNorm's mean, softmax's sum) are
// accumulated in float64 and rounded once; transcendental functions (tanh,
// exp, cos, sin, pow) are evaluated in float64 and rounded to float32, i.e.
// correctly rounded or within one float32 ulp of it, like torch's.

// fma32 is a·b + s rounded to float32 (the product is exact in float64, so
// this is a float32 fused multiply-add up to a rare double rounding).
func fma32(a, b, s float32) float32 {
	return float32(math.FMA(float64(a), float64(b), float64(s)))
}

// dot is Σ a[i]·b[i] in float32 with fused multiply-adds, four interleaved
// accumulators (the shape of a vectorised GPU/CPU kernel). Measured against
// the fixtures (forward_test.go), this lies as close to transformers'
// float32 GPU run as float64 accumulation does, and closer than plain
// float32 multiply-then-add (2-3x the error on the tiny model's logits).
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 = fma32(a[i], b[i], s0)
		s1 = fma32(a[i+1], b[i+1], s1)
		s2 = fma32(a[i+2], b[i+2], s2)
		s3 = fma32(a[i+3], b[i+3], s3)
	}
	for ; i < len(a); i++ {
		s0 = fma32(a[i], b[i], s0)
	}
	return (s0 + s1) + (s2 + s3)
}

// matVec writes y = W x for W [len(y), len(x)] row-major (nn.Linear's [out, in]).
func matVec(y, w, x []float32) {
	in := len(x)
	w = w[:len(y)*in]
	for o := range y {
		y[o] = dot(w[o*in:(o+1)*in], x)
	}
}

// rmsNorm writes y = x · (mean(x²) + eps)^(-1/2) · w over one row; w nil is a
// weightless norm (w = 1). y may alias x.
func rmsNorm(y, x, w []float32, eps float64) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	ms := float32(ss / float64(len(x)))
	r := float32(math.Pow(float64(ms+float32(eps)), -0.5))
	for i, v := range x {
		v *= r
		if w != nil {
			v *= w[i]
		}
		y[i] = v
	}
}

// rmsNormHeads applies rmsNorm to each d-wide head of x in place.
func rmsNormHeads(x, w []float32, d int, eps float64) {
	for h := 0; h+d <= len(x); h += d {
		rmsNorm(x[h:h+d], x[h:h+d], w, eps)
	}
}

// geluTanh is 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))), gelu_pytorch_tanh.
func geluTanh(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
}

// gatedGelu writes g[i] = gelu_tanh(g[i]) · u[i].
func gatedGelu(g, u []float32) {
	u = u[:len(g)]
	for i := range g {
		g[i] = geluTanh(g[i]) * u[i]
	}
}

// softmax replaces x by its softmax (-Inf entries get 0).
func softmax(x []float32) {
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	var s float64
	for i, v := range x {
		e := math.Exp(float64(v - m))
		x[i] = float32(e)
		s += e
	}
	for i := range x {
		x[i] = float32(float64(x[i]) / s)
	}
}

// ropeTable is one layer type's rotary frequencies for head width d.
type ropeTable struct {
	d       int
	invFreq []float32 // [d/2]; 0 where a pair does not rotate
}

// newRopeTable computes inv_freq as transformers does in float32: θ^(−2i/d)
// for i < n_rot (n_rot = int(factor·d // 2) for proportional, d/2 for
// default), 0 beyond, divided by rope_parameters' factor.
func newRopeTable(r Rope, d int) ropeTable {
	half := d / 2
	nrot := half
	if r.Type == "proportional" {
		nrot = int(math.Floor(r.PartialRotaryFactor * float64(d) / 2))
	}
	t := ropeTable{d: d, invFreq: make([]float32, half)}
	for i := 0; i < half && i < nrot; i++ {
		t.invFreq[i] = float32(math.Pow(r.Theta, -float64(2*i)/float64(d)) / r.Factor)
	}
	return t
}

// rope rotates each d-wide head of x in place for position pos (NeoX
// convention: dims j and j+d/2 form a pair): x·cos + rotate_half(x)·sin, with
// the angle pos·inv_freq formed in float32 and cos, sin rounded to float32.
func (t *ropeTable) rope(x []float32, pos int) {
	d, half := t.d, t.d/2
	p := float32(pos)
	for j := 0; j < half; j++ {
		if t.invFreq[j] == 0 {
			continue // cos 1, sin 0: the identity
		}
		a := float64(p * t.invFreq[j])
		c, s := float32(math.Cos(a)), float32(math.Sin(a))
		for h := 0; h+d <= len(x); h += d {
			x0, x1 := x[h+j], x[h+j+half]
			x[h+j] = x0*c - x1*s
			x[h+j+half] = x1*c + x0*s
		}
	}
}

// attendHead computes one query head's output over keys [lo, hi) of a cache
// laid out [pos][kvHeads·d]: out = softmax(q·kᵀ) v, scaling 1. scores is
// scratch of at least hi-lo.
func attendHead(out, q []float32, kc, vc []float32, stride, off, lo, hi int, scores []float32) {
	d := len(q)
	sc := scores[:hi-lo]
	for j := lo; j < hi; j++ {
		sc[j-lo] = dot(q, kc[j*stride+off:j*stride+off+d])
	}
	softmax(sc)
	clear(out[:d])
	for j := lo; j < hi; j++ {
		p := sc[j-lo]
		v := vc[j*stride+off : j*stride+off+d]
		for i := range d {
			out[i] = fma32(p, v[i], out[i])
		}
	}
}

// softCap is c · tanh(x / c), in float32 steps as torch runs it.
func softCap(x []float32, c float64) {
	cf := float32(c)
	for i, v := range x {
		x[i] = float32(math.Tanh(float64(v/cf))) * cf
	}
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
