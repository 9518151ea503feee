package native

/*
#include "backend_call.h"
*/
import "C"

// The operations of a stream (backend.h). Shapes are checked here, so a
// backend sees only well-formed calls; every op panics on a misuse, like
// the slice kernels.

// Linear computes y = x·wᵀ: x [n, w.Cols], y [n, w.Rows] (w F32, BF16 or Q4).
func (s *Stream) Linear(y, x, w Tensor) {
	if x.Rows() == 0 || w.Rows() == 0 {
		return
	}
	check(x.Cols() == w.Cols() && y.Rows() == x.Rows() && y.Cols() == w.Rows(), "Stream.Linear: shapes differ")
	if s.left(OpLinear) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.Linear(h[0], h[1], h[2]) }, y, x, w)
		return
	}
	C.vdc_linear(s.be.t, s.s, y.t, x.t, w.t)
}

// TowerLinear is Linear for a tower's batch: every row of an image or a
// clip at once, never a row alone (a decoder's rows stay on Linear, whose
// bits do not depend on the batch's size). A backend may sum it in another
// order of float32 accuracy: the CUDA backend's tensor cores in three TF32
// parts (VERDICT_TOWER_MMA=0 keeps Linear's bits); the CPU's is Linear. A
// backend without it runs Linear.
func (s *Stream) TowerLinear(y, x, w Tensor) {
	if x.Rows() == 0 || w.Rows() == 0 {
		return
	}
	check(x.Cols() == w.Cols() && y.Rows() == x.Rows() && y.Cols() == w.Rows(), "Stream.TowerLinear: shapes differ")
	if s.left(OpTowerLinear) {
		s.Linear(y, x, w)
		return
	}
	C.vdc_tower_linear(s.be.t, s.s, y.t, x.t, w.t)
}

// LinearRows is Linear over rows ids (I32 [1, k]) of w only: y [n, k].
// Every value equals Linear's at that row, bit for bit.
func (s *Stream) LinearRows(y, x, w, ids Tensor) {
	if x.Rows() == 0 || ids.Len() == 0 {
		return
	}
	check(ids.DType() == I32 && x.Cols() == w.Cols() && y.Rows() == x.Rows() && y.Cols() == ids.Len(), "Stream.LinearRows: shapes differ")
	if s.left(OpLinearRows) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.LinearRows(h[0], h[1], h[2], h[3]) }, y, x, w, ids)
		return
	}
	C.vdc_linear_rows(s.be.t, s.s, y.t, x.t, w.t, ids.t)
}

// SparseMLP is SparseMLPQ4 over tensors: y [n, d] from x [n, d] and the
// gate outputs g [n, inter] (overwritten); h (F32) and idx (I32) are
// scratch of g's shape.
func (s *Stream) SparseMLP(y, g, h, idx, x, up, downT Tensor, z float32) {
	if x.Rows() == 0 {
		return
	}
	check(up.DType() == Q4 && downT.DType() == Q4 && up.Rows() == downT.Rows() && up.Cols() == downT.Cols(), "Stream.SparseMLP: weights")
	check(g.Len() == x.Rows()*up.Rows() && h.Len() >= g.Len() && idx.Len() >= g.Len() && y.Len() == x.Len(), "Stream.SparseMLP: shapes differ")
	if s.left(OpSparseMLP) {
		s.onCPU(4, func(c *Stream, h []Tensor) { c.SparseMLP(h[0], h[1], h[2], h[3], h[4], h[5], h[6], z) }, y, g, h, idx, x, up, downT)
		return
	}
	C.vdc_sparse_mlp(s.be.t, s.s, y.t, g.t, h.t, idx.t, x.t, up.t, downT.t, C.float(z))
}

// RMSNorm normalises each row of width dim of x into y (w.Nil(): no scale).
func (s *Stream) RMSNorm(y, x, w Tensor, dim int, eps float32) {
	if x.Len() == 0 {
		return
	}
	check(dim > 0 && x.Len()%dim == 0 && y.Len() == x.Len() && (w.Nil() || w.Len() >= dim), "Stream.RMSNorm: shapes differ")
	if s.left(OpRMSNorm) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.RMSNorm(h[0], h[1], h[2], dim, eps) }, y, x, w)
		return
	}
	C.vdc_rmsnorm(s.be.t, s.s, y.t, x.t, w.t, C.int64_t(dim), C.float(eps))
}

