package native

/*
#include "cpu/kernels_conv.h"
*/
import "C"

// Convolution kernels for channels-last images (kernels_conv.h): an image of
// H×W pixels and C channels is the row-major slice [H, W, C], so a 1×1
// convolution over it is a matrix product over its H·W pixel rows.

// Packed is a weight matrix [Out, In] (PyTorch's Linear / 1×1-conv layout)
// rearranged once for the blocked matrix product of GemmPacked and Conv2D.
type Packed struct {
	Out, In int
	data    []float32
}

// PackMatrix packs w [out, in] (row-major).
func PackMatrix(w []float32, out, in int) Packed {
	check(out > 0 && in > 0, "PackMatrix: empty shape")
	check(len(w) >= out*in, "PackMatrix: w too short")
	p := Packed{Out: out, In: in, data: make([]float32, int(C.vk_conv_packed_len(i64(out), i64(in))))}
	C.vk_conv_pack(fp(p.data), fp(w), i64(out), i64(in))
	return p
}

// Valid reports whether p holds a packed matrix.
func (p Packed) Valid() bool { return p.Out > 0 && len(p.data) > 0 }

// GemmPacked computes y[t, o] = Σ_i x[t, i]·W[o, i] for t < n: x is [n, W.In],
// y is [n, W.Out]; y must not alias x.
func GemmPacked(y, x []float32, w Packed, n int) {
	if n <= 0 {
		return
	}
	check(w.Valid(), "GemmPacked: matrix not packed")
	check(len(x) >= n*w.In, "GemmPacked: x too short")
	check(len(y) >= n*w.Out, "GemmPacked: y too short")
	C.vk_gemm_packed(fp(y), i64(w.Out), fp(x), i64(w.In), fp(w.data), i64(n), i64(w.Out), i64(w.In))
}

// ConvGeom is the geometry of a square-kernel 2-D convolution or pooling:
// input H×W, output OH×OW, kernel K×K, Stride, and the zero padding before
// the first row (PadT) and column (PadL); the padding after is implied.
type ConvGeom struct {
	H, W, OH, OW int
	K, Stride    int
	PadT, PadL   int
}

// SameGeom returns the TF-style 'same' geometry (timm's pad_type='same'):
// OH = ceil(H/stride), total padding max((OH−1)·stride + k − H, 0) with the
// smaller half before. For stride 1 and odd k this is the symmetric k/2.
func SameGeom(h, w, k, stride int) ConvGeom {
	check(h > 0 && w > 0 && k > 0 && stride > 0, "SameGeom: bad shape")
	oh, ow := (h+stride-1)/stride, (w+stride-1)/stride
	ph := max((oh-1)*stride+k-h, 0)
	pw := max((ow-1)*stride+k-w, 0)
	return ConvGeom{H: h, W: w, OH: oh, OW: ow, K: k, Stride: stride, PadT: ph / 2, PadL: pw / 2}
}

func (g ConvGeom) check(op string) {
	check(g.H > 0 && g.W > 0 && g.OH > 0 && g.OW > 0 && g.K > 0 && g.Stride > 0, op+": bad geometry")
	check(g.PadT >= 0 && g.PadL >= 0 && g.PadT < g.K && g.PadL < g.K, op+": bad padding")
	check((g.OH-1)*g.Stride-g.PadT < g.H && (g.OW-1)*g.Stride-g.PadL < g.W, op+": output past the input")
}

// PackConv packs a full convolution's weight w [out, in, k, k] (PyTorch's
// layout) for Conv2D.
func PackConv(w []float32, out, in, k int) Packed {
	check(out > 0 && in > 0 && k > 0, "PackConv: empty shape")
	check(len(w) >= out*in*k*k, "PackConv: w too short")
	// [out, in, ky, kx] -> [out, ky, kx, in]: the im2col column order.
	r := make([]float32, out*in*k*k)
	kk := k * k
	for o := range out {
		src, dst := w[o*in*kk:(o+1)*in*kk], r[o*in*kk:(o+1)*in*kk]
		for i := range in {
			for t := range kk {
				dst[t*in+i] = src[i*kk+t]
			}
		}
	}
	p := PackMatrix(r, out, in*kk)
	return p
}

// Conv2D computes a full (groups = 1) convolution of x [H, W, cin] into
// y [OH, OW, w.Out] with zero padding, plus bias [w.Out] when not nil. w is
// from PackConv with in = cin and k = g.K.
func Conv2D(y, x []float32, w Packed, bias []float32, cin int, g ConvGeom) {
	g.check("Conv2D")
	check(w.Valid() && cin > 0 && w.In == cin*g.K*g.K, "Conv2D: weight does not match cin and kernel")
	check(len(x) >= g.H*g.W*cin, "Conv2D: x too short")
	check(len(y) >= g.OH*g.OW*w.Out, "Conv2D: y too short")
	check(bias == nil || len(bias) >= w.Out, "Conv2D: bias too short")
	var b *C.float
	if bias != nil {
		b = fp(bias)
	}
	C.vk_conv2d(fp(y), fp(x), fp(w.data), b, i64(g.H), i64(g.W), i64(cin), i64(w.Out),
		i64(g.OH), i64(g.OW), C.int(g.K), C.int(g.Stride), C.int(g.PadT), C.int(g.PadL))
}

