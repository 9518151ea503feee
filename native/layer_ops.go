package native

/*
#include "backend_call.h"
*/
import "C"

// A decoder layer's row operations in fewer passes (backend_ops.h): each
// gives the bits of the operations it stands for, and a backend without it
// gets those operations, one by one, from here.

// AltUpStep holds the operands of AltUp's steps around a layer: the router
// on X [N, Dim] (NormW, W; Y its outputs [N, W.Rows], F scratch [N, Dim]),
// the coefficients CY = Y·CWᵀ (+ Add when Plus), the streams H and their
// prediction Pred [4·N, Dim], and Out [N, Dim] with OutW [Dim] (nil: none).
type AltUpStep struct {
	Y, F, X, NormW, W, CW, CY, H, Pred, Out, OutW Tensor
	// Pre [N, Dim] and PreW (nil Pre: none): AltUpCorrectStep's first
	// part, the layer's last norm-add NormAdd(X, Pre, PreW, X);
	// AltUpPredictStep's, the previous layer's per-layer input added to
	// streams 1..3 of H (NormAddMore(H1, Pre, PreW, H1, ..., rep H23)).
	Pre, PreW       Tensor
	Eps, Scale, Add float32
	Plus            bool
	N, Dim          int
}

func (a *AltUpStep) check(msg string) {
	n, d := a.N, a.Dim
	check(d > 0 && a.X.Rows() == n && a.X.Cols() == d && a.F.Rows() == n && a.F.Cols() == d && a.W.Cols() == d &&
		a.Y.Rows() == n && a.Y.Cols() == a.W.Rows() && a.CW.Cols() == a.W.Rows() && a.CY.Rows() == n &&
		a.CY.Cols() == a.CW.Rows() && a.H.Len() >= 4*n*d && a.Pred.Len() >= 4*n*d && a.Out.Len() >= n*d &&
		(a.OutW.Nil() || a.OutW.Len() >= d) && (a.NormW.Nil() || a.NormW.Len() >= d) &&
		(a.Pre.Nil() || (a.Pre.Len() == n*d && (a.PreW.Nil() || a.PreW.Len() >= d))), msg)
}

func (a *AltUpStep) c() C.vd_altup {
	has := C.int(0)
	if a.Plus {
		has = 1
	}
	return C.vd_altup{
		y: a.Y.t, f: a.F.t, x: a.X.t, norm_w: a.NormW.t, w: a.W.t, cw: a.CW.t, cy: a.CY.t, h: a.H.t, pred: a.Pred.t,
		out: a.Out.t, out_w: a.OutW.t, pre: a.Pre.t, pre_w: a.PreW.t, eps: C.float(a.Eps), scale: C.float(a.Scale), add: C.float(a.Add), has_add: has,
		n: C.int64_t(a.N), dim: C.int64_t(a.Dim),
	}
}

// AltUpPredictStep is AltUp's prediction before a layer: with a.Pre,
// streams 1..3 of H += RMSNorm(Pre)·PreW first (NormAdd(H1, Pre, PreW,
// H1), then AddRep(H23, H23, Pre): the previous layer's per-layer input,
// Pre normalised in place); RouterCoef on the first stream (a.X, H's first
// N rows), AltUpPredict(Pred, H, CY), then Out = RMSNorm(Pred's first N
// rows)·OutW.
func (s *Stream) AltUpPredictStep(a *AltUpStep) {
	if a.N == 0 {
		return
	}
	a.check("Stream.AltUpPredictStep: shapes differ")
	if s.left(OpAltUpPredictStep) {
		if !a.Pre.Nil() {
			n := a.N
			h1 := a.H.Slice(n, 2*n)
			s.NormAdd(h1, a.Pre, a.PreW, h1, Tensor{}, a.Dim, a.Eps, 0)
			s.AddRep(a.H.Slice(2*n, 4*n), a.H.Slice(2*n, 4*n), a.Pre)
		}
		s.RouterCoef(a.Y, a.F, a.X, a.NormW, a.W, a.Dim, a.Eps, a.Scale, a.CW, a.CY, a.Add, a.Plus)
		s.AltUpPredict(a.Pred, a.H, a.CY, a.N, a.Dim)
		s.RMSNorm(a.Out, a.Pred.Slice(0, a.N), a.OutW, a.Dim, a.Eps)
		return
	}
	C.vdc_altup_predict_step(s.be.t, s.s, a.c())
}