// RowRMS writes out[r] = sqrt(max(mean(x_r²), floor)) over rows of width dim.
func (s *Stream) RowRMS(out, x Tensor, dim int, floor float32) {
	if out.Len() == 0 {
		return
	}
	check(dim > 0 && x.Len() == out.Len()*dim, "Stream.RowRMS: shapes differ")
	if s.left(OpRowRMS) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.RowRMS(h[0], h[1], dim, floor) }, out, x)
		return
	}
	C.vdc_row_rms(s.be.t, s.s, out.t, x.t, C.int64_t(dim), C.float(floor))
}

// ScaleRows multiplies row r (width dim) of x by sc[r], in place.
func (s *Stream) ScaleRows(x, sc Tensor, dim int) {
	if sc.Len() == 0 {
		return
	}
	check(x.Len() == sc.Len()*dim, "Stream.ScaleRows: shapes differ")
	if s.left(OpScaleRows) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.ScaleRows(h[0], h[1], dim) }, x, sc)
		return
	}
	C.vdc_scale_rows(s.be.t, s.s, x.t, sc.t, C.int64_t(dim))
}

// MulRows multiplies every row (width w.Len()) of x by w, in place.
func (s *Stream) MulRows(x, w Tensor) {
	if x.Len() == 0 {
		return
	}
	check(w.Len() > 0 && x.Len()%w.Len() == 0, "Stream.MulRows: shapes differ")
	if s.left(OpMulRows) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.MulRows(h[0], h[1]) }, x, w)
		return
	}
	C.vdc_mul_rows(s.be.t, s.s, x.t, w.t)
}

// SparseGeluMul is SparseGeluMul over tensors: rows of width dim.
func (s *Stream) SparseGeluMul(g, u Tensor, dim int, z float32) {
	if g.Len() == 0 {
		return
	}
	check(dim > 0 && g.Len()%dim == 0 && u.Len() >= g.Len(), "Stream.SparseGeluMul: shapes differ")
	if s.left(OpSparseGeluMul) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.SparseGeluMul(h[0], h[1], dim, z) }, g, u)
		return
	}
	C.vdc_sparse_gelu_mul(s.be.t, s.s, g.t, u.t, C.int64_t(dim), C.float(z))
}

func (s *Stream) ew(op C.int, y, a, b Tensor, c float32, name string) {
	if y.Len() == 0 {
		return
	}
	if a.Len() < y.Len() || (!b.Nil() && b.Len() < y.Len()) {
		panic("native: " + name + ": input too short")
	}
	if s.left(OpEW) {
		cv := c
		s.onCPU(1, func(c *Stream, h []Tensor) { c.ew(op, h[0], h[1], h[2], cv, name) }, y, a, b)
		return
	}
	C.vdc_ew(s.be.t, s.s, op, y.t, a.t, b.t, C.float(c))
}

// GeluTanh computes y = gelu_tanh(a).
func (s *Stream) GeluTanh(y, a Tensor) { s.ew(C.VD_EW_GELU, y, a, Tensor{}, 0, "Stream.GeluTanh") }

// GeluMul computes y = gelu_tanh(a)·b.
func (s *Stream) GeluMul(y, a, b Tensor) { s.ew(C.VD_EW_GELU_MUL, y, a, b, 0, "Stream.GeluMul") }

// Softcap computes y = c·tanh(a/c).
func (s *Stream) Softcap(y, a Tensor, c float32) {
	s.ew(C.VD_EW_SOFTCAP, y, a, Tensor{}, c, "Stream.Softcap")
}

// Tanh computes y = tanh(a).
func (s *Stream) Tanh(y, a Tensor) { s.ew(C.VD_EW_TANH, y, a, Tensor{}, 0, "Stream.Tanh") }

// Add computes y = a + b.
func (s *Stream) Add(y, a, b Tensor) { s.ew(C.VD_EW_ADD, y, a, b, 0, "Stream.Add") }

// Mul computes y = a·b.
func (s *Stream) Mul(y, a, b Tensor) { s.ew(C.VD_EW_MUL, y, a, b, 0, "Stream.Mul") }

// Div computes y = a/b.
func (s *Stream) Div(y, a, b Tensor) { s.ew(C.VD_EW_DIV, y, a, b, 0, "Stream.Div") }