// DepthwiseWeights rearranges a depthwise weight [c, 1, k, k] (PyTorch's
// layout) into the tap-major [k·k, c] that DepthwiseConv2D takes.
func DepthwiseWeights(w []float32, c, k int) []float32 {
	check(c > 0 && k > 0 && len(w) >= c*k*k, "DepthwiseWeights: w too short")
	kk := k * k
	r := make([]float32, kk*c)
	for ch := range c {
		for t := range kk {
			r[t*c+ch] = w[ch*kk+t]
		}
	}
	return r
}

// DepthwiseConv2D computes y[oy, ox, ch] = Σ x[oy·s − PadT + ky, ox·s − PadL + kx, ch]·
// w[ky·K + kx, ch] over x [H, W, c] with zero padding; y is [OH, OW, c] and
// must not alias x. w is from DepthwiseWeights.
func DepthwiseConv2D(y, x, w []float32, c int, g ConvGeom) {
	g.check("DepthwiseConv2D")
	check(c > 0, "DepthwiseConv2D: c <= 0")
	check(len(w) >= g.K*g.K*c, "DepthwiseConv2D: w too short")
	check(len(x) >= g.H*g.W*c, "DepthwiseConv2D: x too short")
	check(len(y) >= g.OH*g.OW*c, "DepthwiseConv2D: y too short")
	C.vk_dwconv2d(fp(y), fp(x), fp(w), i64(g.H), i64(g.W), i64(c), i64(g.OH), i64(g.OW),
		C.int(g.K), C.int(g.Stride), C.int(g.PadT), C.int(g.PadL))
}

// AvgPool2D averages k×k blocks with stride k (no padding) of x [h, w, c]
// into y [h/k, w/k, c]; h and w must be multiples of k.
func AvgPool2D(y, x []float32, h, w, c, k int) {
	check(h > 0 && w > 0 && c > 0 && k > 0 && h%k == 0 && w%k == 0, "AvgPool2D: bad shape")
	check(len(x) >= h*w*c && len(y) >= h/k*(w/k)*c, "AvgPool2D: x or y too short")
	C.vk_avgpool2d(fp(y), fp(x), i64(h), i64(w), i64(c), C.int(k))
}

// UpsampleConcat writes y [h, w, ca+cb]: channels [0, ca) from a [h, w, ca]
// and channels [ca, ca+cb) from b [bh, bw, cb] resized to h×w by nearest
// neighbour (PyTorch's mode='nearest': source floor(dst·bh/h)).
func UpsampleConcat(y, a []float32, ca int, b []float32, cb, h, w, bh, bw int) {
	check(h > 0 && w > 0 && ca >= 0 && cb >= 0 && bh > 0 && bw > 0, "UpsampleConcat: bad shape")
	check(len(a) >= h*w*ca && len(b) >= bh*bw*cb && len(y) >= h*w*(ca+cb), "UpsampleConcat: slice too short")
	C.vk_upsample_concat(fp(y), fp(a), i64(ca), fp(b), i64(cb), i64(h), i64(w), i64(bh), i64(bw))
}

// CHWToHWC transposes x [c, hw] into y [hw, c].
func CHWToHWC(y, x []float32, c, hw int) {
	check(c > 0 && hw > 0 && len(x) >= c*hw && len(y) >= c*hw, "CHWToHWC: bad shape")
	C.vk_chw_to_hwc(fp(y), fp(x), i64(c), i64(hw))
}

// RMSNormAct is a fused per-pixel RMSNorm over channels: for each row of
// width c, y = act(x/sqrt(mean(x²) + eps)·w)·gamma + res, with act the
// tanh-GELU when gelu is set (identity otherwise), gamma (nil: 1) a
// per-channel scale and res (nil: none) a residual of x's shape. y may alias
// x or res.
func RMSNormAct(y, x, w, gamma, res []float32, c int, eps float32, gelu bool) {
	check(c > 0 && len(x)%c == 0, "RMSNormAct: len(x) is not a multiple of c")
	rows := len(x) / c
	if rows == 0 {
		return
	}
	check(len(y) >= len(x) && len(w) >= c, "RMSNormAct: y or w too short")
	check(gamma == nil || len(gamma) >= c, "RMSNormAct: gamma too short")
	check(res == nil || len(res) >= len(x), "RMSNormAct: res too short")
	var g, r *C.float
	if gamma != nil {
		g = fp(gamma)
	}
	if res != nil {
		r = fp(res)
	}
	ge := C.int(0)
	if gelu {
		ge = 1
	}
	C.vk_rmsnorm_act(fp(y), fp(x), fp(w), g, r, i64(rows), i64(c), C.float(eps), ge)
}

// MQAttention computes unmasked multi-query attention: q and out are
// [nq, heads, d], k and v are [nk, d] (one key/value head for all query
// heads); out[i, h] = softmax_j(scale·q[i, h]·k[j])·v.
func MQAttention(out, q, k, v []float32, nq, heads, nk, d int, scale float32) {
	if nq <= 0 || heads <= 0 {
		return
	}
	check(nk > 0 && d > 0, "MQAttention: bad shape")
	check(len(q) >= nq*heads*d && len(out) >= nq*heads*d, "MQAttention: q or out too short")
	check(len(k) >= nk*d && len(v) >= nk*d, "MQAttention: k or v too short")
	C.vk_mqa(fp(out), fp(q), fp(k), fp(v), i64(nq), i64(heads), i64(nk), i64(d), C.float(scale))
}

// setConvSIMD selects the convolution kernel set (0: portable, 1: AVX2+FMA,
// 2: AVX-512; the best the CPU has up to level) and reports the active one.
// For tests.
func setConvSIMD(level int) int { return int(C.vk_conv_set_simd(C.int(level))) }
