package gemma3n

import (
	"fmt"
	"math"

	"verdict/engine/model"
	"verdict/native"
)

// PositionsError reports a sequence longer than the model's
// max_position_embeddings.
type PositionsError struct{ Positions, Max int }

func (e *PositionsError) Error() string {
	return fmt.Sprintf("gemma3n: %d tokens exceed the model's max_position_embeddings of %d", e.Positions, e.Max)
}

// Is matches model.ErrTooLong: the request is too long for the model.
func (e *PositionsError) Is(target error) bool { return target == model.ErrTooLong }

// checkPositions refuses a sequence of n positions beyond the model's
// max_position_embeddings.
func (m *Model) checkPositions(n int) error {
	if max := m.Cfg.MaxPositionEmbeddings; max > 0 && n > max {
		return &PositionsError{n, max}
	}
	return nil
}

// streams builds the four AltUp streams [4, n, D] in x.H from the
// embeddings e: e itself and three projections rescaled to e's RMS (the
// three products in one call, each rescale's row operations over the
// three streams at once: the same operations, fewer launches).
func (x *Exec) streams(e native.Tensor, n int) {
	m, st := x.m, x.st
	st.Copy(x.H.Slice(0, n), e)
	target := x.target.Sub(0, 1, n)
	st.RowRMS(target, e, m.Cfg.HiddenSize, 0)
	for k := 1; k < 4; k++ {
		x.lin[k-1] = native.LinearPart{Y: x.H.Slice(k*n, (k+1)*n), W: m.t.altupProj[k-1]}
	}
	st.Linears(e, x.lin[:3])
	x.rescale3(x.H.Slice(n, 4*n), target, n)
}

// unmix averages stream 0 with the rescaled unembedding projections of the
// other streams and applies the final norm: [n, D] in x.h. The three
// projections (into x.pred, free after the last layer) go in one call and
// are rescaled together; the sum keeps its order.
func (x *Exec) unmix(H native.Tensor, n int) native.Tensor {
	m, st := x.m, x.st
	D := m.Cfg.HiddenSize
	h := x.h.Slice(0, n)
	st.Copy(h, H.Slice(0, n))
	target := x.target.Sub(0, 1, n)
	st.RowRMS(target, H.Slice(0, n), D, 0)
	ys := x.pred.Slice(0, 3*n)
	for k := 1; k < 4; k++ {
		x.lin[k-1] = native.LinearPart{Y: ys.Slice((k-1)*n, k*n), W: m.t.altupUnemb[k-1], X: H.Slice(k*n, (k+1)*n)}
	}
	st.Linears(H.Slice(n, 2*n), x.lin[:3])
	x.rescale3(ys, target, n)
	st.Add(h, h, ys.Slice(0, n))
	st.Add(h, h, ys.Slice(n, 2*n))
	st.AddScaled(h, h, ys.Slice(2*n, 3*n), 0.25) // the last sum and the mean's scale, as Add then Scale
	st.RMSNorm(h, h, m.t.norm, D, float32(m.Cfg.RMSNormEps))
	return h
}

// rescale3 multiplies each row of the three blocks of n rows of ys [3n, D]
// by target/max(rms(row), √1e-5), target [n] the same for each block.
func (x *Exec) rescale3(ys, target native.Tensor, n int) {
	D := x.m.Cfg.HiddenSize
	mag := x.mag.Sub(0, 1, 3*n)
	x.st.RowRMS(mag, ys, D, 1e-5)
	for k := 0; k < 3; k++ {
		mk := mag.Sub(k*n, 1, n)
		x.st.Div(mk, target, mk)
	}
	x.st.ScaleRows(ys, mag, D)
}

// altupStep gathers the operands of AltUp's step around layer y for the n
// rows: the router on x (tanh(router(norm(x)/D))), the coefficients
// out = modalities · cwᵀ (+ 1 when plus), the streams H [4, n, D] and their
// prediction pred, and the step's last result into res (by resW).
func (x *Exec) altupStep(y *layerTensors, in, cw, out native.Tensor, plus bool, H, pred, res, resW native.Tensor, n int) *native.AltUpStep {
	m := x.m
	D := m.Cfg.HiddenSize
	x.step = native.AltUpStep{
		Y: x.mod.Slice(0, n), F: x.f.Slice(0, n), X: in, NormW: y.routerNorm, W: y.router, CW: cw, CY: out,
		H: H, Pred: pred, Out: res, OutW: resW, Eps: float32(m.Cfg.RMSNormEps), Scale: 1 / float32(D), Add: 1,
		Plus: plus, N: n, Dim: D,
	}
	return &x.step
}