// AddRep computes y[i] = a[i] + b[i mod len(b)]: b added to each run of
// its length (a row added to every row, say); len(b) divides len(y).
func (s *Stream) AddRep(y, a, b Tensor) { s.ewRep(C.VD_EW_ADD_REP, y, a, b, "Stream.AddRep") }

// MulRep computes y[i] = a[i]·b[i mod len(b)].
func (s *Stream) MulRep(y, a, b Tensor) { s.ewRep(C.VD_EW_MUL_REP, y, a, b, "Stream.MulRep") }

func (s *Stream) ewRep(op C.int, y, a, b Tensor, name string) {
	if y.Len() == 0 {
		return
	}
	if a.Len() < y.Len() || b.Len() == 0 || y.Len()%b.Len() != 0 {
		panic("native: " + name + ": a shorter than y, or b's length does not divide y's")
	}
	if s.left(OpEW) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.ewRep(op, h[0], h[1], h[2], name) }, y, a, b)
		return
	}
	C.vdc_ew(s.be.t, s.s, op, y.t, a.t, b.t, 0)
}

// AddConst computes y = a + c.
func (s *Stream) AddConst(y, a Tensor, c float32) {
	s.ew(C.VD_EW_ADD_CONST, y, a, Tensor{}, c, "Stream.AddConst")
}

// Scale computes y = a·c.
func (s *Stream) Scale(y, a Tensor, c float32) {
	s.ew(C.VD_EW_SCALE, y, a, Tensor{}, c, "Stream.Scale")
}

// AddScaled computes y = (a + b)·c.
func (s *Stream) AddScaled(y, a, b Tensor, c float32) {
	s.ew(C.VD_EW_ADD_SCALED, y, a, b, c, "Stream.AddScaled")
}

// RoPE rotates x [n, heads·headDim] in place to positions pos (I32 [1, n]).
func (s *Stream) RoPE(x, pos Tensor, heads, headDim int, invFreq Tensor) {
	if pos.Len() == 0 {
		return
	}
	check(pos.DType() == I32 && x.Len() >= pos.Len()*heads*headDim && invFreq.Len() >= headDim/2, "Stream.RoPE: shapes differ")
	if s.left(OpRoPE) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.RoPE(h[0], h[1], heads, headDim, h[2]) }, x, pos, invFreq)
		return
	}
	C.vdc_rope(s.be.t, s.s, x.t, pos.t, C.int64_t(heads), C.int64_t(headDim), invFreq.t)
}

// RouterCoef is Router (y from x), then the coefficients cy = Linear(y,
// cw) and, when plus is set, cy + add (AddConst): one pass where the
// backend fuses them, with those operations' bits.
func (s *Stream) RouterCoef(y, f, x, normW, w Tensor, dim int, eps, scale float32, cw, cy Tensor, add float32, plus bool) {
	if x.Rows() == 0 {
		return
	}
	check(x.Cols() == dim && f.Rows() == x.Rows() && f.Cols() == dim && w.Cols() == dim && y.Rows() == x.Rows() &&
		y.Cols() == w.Rows() && cw.Cols() == w.Rows() && cy.Rows() == x.Rows() && cy.Cols() == cw.Rows(), "Stream.RouterCoef: shapes differ")
	has := C.int(0)
	if plus {
		has = 1
	}
	if s.left(OpRouterCoef) {
		s.onCPU(3, func(c *Stream, h []Tensor) {
			c.RouterCoef(h[0], h[1], h[3], h[4], h[5], dim, eps, scale, h[6], h[2], add, plus)
		}, y, f, cy, x, normW, w, cw)
		return
	}
	C.vdc_router_coef(s.be.t, s.s, y.t, f.t, x.t, normW.t, w.t, C.int64_t(dim), C.float(eps), C.float(scale), cw.t, cy.t, C.float(add), has)
}

