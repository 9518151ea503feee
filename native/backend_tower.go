package native

/*
#include "backend_call.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// The vision tower's operations of a stream (backend.h): channels-last
// images as tensors [h·w, c], packed weights from Bound.Packed. Each gives
// the bits of the slice kernel of the same name (GemmPacked, Conv2D, ...)
// on the built-in backend.

// Packed binds a packed weight matrix (PackMatrix, PackConv) and returns
// it as an F32 tensor [p.Out, p.In] in the packed layout, for Pointwise
// and Conv2D only.
func (w *Bound) Packed(p Packed) (Tensor, error) {
	if !p.Valid() {
		return Tensor{}, fmt.Errorf("native: Bound.Packed: matrix not packed")
	}
	buf, err := w.bind(unsafe.Pointer(unsafe.SliceData(p.data)), 4*len(p.data))
	if err != nil {
		return Tensor{}, err
	}
	t := buf.Tensor(0, F32, 0, 0)
	t.t.rows, t.t.cols = C.int64_t(p.Out), C.int64_t(p.In)
	return t, nil
}

func (g ConvGeom) c(c int) C.vd_conv {
	return C.vd_conv{h: C.int64_t(g.H), w: C.int64_t(g.W), c: C.int64_t(c), oh: C.int64_t(g.OH), ow: C.int64_t(g.OW),
		k: C.int32_t(g.K), stride: C.int32_t(g.Stride), pad_t: C.int32_t(g.PadT), pad_l: C.int32_t(g.PadL)}
}

// Pointwise is GemmPacked over tensors: y [n, w.Rows()] = x [n, w.Cols()]·wᵀ
// with w from Bound.Packed; y must not alias x.
func (s *Stream) Pointwise(y, x, w Tensor) {
	if x.Rows() == 0 {
		return
	}
	check(w.DType() == F32 && x.Cols() == w.Cols() && y.Rows() == x.Rows() && y.Cols() == w.Rows(), "Stream.Pointwise: shapes differ")
	if s.be.lacks[OpPointwise] {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.Pointwise(h[0], h[1], h[2]) }, y, x, w)
		return
	}
	C.vdc_pointwise(s.be.t, s.s, y.t, x.t, w.t)
}

// Conv2D is Conv2D over tensors: x [g.H·g.W, cin], y [g.OH·g.OW, w.Rows()],
// w from Bound.Packed of PackConv (w.Cols() = g.K·g.K·cin), bias [1,
// w.Rows()] or the zero tensor.
func (s *Stream) Conv2D(y, x, w, bias Tensor, g ConvGeom) {
	g.check("Stream.Conv2D")
	cin := x.Cols()
	check(cin > 0 && x.Rows() == g.H*g.W && w.Cols() == cin*g.K*g.K, "Stream.Conv2D: weight does not match the input's channels and the kernel")
	check(y.Rows() == g.OH*g.OW && y.Cols() == w.Rows(), "Stream.Conv2D: output shape")
	check(bias.Nil() || bias.Len() >= w.Rows(), "Stream.Conv2D: bias too short")
	if s.be.lacks[OpConv2D] {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.Conv2D(h[0], h[1], h[2], h[3], g) }, y, x, w, bias)
		return
	}
	C.vdc_conv2d(s.be.t, s.s, y.t, x.t, w.t, bias.t, g.c(cin))
}

// DepthwiseConv2D is DepthwiseConv2D over tensors: x [g.H·g.W, c], y
// [g.OH·g.OW, c], w [g.K·g.K, c] (DepthwiseWeights); y must not alias x.
func (s *Stream) DepthwiseConv2D(y, x, w Tensor, g ConvGeom) {
	g.check("Stream.DepthwiseConv2D")
	c := x.Cols()
	check(c > 0 && x.Rows() == g.H*g.W && y.Rows() == g.OH*g.OW && y.Cols() == c, "Stream.DepthwiseConv2D: shapes differ")
	check(w.Len() >= g.K*g.K*c, "Stream.DepthwiseConv2D: w too short")
	if s.be.lacks[OpDWConv2D] {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.DepthwiseConv2D(h[0], h[1], h[2], g) }, y, x, w)
		return
	}
	C.vdc_dwconv2d(s.be.t, s.s, y.t, x.t, w.t, g.c(c))
}

// NormAct is RMSNormAct over tensors: rows of width dim, gamma and res
// skipped when Nil; y may alias x or res.
func (s *Stream) NormAct(y, x, w, gamma, res Tensor, dim int, eps float32, gelu bool) {
	if x.Len() == 0 {
		return
	}
	check(dim > 0 && x.Len()%dim == 0 && y.Len() == x.Len() && w.Len() >= dim, "Stream.NormAct: shapes differ")
	check(gamma.Nil() || gamma.Len() >= dim, "Stream.NormAct: gamma too short")
	check(res.Nil() || res.Len() >= x.Len(), "Stream.NormAct: res too short")
	ge := C.int(0)
	if gelu {
		ge = 1
	}
	if s.be.lacks[OpNormAct] {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.NormAct(h[0], h[1], h[2], h[3], h[4], dim, eps, gelu) }, y, x, w, gamma, res)
		return
	}
	C.vdc_norm_act(s.be.t, s.s, y.t, x.t, w.t, gamma.t, res.t, C.int64_t(dim), C.float(eps), ge)
}

// AvgPool2D is AvgPool2D over tensors: x [h·w, c], y [(h/k)·(w/k), c].
func (s *Stream) AvgPool2D(y, x Tensor, h, w, k int) {
	c := x.Cols()
	check(h > 0 && w > 0 && c > 0 && k > 0 && h%k == 0 && w%k == 0, "Stream.AvgPool2D: bad shape")
	check(x.Rows() == h*w && y.Rows() == h/k*(w/k) && y.Cols() == c, "Stream.AvgPool2D: shapes differ")
	if s.be.lacks[OpAvgPool2D] {
		hh := h
		s.onCPU(1, func(c *Stream, h []Tensor) { c.AvgPool2D(h[0], h[1], hh, w, k) }, y, x)
		return
	}
	C.vdc_avgpool2d(s.be.t, s.s, y.t, x.t, C.int64_t(h), C.int64_t(w), C.int64_t(c), C.int64_t(k))
}

// UpsampleConcat is UpsampleConcat over tensors: a [h·w, ca], b [bh·bw, cb],
// y [h·w, ca+cb].
func (s *Stream) UpsampleConcat(y, a, b Tensor, h, w, bh, bw int) {
	check(h > 0 && w > 0 && bh > 0 && bw > 0, "Stream.UpsampleConcat: bad shape")
	check(a.Rows() == h*w && b.Rows() == bh*bw && y.Rows() == h*w && y.Cols() == a.Cols()+b.Cols(), "Stream.UpsampleConcat: shapes differ")
	if s.be.lacks[OpUpsampleConcat] {
		hh := h
		s.onCPU(1, func(c *Stream, h []Tensor) { c.UpsampleConcat(h[0], h[1], h[2], hh, w, bh, bw) }, y, a, b)
		return
	}
	C.vdc_upsample_concat(s.be.t, s.s, y.t, a.t, b.t, C.int64_t(h), C.int64_t(w), C.int64_t(bh), C.int64_t(bw))
}

// Transpose writes y [x.Cols(), x.Rows()] = xᵀ (CHWToHWC over tensors).
func (s *Stream) Transpose(y, x Tensor) {
	if x.Len() == 0 {
		return
	}
	check(x.DType() == F32 && y.Rows() == x.Cols() && y.Cols() == x.Rows(), "Stream.Transpose: shapes differ")
	if s.be.lacks[OpTranspose] {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.Transpose(h[0], h[1]) }, y, x)
		return
	}
	C.vdc_transpose(s.be.t, s.s, y.t, x.t)
}

// MQAttention is MQAttention over tensors: q and out [nq, heads·d], k and v
// [nk, d].
func (s *Stream) MQAttention(out, q, k, v Tensor, heads int, scale float32) {
	if q.Rows() == 0 {
		return
	}
	d := k.Cols()
	check(heads > 0 && d > 0 && k.Rows() > 0, "Stream.MQAttention: bad shape")
	check(q.Cols() == heads*d && out.Rows() == q.Rows() && out.Cols() == q.Cols(), "Stream.MQAttention: q or out")
	check(v.Rows() == k.Rows() && v.Cols() == d, "Stream.MQAttention: k and v differ")
	if s.be.lacks[OpMQA] {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.MQAttention(h[0], h[1], h[2], h[3], heads, scale) }, out, q, k, v)
		return
	}
	C.vdc_mqa(s.be.t, s.s, out.t, q.t, k.t, v.t, C.int64_t(heads), C.float(scale))
}

// The audio tower's operations (kernels_audio.h), over tensors.

// Im2Col is AudioIm2Col over tensors: x [tIn·fIn, c], y [tOut·fOut,
// kt·kf·c], strides st, sf and padT, padF zeros before.
func (s *Stream) Im2Col(y, x Tensor, tIn, fIn, tOut, fOut, kt, kf, st, sf, padT, padF int) {
	if tOut <= 0 || fOut <= 0 {
		return
	}
	c := x.Cols()
	check(tIn >= 0 && fIn >= 0 && c > 0 && kt > 0 && kf > 0 && st > 0 && sf > 0 && padT >= 0 && padF >= 0, "Stream.Im2Col: bad shape")
	check(x.Rows() == tIn*fIn && y.Rows() == tOut*fOut && y.Cols() == kt*kf*c, "Stream.Im2Col: shapes differ")
	g := C.vd_conv{h: C.int64_t(tIn), w: C.int64_t(fIn), c: C.int64_t(c), oh: C.int64_t(tOut), ow: C.int64_t(fOut),
		stride: C.int32_t(st), pad_t: C.int32_t(padT), pad_l: C.int32_t(padF)}
	if s.be.lacks[OpIm2Col] {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.Im2Col(h[0], h[1], tIn, fIn, tOut, fOut, kt, kf, st, sf, padT, padF) }, y, x)
		return
	}
	C.vdc_im2col(s.be.t, s.s, y.t, x.t, g, C.int64_t(kt), C.int64_t(kf), C.int64_t(sf))
}

// CumGroupNormReLU is AudioCumGroupNormReLU in place on x [t, fc] with
// w [1, c] (c divides fc).
func (s *Stream) CumGroupNormReLU(x, w Tensor, eps float32) {
	if x.Rows() == 0 {
		return
	}
	check(w.Len() > 0 && x.Cols() > 0 && x.Cols()%w.Len() == 0, "Stream.CumGroupNormReLU: x's width is not a multiple of w's")
	if s.be.lacks[OpCumGroupNormReLU] {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.CumGroupNormReLU(h[0], h[1], eps) }, x, w)
		return
	}
	C.vdc_cum_group_norm_relu(s.be.t, s.s, x.t, w.t, C.float(eps))
}

// LocalAttention is AudioLocalAttention over tensors: q, k, v, out [t,
// heads·d], pos [past+future+1, heads·d], valid I32 [1, t] (nonzero: a real
// frame). out must not alias the inputs.
func (s *Stream) LocalAttention(out, q, k, v, pos, valid Tensor, heads, past, future int, softcap float32) {
	t := q.Rows()
	if t == 0 {
		return
	}
	check(heads > 0 && q.Cols() > 0 && q.Cols()%heads == 0 && past >= 0 && future >= 0, "Stream.LocalAttention: bad shape")
	check(k.Rows() == t && v.Rows() == t && out.Rows() == t && k.Cols() == q.Cols() && v.Cols() == q.Cols() && out.Cols() == q.Cols(),
		"Stream.LocalAttention: q, k, v or out")
	check(pos.Rows() == past+future+1 && pos.Cols() == q.Cols(), "Stream.LocalAttention: pos")
	check(valid.DType() == I32 && valid.Len() == t, "Stream.LocalAttention: valid")
	if s.be.lacks[OpLocalAttention] {
		s.onCPU(1, func(c *Stream, h []Tensor) {
			c.LocalAttention(h[0], h[1], h[2], h[3], h[4], h[5], heads, past, future, softcap)
		}, out, q, k, v, pos, valid)
		return
	}
	C.vdc_local_attention(s.be.t, s.s, out.t, q.t, k.t, v.t, pos.t, valid.t, C.int64_t(heads), C.int64_t(past),
		C.int64_t(future), C.float(softcap))
}

// DepthwiseConvCausal is AudioDepthwiseConvCausal over tensors: x, y [t,
// d], w [d, k]; y must not alias x.
func (s *Stream) DepthwiseConvCausal(y, x, w Tensor) {
	if x.Len() == 0 {
		return
	}
	check(y.Rows() == x.Rows() && y.Cols() == x.Cols() && w.Rows() == x.Cols() && w.Cols() > 0, "Stream.DepthwiseConvCausal: shapes differ")
	if s.be.lacks[OpDWConvCausal] {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.DepthwiseConvCausal(h[0], h[1], h[2]) }, y, x, w)
		return
	}
	C.vdc_dwconv_causal(s.be.t, s.s, y.t, x.t, w.t)
}

// GLU is AudioGLU over tensors: x [rows, 2d], y [rows, d].
func (s *Stream) GLU(y, x Tensor) {
	if y.Len() == 0 {
		return
	}
	check(x.Rows() == y.Rows() && x.Cols() == 2*y.Cols(), "Stream.GLU: shapes differ")
	if s.be.lacks[OpGLU] {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.GLU(h[0], h[1]) }, y, x)
		return
	}
	C.vdc_glu(s.be.t, s.s, y.t, x.t)
}

// SiLU computes y = x·sigmoid(x) (AudioSiLU); y may be x.
func (s *Stream) SiLU(y, x Tensor) {
	if y.Len() == 0 {
		return
	}
	check(x.Len() == y.Len(), "Stream.SiLU: shapes differ")
	if s.be.lacks[OpSiLU] {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.SiLU(h[0], h[1]) }, y, x)
		return
	}
	C.vdc_silu(s.be.t, s.s, y.t, x.t)
}

// Clip computes y = min(max(x, −lim), lim) (AudioClip); y may be x.
func (s *Stream) Clip(y, x Tensor, lim float32) {
	if y.Len() == 0 {
		return
	}
	check(x.Len() == y.Len(), "Stream.Clip: shapes differ")
	if s.be.lacks[OpClip] {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.Clip(h[0], h[1], lim) }, y, x)
		return
	}
	C.vdc_clip(s.be.t, s.s, y.t, x.t, C.float(lim))
}