// layer runs decoder layer i over the n rows of the streams H [4, n, D]
// (updated in place) with their per-layer inputs ple [n, P]. pend >= 0:
// layer pend's per-layer input (its projection in x.o) is not yet in
// streams 1..3; this layer's AltUp predict step adds it first. Every layer
// but the last leaves its own so (one launch fewer a layer) and returns
// its index; the last adds it and returns -1 (see pleAdd).
func (x *Exec) layer(i int, H, ple native.Tensor, n, pend int) int {
	m, st := x.m, x.st
	cfg := m.Cfg
	y, w := &m.layers[i], &m.t.layers[i]
	D := cfg.HiddenSize
	eps := float32(cfg.RMSNormEps)
	rows := func(t native.Tensor) native.Tensor { return t.Slice(0, n) }
	pred, an, laur, o, xa := x.pred.Slice(0, 4*n), rows(x.an), rows(x.laur), rows(x.o), rows(x.x)

	// The previous layer's per-layer input, AltUp predict, then the input norm.
	pstep := x.altupStep(w, H.Slice(0, n), w.predCoefs, rows(x.coef), false, H, pred, an, w.inNorm, n)
	if pend >= 0 {
		pstep.Pre, pstep.PreW = rows(x.o), m.t.layers[pend].postPLENorm
	}
	st.AltUpPredictStep(pstep)
	a := pred.Slice(0, n)
	x.prefetchMLP(i, n)

	// The products of an, in one call: the queries, Laurel's left and,
	// for a layer with keys of its own, the keys and values.
	lr := rows(x.lr)
	x.lin[0] = native.LinearPart{Y: rows(x.q), W: w.q}
	x.lin[1] = native.LinearPart{Y: lr, W: w.laurelL}
	parts := x.lin[:2]
	if y.kvSrc == i {
		x.lin[2] = native.LinearPart{Y: rows(x.k), W: w.k}
		x.lin[3] = native.LinearPart{Y: rows(x.v), W: w.v}
		parts = x.lin[:4]
	}
	st.Linears(an, parts)

	// Attention, then its output product with Laurel's right matrix (of
	// its own input lr) in one call; the norm-add with Laurel's (laur =
	// an + norm(laur), xa = (a + norm(o) + laur)/√2) and the MLP's input
	// norm.
	x.attention(i, y, n)
	x.lin[0] = native.LinearPart{Y: o, W: w.o}
	x.lin[1] = native.LinearPart{Y: laur, W: w.laurelR, X: lr}
	st.Linears(x.att.Slice(0, n), x.lin[:2])
	f := rows(x.f) // the MLP's input: xa normalised
	st.NormAddMoreB(xa, o, w.postAttnNorm, a, laur, w.laurelNorm, an, D, eps, float32(1/math.Sqrt2), native.Tensor{}, f, w.preFFNorm)
	x.prefetchAttention(i+1, n)

	// MLP.
	I := y.inter
	g, u := x.g.Sub(0, n, I), x.u.Sub(0, n, I)
	d := rows(x.d)
	switch {
	case y.downT.DType == native.Q4: // activation sparsity: only the survivors' rows
		st.Linear(g, f, w.gate)
		st.SparseMLP(d, g, u, x.idx.Sub(0, n, I), f, w.up, w.downT, y.sparsityZ)
	case y.sparsityZ != 0:
		st.Linear(g, f, w.gate)
		st.Linear(u, f, w.up)
		st.SparseGeluMul(g, u, I, y.sparsityZ)
		st.Linear(d, g, w.down)
	default: // g = gelu(gate(f))·up(f): both products in one call (one pass where the backend pairs them)
		x.lin[0] = native.LinearPart{Y: g, W: w.gate}
		x.lin[1] = native.LinearPart{Y: u, W: w.up, GeluMul: g, GeluInto: true}
		st.Linears(f, x.lin[:2])
		st.Linear(d, g, w.down)
	}

	// The MLP's norm-add (xa += norm(d)), then AltUp correct; d = the
	// corrected first stream (scaled), the per-layer input's gate's input.
	var scale native.Tensor
	if cfg.AltUpCorrectScale {
		scale = w.correctScale
	}
	step := x.altupStep(w, xa, w.corrCoefs, x.coef.Sub(0, n, 4), true, H, pred, d, scale, n)
	step.Pre, step.PreW = d, w.postFFNorm
	st.AltUpCorrectStep(step)

	// Per-layer input, added to streams 1..3: by the next layer's predict
	// step, or here for the last layer.
	pg := rows(x.pg)
	x.lin[0] = native.LinearPart{Y: pg, W: w.pleGate, GeluMul: ple} // gelu(gate(d))·ple
	st.Linears(d, x.lin[:1])
	st.Linear(o, pg, w.pleProj)
	if i+1 < cfg.NumLayers {
		return i
	}
	x.pleAdd(i, H, n)
	return -1
}