// NormRoPE is RMSNorm of x's heads of headDim (scaled by w; nil: none),
// then RoPE by pos (nil invFreq: none), in place, then, where to is
// given, Scatter(to, x, idx): one pass, with those operations' bits.
func (s *Stream) NormRoPE(x, w Tensor, eps float32, pos Tensor, heads, headDim int, invFreq, to, idx Tensor) {
	n := pos.Len()
	if n == 0 {
		return
	}
	check(pos.DType() == I32 && headDim > 0 && x.Len() >= n*heads*headDim && (invFreq.Nil() || invFreq.Len() >= headDim/2) &&
		(w.Nil() || w.Len() >= headDim), "Stream.NormRoPE: shapes differ")
	check(to.Nil() || (idx.DType() == I32 && idx.Len() >= n && to.Cols() == heads*headDim), "Stream.NormRoPE: scatter shapes differ")
	if s.left(OpNormRoPE) {
		s.onCPU(2, func(c *Stream, h []Tensor) { c.NormRoPE(h[0], h[2], eps, h[3], heads, headDim, h[4], h[1], h[5]) }, x, to, w, pos, invFreq, idx)
		return
	}
	C.vdc_norm_rope(s.be.t, s.s, to.t, idx.t, x.t, w.t, C.float(eps), pos.t, C.int64_t(heads), C.int64_t(headDim), invFreq.t)
}

// AltUpPredict is AltUpPredict over tensors: pred, h [4·n, d], coef [n, 16].
func (s *Stream) AltUpPredict(pred, h, coef Tensor, n, d int) {
	if n == 0 {
		return
	}
	check(pred.Len() >= 4*n*d && h.Len() >= 4*n*d && coef.Len() >= 16*n, "Stream.AltUpPredict: shapes differ")
	if s.left(OpAltUpPredict) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.AltUpPredict(h[0], h[1], h[2], n, d) }, pred, h, coef)
		return
	}
	C.vdc_altup_predict(s.be.t, s.s, pred.t, h.t, coef.t, C.int64_t(n), C.int64_t(d))
}

// AltUpCorrect is AltUpCorrect over tensors.
func (s *Stream) AltUpCorrect(out, pred, act, c Tensor, n, d int) {
	if n == 0 {
		return
	}
	check(out.Len() >= 4*n*d && pred.Len() >= 4*n*d && act.Len() >= n*d && c.Len() >= 4*n, "Stream.AltUpCorrect: shapes differ")
	if s.left(OpAltUpCorrect) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.AltUpCorrect(h[0], h[1], h[2], h[3], n, d) }, out, pred, act, c)
		return
	}
	C.vdc_altup_correct(s.be.t, s.s, out.t, pred.t, act.t, c.t, C.int64_t(n), C.int64_t(d))
}

// PagedAttn describes one paged attention call (see vk_paged_attention in
// kernels.h): queries Q [n, HeadsQ·HeadDim] at positions QPos of sequences
// QSeq; sequence s's key entries are SeqEnt[s]..SeqEnt[s+1]-1, entry e
// holding EntLen[e] keys from position EntPos[e] in block EntBlk[e] of the
// pool K, V [blocks·Block, HeadsKV·HeadDim]. QLim, when not Nil, is [n]
// int32: the last key position each query sees, at least its own (an image
// block's queries see the block's later keys); the window (Window > 0)
// still counts back from the query's own position. Nil: causal.
type PagedAttn struct {
	Out, Q, K, V                               Tensor
	QPos, QSeq, SeqEnt, EntBlk, EntPos, EntLen Tensor
	HeadsQ, HeadsKV, HeadDim, Block, Window    int
	MaxKeys                                    int
	Scale                                      float32
	QLim                                       Tensor
}