// AltUpCorrectStep is AltUp's correction after a layer whose output is
// a.X: with a.Pre, NormAdd(X, Pre, PreW, X) first; RouterCoef on X,
// AltUpCorrect(H, Pred, X, CY), then Out = H's first N rows·OutW (MulRep;
// nil OutW: a copy).
func (s *Stream) AltUpCorrectStep(a *AltUpStep) {
	if a.N == 0 {
		return
	}
	a.check("Stream.AltUpCorrectStep: shapes differ")
	if s.left(OpAltUpCorrectStep) {
		if !a.Pre.Nil() {
			s.NormAdd(a.X, a.Pre, a.PreW, a.X, Tensor{}, a.Dim, a.Eps, 0)
		}
		s.RouterCoef(a.Y, a.F, a.X, a.NormW, a.W, a.Dim, a.Eps, a.Scale, a.CW, a.CY, a.Add, a.Plus)
		s.AltUpCorrect(a.H, a.Pred, a.X, a.CY, a.N, a.Dim)
		if a.OutW.Nil() {
			s.Copy(a.Out.Slice(0, a.N), a.H.Slice(0, a.N))
		} else {
			s.MulRep(a.Out.Slice(0, a.N), a.H.Slice(0, a.N), a.OutW)
		}
		return
	}
	C.vdc_altup_correct_step(s.be.t, s.s, a.c())
}

// NormAddMore is NormAdd(y, x, w, a, b, dim, eps, c), then each block of
// len(x) elements of rep (nil: none) += x (AddRep), then, with f given,
// f = RMSNorm(y)·fw.
func (s *Stream) NormAddMore(y, x, w, a, b Tensor, dim int, eps, c float32, rep, f, fw Tensor) {
	s.NormAddMoreB(y, x, w, a, b, Tensor{}, Tensor{}, dim, eps, c, rep, f, fw)
}

// NormAddMoreB is NormAddMore with b's own norm-add first when ba is
// given: NormAdd(b, b, bw, ba) (b = ba + RMSNorm(b)·bw in place: Laurel's,
// from its right matrix's product, before the attention's norm-add).
func (s *Stream) NormAddMoreB(y, x, w, a, b, bw, ba Tensor, dim int, eps, c float32, rep, f, fw Tensor) {
	if x.Len() == 0 {
		return
	}
	check(dim > 0 && x.Len()%dim == 0 && y.Len() == x.Len() && a.Len() >= y.Len() && (b.Nil() || b.Len() >= y.Len()) &&
		(w.Nil() || w.Len() >= dim) && (rep.Nil() || rep.Len()%x.Len() == 0) && (f.Nil() || f.Len() == y.Len()) &&
		(fw.Nil() || fw.Len() >= dim), "Stream.NormAddMore: shapes differ")
	check(ba.Nil() || (!b.Nil() && b.Len() == y.Len() && ba.Len() >= y.Len() && (bw.Nil() || bw.Len() >= dim)),
		"Stream.NormAddMoreB: b's norm-add shapes differ")
	if s.left(OpNormAddMore) {
		if !ba.Nil() {
			s.NormAdd(b, b, bw, ba, Tensor{}, dim, eps, 0)
		}
		s.NormAdd(y, x, w, a, b, dim, eps, c)
		if !rep.Nil() {
			s.AddRep(rep, rep, x)
		}
		if !f.Nil() {
			s.RMSNorm(f, y, fw, dim, eps)
		}
		return
	}
	C.vdc_norm_add_more(s.be.t, s.s, y.t, x.t, w.t, a.t, b.t, bw.t, ba.t, C.int64_t(dim), C.float(eps), C.float(c), rep.t, f.t, fw.t)
}

// NormRoPEPart is one NormRoPE of NormRoPEs: x [n, Heads·headDim] by W,
// rotated by InvFreq (nil: not rotated), scattered to To (nil: not).
type NormRoPEPart struct {
	X, W, InvFreq, To Tensor
	Heads             int
}