// prefetchRows is the most rows a pass asks for its weights ahead
// (Stream.Prefetch): a decode step's, whose products wait on their
// weights; a prefill's products are long enough to stream their own.
const prefetchRows = 64

// prefetchMLP asks, as layer i's attention starts, for the weights its
// MLP and per-layer input read (of a layer with activation sparsity only
// the gate: the sparse MLP reads a few rows of the others).
func (x *Exec) prefetchMLP(i, n int) {
	if n > prefetchRows {
		return
	}
	w := &x.m.t.layers[i]
	if x.m.layers[i].downT.DType == native.Q4 {
		x.st.Prefetch(w.gate, w.pleGate, w.pleProj)
		return
	}
	x.st.Prefetch(w.gate, w.up, w.down, w.pleGate, w.pleProj)
}

// prefetchAttention asks, as the MLP before it starts, for the weights of
// layer i's attention and Laurel block (nothing past the last layer).
func (x *Exec) prefetchAttention(i, n int) {
	if n > prefetchRows || i >= x.m.Cfg.NumLayers {
		return
	}
	w := &x.m.t.layers[i]
	x.st.Prefetch(w.q, w.k, w.v, w.laurelL, w.laurelR, w.o)
}

// pleAdd adds layer i's per-layer input (its projection in x.o, normalised
// in place) to streams 1..3 of H's n rows.
func (x *Exec) pleAdd(i int, H native.Tensor, n int) {
	m := x.m
	D, eps := m.Cfg.HiddenSize, float32(m.Cfg.RMSNormEps)
	o, h1 := x.o.Slice(0, n), H.Slice(n, 2*n)
	h23 := H.Slice(2*n, 4*n) // streams 2 and 3 take o's normalised rows alike
	x.st.NormAddMore(h1, o, m.t.layers[i].postPLENorm, h1, native.Tensor{}, D, eps, 0, h23, native.Tensor{}, native.Tensor{})
}

// attention normalises and rotates layer i's queries (and, for layers
// with their own, keys and values, written to the pool), the products
// layer made, and computes its attention into x.att.
func (x *Exec) attention(i int, y *layer, n int) {
	m, st := x.m, x.st
	cfg := m.Cfg
	w := &m.t.layers[i]
	hd, eps := cfg.HeadDim, float32(cfg.RMSNormEps)
	q := x.q.Slice(0, n)
	pos := x.pos.Sub(0, 1, n)
	kind, slot := 0, x.slot0
	if y.sliding {
		kind, slot = 1, x.slot1
	}
	pk, pv := m.pool.Tensors(kind, y.kvSrc) // the layer's own, or its source's
	x.nr[0] = native.NormRoPEPart{X: q, W: w.qNorm, InvFreq: w.invFreq, Heads: cfg.NumHeads}
	parts := x.nr[:1]
	if y.kvSrc == i {
		k, v := x.k.Slice(0, n), x.v.Slice(0, n)
		// normalised, rotated (keys) and written to the pool's slots
		x.nr[1] = native.NormRoPEPart{X: k, W: w.kNorm, InvFreq: w.invFreq, To: pk, Heads: cfg.NumKVHeads}
		x.nr[2] = native.NormRoPEPart{X: v, To: pv, Heads: cfg.NumKVHeads}
		parts = x.nr[:3]
	}
	st.NormRoPEs(parts, eps, pos, hd, slot.Sub(0, 1, n))
	S := len(x.caches)
	st.Attention(&native.PagedAttn{
		Out: x.att.Slice(0, n), Q: q, K: pk, V: pv,
		QPos: pos, QSeq: x.qseq.Sub(0, 1, n), SeqEnt: x.seqEnt.Sub(kind*(S+1), 1, S+1),
		EntBlk: x.entBlk, EntPos: x.entPos, EntLen: x.entLen,
		HeadsQ: cfg.NumHeads, HeadsKV: cfg.NumKVHeads, HeadDim: hd, Block: KVBlock,
		Window: y.window(cfg), MaxKeys: x.attnKeys(), Scale: 1,
	})
}

// attnKeys is the attention's key capacity: the batch's longest sequence,
// or a recorded pass's capacity.
func (x *Exec) attnKeys() int {
	if x.keysArg > 0 {
		return x.keysArg
	}
	return x.maxKeys
}

func (y *layer) window(cfg Config) int {
	if y.sliding {
		return cfg.SlidingWindow
	}
	return 0
}