// Attention runs paged causal attention (past each query's own position up
// to QLim when given); every query's output equals Attention's over its
// keys in one array, bit for bit.
func (s *Stream) Attention(a *PagedAttn) {
	n := a.Q.Rows()
	if n == 0 {
		return
	}
	check(a.HeadsKV > 0 && a.HeadsQ%a.HeadsKV == 0, "Stream.Attention: HeadsQ is not a multiple of HeadsKV")
	check(a.Q.Cols() == a.HeadsQ*a.HeadDim && a.Out.Len() >= n*a.Q.Cols(), "Stream.Attention: q or out")
	check(a.K.Cols() == a.HeadsKV*a.HeadDim && a.V.Cols() == a.K.Cols() && a.Block > 0, "Stream.Attention: pool")
	check(a.QPos.Len() >= n && a.QSeq.Len() >= n, "Stream.Attention: positions")
	check(a.QLim.Nil() || (a.QLim.DType() == I32 && a.QLim.Len() >= n), "Stream.Attention: key limits")
	if s.left(OpAttention) {
		s.onCPU(1, func(c *Stream, h []Tensor) {
			b := *a
			b.Out, b.Q, b.K, b.V, b.QPos, b.QSeq, b.SeqEnt, b.EntBlk, b.EntPos, b.EntLen = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9]
			if !a.QLim.Nil() {
				b.QLim = h[10]
			}
			c.Attention(&b)
		}, a.Out, a.Q, a.K, a.V, a.QPos, a.QSeq, a.SeqEnt, a.EntBlk, a.EntPos, a.EntLen, a.QLim)
		return
	}
	C.vdc_attention(s.be.t, s.s, C.vd_attn{
		out: a.Out.t, q: a.Q.t, k: a.K.t, v: a.V.t, qpos: a.QPos.t, qseq: a.QSeq.t,
		seq_ent: a.SeqEnt.t, ent_blk: a.EntBlk.t, ent_pos: a.EntPos.t, ent_len: a.EntLen.t,
		hq: C.int64_t(a.HeadsQ), hkv: C.int64_t(a.HeadsKV), d: C.int64_t(a.HeadDim),
		block: C.int64_t(a.Block), window: C.int64_t(a.Window), max_keys: C.int64_t(a.MaxKeys),
		scale: C.float(a.Scale), qlim: a.QLim.t,
	})
}

// Embed writes y[i] = table[ids[i]]·scale (table F32, BF16 or Q4,
// dequantised exactly as ReadRows does).
func (s *Stream) Embed(y, table, ids Tensor, scale float32) {
	if ids.Len() == 0 {
		return
	}
	check(ids.DType() == I32 && y.Len() >= ids.Len()*table.Cols(), "Stream.Embed: shapes differ")
	if s.left(OpEmbed) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.Embed(h[0], h[1], h[2], scale) }, y, table, ids)
		return
	}
	C.vdc_embed(s.be.t, s.s, y.t, table.t, ids.t, C.float(scale))
}

// Gather writes y[i] = x[idx[i]] (rows of x.Cols() elements).
func (s *Stream) Gather(y, x, idx Tensor) {
	if idx.Len() == 0 {
		return
	}
	check(idx.DType() == I32 && y.Cols() == x.Cols() && y.Rows() >= idx.Len(), "Stream.Gather: shapes differ")
	if s.left(OpGather) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.Gather(h[0], h[1], h[2]) }, y, x, idx)
		return
	}
	C.vdc_gather(s.be.t, s.s, y.t, x.t, idx.t)
}

// Scatter writes y[idx[i]] = x[i] (rows of x.Cols() elements): KV writes,
// the multimodal merge.
func (s *Stream) Scatter(y, x, idx Tensor) {
	if idx.Len() == 0 {
		return
	}
	check(idx.DType() == I32 && y.Cols() == x.Cols() && x.Rows() >= idx.Len(), "Stream.Scatter: shapes differ")
	if s.left(OpScatter) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.Scatter(h[0], h[1], h[2]) }, y, x, idx)
		return
	}
	C.vdc_scatter(s.be.t, s.s, y.t, x.t, idx.t)
}

// Copy2D copies rows of cols elements from x (row stride xs) to y (row
// stride ys), strides in elements.
func (s *Stream) Copy2D(y Tensor, ys int, x Tensor, xs, rows, cols int) {
	if rows == 0 || cols == 0 {
		return
	}
	check(y.Len() >= (rows-1)*ys+cols && x.Len() >= (rows-1)*xs+cols, "Stream.Copy2D: outside a tensor")
	if s.left(OpCopy2D) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.Copy2D(h[0], ys, h[1], xs, rows, cols) }, y, x)
		return
	}
	C.vdc_copy2d(s.be.t, s.s, y.t, C.int64_t(ys), x.t, C.int64_t(xs), C.int64_t(rows), C.int64_t(cols))
}

// LogSumExp writes out[r] = log Σ exp(x_r) for each row of x.
func (s *Stream) LogSumExp(out, x Tensor) {
	if x.Rows() == 0 {
		return
	}
	check(out.Len() >= x.Rows(), "Stream.LogSumExp: out too short")
	if s.left(OpLogSumExp) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.LogSumExp(h[0], h[1]) }, out, x)
		return
	}
	C.vdc_logsumexp(s.be.t, s.s, out.t, x.t)
}