// NormRoPEs is NormRoPE of each of parts (at most 3) over one batch's
// tokens: positions pos, slots idx (for the parts scattered), eps and
// headDim common to them; one pass where the backend has it.
func (s *Stream) NormRoPEs(parts []NormRoPEPart, eps float32, pos Tensor, headDim int, idx Tensor) {
	check(len(parts) <= 3, "Stream.NormRoPEs: more than 3 parts")
	if pos.Len() == 0 || len(parts) == 0 {
		return
	}
	if s.left(OpNormRoPEs) {
		for _, p := range parts {
			s.NormRoPE(p.X, p.W, eps, pos, p.Heads, headDim, p.InvFreq, p.To, idx)
		}
		return
	}
	n := pos.Len()
	check(pos.DType() == I32 && headDim > 0, "Stream.NormRoPEs: shapes differ")
	var r C.vd_norm_ropes
	for i, p := range parts {
		check(p.Heads > 0 && p.X.Len() >= n*p.Heads*headDim && (p.InvFreq.Nil() || p.InvFreq.Len() >= headDim/2) &&
			(p.W.Nil() || p.W.Len() >= headDim), "Stream.NormRoPEs: shapes differ")
		check(p.To.Nil() || (idx.DType() == I32 && idx.Len() >= n && p.To.Cols() == p.Heads*headDim), "Stream.NormRoPEs: scatter shapes differ")
		r.part[i] = C.vd_norm_rope_part{y: p.To.t, x: p.X.t, w: p.W.t, inv_freq: p.InvFreq.t, heads: C.int64_t(p.Heads)}
	}
	r.nparts, r.idx, r.pos, r.eps, r.head_dim = C.int(len(parts)), idx.t, pos.t, C.float(eps), C.int64_t(headDim)
	C.vdc_norm_ropes(s.be.t, s.s, r)
}

// LinearPart is one product of Linears: Y = x·Wᵀ, then, with GeluMul
// given (of Y's length), Y = gelu_tanh(Y)·GeluMul, or, with GeluInto,
// GeluMul = gelu_tanh(GeluMul)·Y (an MLP's gate by its up product; Y
// keeps the product).
type LinearPart struct {
	Y, W, GeluMul Tensor
	GeluInto      bool
	X             Tensor // the part's own input, of x's rows (nil: x)
}

// Linears runs up to 4 products of one x [n, W.Cols] (a layer's q, k, v
// and Laurel's left matrix; the per-layer input's gate with its GELU
// product; the MLP's gate, then its up product with the gate's GELU):
// each part's bits those of Linear, then GeluMul(Y, Y, GeluMul) (GeluInto:
// GeluMul(GeluMul, GeluMul, Y)), alone, in part order (a part's GeluMul
// may be an earlier part's Y); one pass where the backend has it. A part
// with its own X (of x's rows) takes it in place of x: products of
// different inputs in one pass (a layer's output product and Laurel's
// right matrix).
func (s *Stream) Linears(x Tensor, parts []LinearPart) {
	check(len(parts) <= 4, "Stream.Linears: more than 4 parts")
	if x.Rows() == 0 || len(parts) == 0 {
		return
	}
	for _, p := range parts {
		px := x
		if !p.X.Nil() {
			px = p.X
		}
		check(px.Rows() == x.Rows() && px.DType() == x.DType(), "Stream.Linears: a part's X differs from x in rows or type")
		check(p.W.Rows() > 0 && px.Cols() == p.W.Cols() && p.Y.DType() == F32 && p.Y.Rows() == x.Rows() && p.Y.Cols() == p.W.Rows(),
			"Stream.Linears: shapes differ")
		check(p.GeluMul.Nil() || (p.GeluMul.DType() == F32 && p.GeluMul.Len() >= p.Y.Len()), "Stream.Linears: GeluMul shorter than Y")
		check(!p.GeluInto || (!p.GeluMul.Nil() && p.GeluMul.Len() == p.Y.Len()), "Stream.Linears: GeluInto without a GeluMul of Y's length")
	}
	if s.left(OpLinears) {
		for _, p := range parts {
			px := x
			if !p.X.Nil() {
				px = p.X
			}
			s.Linear(p.Y, px, p.W)
			switch {
			case p.GeluInto:
				s.GeluMul(p.GeluMul, p.GeluMul, p.Y)
			case !p.GeluMul.Nil():
				s.GeluMul(p.Y, p.Y, p.GeluMul)
			}
		}
		return
	}
	var l C.vd_linears
	for i, p := range parts {
		l.y[i], l.w[i], l.gelu_mul[i] = p.Y.t, p.W.t, p.GeluMul.t
		if !p.X.Nil() {
			l.xs[i] = p.X.t
		}
		if p.GeluInto {
			l.gelu_into[i] = 1
		}
	}
	l.x, l.nparts = x.t, C.int(len(parts))
	C.vdc_linears(s.be.t, s.s, l)
}