// Argmax writes out[r] (I32) = the index of the largest value of row r of
// x (the lowest on ties).
func (s *Stream) Argmax(out, x Tensor) {
	if x.Rows() == 0 {
		return
	}
	check(out.DType() == I32 && out.Len() >= x.Rows(), "Stream.Argmax: out")
	if s.left(OpArgmax) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.Argmax(h[0], h[1]) }, out, x)
		return
	}
	C.vdc_argmax(s.be.t, s.s, out.t, x.t)
}

// Select writes out[j] = x[row[j], col[j]].
func (s *Stream) Select(out, x, row, col Tensor) {
	if row.Len() == 0 {
		return
	}
	check(row.DType() == I32 && col.DType() == I32 && col.Len() == row.Len() && out.Len() >= row.Len(), "Stream.Select: shapes differ")
	if s.left(OpSelect) {
		s.onCPU(1, func(c *Stream, h []Tensor) { c.Select(h[0], h[1], h[2], h[3]) }, out, x, row, col)
		return
	}
	C.vdc_select(s.be.t, s.s, out.t, x.t, row.t, col.t)
}

// Sampling is a token draw: logits scaled by InvTemp (1/temperature; 0
// means temperature 0, the argmax), then top-k (0: all), then top-p (0 or 1:
// all), with the uniform draw U in [0, 1).
type Sampling struct {
	InvTemp float32
	TopK    int
	TopP, U float64
}

// Sample writes out[0] (I32) = the token drawn from the logits x [1,
// vocab], which it overwrites.
func (s *Stream) Sample(out, x Tensor, p Sampling) {
	check(out.DType() == I32 && out.Len() >= 1 && x.Rows() == 1, "Stream.Sample: shapes")
	if s.left(OpSample) {
		s.onCPU(2, func(c *Stream, h []Tensor) { c.Sample(h[0], h[1], p) }, out, x)
		return
	}
	C.vdc_sample(s.be.t, s.s, out.t, x.t, C.vd_sampling{inv_temp: C.float(p.InvTemp),
		top_k: C.int64_t(p.TopK), top_p: C.double(p.TopP), u: C.double(p.U)})
}

// NormAdd is RMSNorm(x, x, w, dim, eps), then y = a + x, then, when b is
// set, y = (y + b)·c: one operation where the backend fuses them.
func (s *Stream) NormAdd(y, x, w, a, b Tensor, dim int, eps, c float32) {
	if x.Len() == 0 {
		return
	}
	check(dim > 0 && x.Len()%dim == 0 && y.Len() == x.Len() && a.Len() >= y.Len() && (b.Nil() || b.Len() >= y.Len()) &&
		(w.Nil() || w.Len() >= dim), "Stream.NormAdd: shapes differ")
	if s.left(OpNormAdd) {
		cv := c
		s.onCPU(2, func(c *Stream, h []Tensor) { c.NormAdd(h[0], h[1], h[2], h[3], h[4], dim, eps, cv) }, y, x, w, a, b)
		return
	}
	C.vdc_norm_add(s.be.t, s.s, y.t, x.t, w.t, a.t, b.t, C.int64_t(dim), C.float(eps), C.float(c))
}

// Router is RMSNorm(f, x, normW, dim, eps), Scale(f, f, scale), Linear(y,
// f, w) and Tanh(y, y): AltUp's router, one operation where the backend
// fuses them. f [x.Rows(), dim] is scratch.
func (s *Stream) Router(y, f, x, normW, w Tensor, dim int, eps, scale float32) {
	if x.Rows() == 0 {
		return
	}
	check(x.Cols() == dim && f.Rows() == x.Rows() && f.Cols() == dim && w.Cols() == dim && y.Rows() == x.Rows() &&
		y.Cols() == w.Rows(), "Stream.Router: shapes differ")
	if s.left(OpRouter) {
		s.onCPU(2, func(c *Stream, h []Tensor) { c.Router(h[0], h[1], h[2], h[3], h[4], dim, eps, scale) }, y, f, x, normW, w)
		return
	}
	C.vdc_router(s.be.t, s.s, y.t, f.t, x.t, normW.t, w.t, C.int64_t(dim), C.float(eps), C.float(scale))
}
