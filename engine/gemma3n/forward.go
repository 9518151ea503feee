package gemma3n

import (
	"fmt"
	"math"

	"verdict/native"
)

// Cache holds the keys and values of every position processed so far, for the
// layers that compute their own (KV-shared layers read their source's).
type Cache struct {
	n        int
	k, v     [][]float32 // per layer: [n, kvHeads·headDim]; nil for shared layers
	progress func(done, total int)
}

// OnLayer makes every later forward pass on c report the decoder layers
// done of those it runs, after each layer (nil stops the reports): a long
// prefill's progress.
func (c *Cache) OnLayer(f func(done, total int)) { c.progress = f }

// NewCache returns an empty cache for m.
func (m *Model) NewCache() *Cache {
	c := &Cache{k: make([][]float32, len(m.layers)), v: make([][]float32, len(m.layers))}
	return c
}

// Len reports the number of positions in the cache.
func (c *Cache) Len() int { return c.n }

// Clone returns an independent copy of c (a fork of its positions).
func (c *Cache) Clone() *Cache {
	d := &Cache{n: c.n, k: make([][]float32, len(c.k)), v: make([][]float32, len(c.v))}
	for i := range c.k {
		if c.k[i] != nil {
			d.k[i], d.v[i] = append([]float32(nil), c.k[i]...), append([]float32(nil), c.v[i]...)
		}
	}
	return d
}

// Truncate drops every position at or after n.
func (c *Cache) Truncate(n int) {
	if n >= c.n {
		return
	}
	for i := range c.k {
		if c.k[i] != nil {
			w := len(c.k[i]) / c.n
			c.k[i], c.v[i] = c.k[i][:n*w], c.v[i][:n*w]
		}
	}
	c.n = n
}

// Hook, when given to Forward, receives stream 0 of the hidden state [n, D]
// after the embeddings (layer −1) and after every layer, as transformers'
// output_hidden_states reports them. It must not keep the slice.
type Hook func(layer int, h []float32)

// Forward runs ids through the decoder at positions c.Len().., appends their
// keys and values to c, and returns the final normalised hidden states
// [len(ids), D] (the input of the output head).
func (m *Model) Forward(c *Cache, ids []int32, hook Hook) ([]float32, error) {
	for _, id := range ids {
		if id < 0 || int(id) >= m.Cfg.VocabSize {
			return nil, fmt.Errorf("gemma3n: token id %d outside the vocabulary of %d", id, m.Cfg.VocabSize)
		}
	}
	e, err := m.Embed(ids)
	if err != nil {
		return nil, err
	}
	return m.ForwardEmbeds(c, ids, e, hook)
}

// Embed returns the scaled token embeddings [len(ids), D].
func (m *Model) Embed(ids []int32) ([]float32, error) {
	D := m.Cfg.HiddenSize
	e := make([]float32, len(ids)*D)
	for t, id := range ids {
		m.embed.ReadRows(e[t*D:(t+1)*D], int(id)) // q4: dequantizes the one row
	}
	native.Scale(e, m.embedScale)
	return e, nil
}

// perLayerInputs computes Gemma 3n's per-layer inputs for the merged
// embeddings e, laid out layer-major: [L, n, P].
func (m *Model) perLayerInputs(ids []int32, e []float32) ([]float32, error) {
	cfg := m.Cfg
	n, D, P, L := len(ids), cfg.HiddenSize, cfg.PerLayerSize, cfg.NumLayers
	proj := make([]float32, n*L*P)
	native.Linear(proj, e, m.pleProj, n)
	native.Scale(proj, float32(1/math.Sqrt(float64(D))))
	native.RMSNorm(proj, proj, m.pleNorm, P, float32(cfg.RMSNormEps))
	tok := make([]float32, L*P)
	out := make([]float32, L*n*P)
	for t, id := range ids {
		if id < 0 || int(id) >= cfg.VocabSizePerLayer {
			id = 0
		}
		if err := m.store.Rows(m.pleName, int(id), tok); err != nil {
			return nil, fmt.Errorf("gemma3n: per-layer embedding of token %d: %w", id, err)
		}
		native.Scale(tok, m.pleScale)
		native.Add(tok, tok, proj[t*L*P:(t+1)*L*P])
		for l := 0; l < L; l++ {
			copy(out[(l*n+t)*P:(l*n+t+1)*P], tok[l*P:(l+1)*P])
		}
	}
	native.Scale(out, float32(1/math.Sqrt2))
	return out, nil
}

// ForwardLast is Forward for callers that need only the final hidden
// states of the last keep positions (generation: 1; a prefix whose keys and
// values are all that is wanted: 0): it returns [min(keep, n), D], the same
// values as the last rows of Forward's result, bit for bit. The KV-sharing
// layers write no keys or values, so they run only those positions.
func (m *Model) ForwardLast(c *Cache, ids []int32, keep int) ([]float32, error) {
	for _, id := range ids {
		if id < 0 || int(id) >= m.Cfg.VocabSize {
			return nil, fmt.Errorf("gemma3n: token id %d outside the vocabulary of %d", id, m.Cfg.VocabSize)
		}
	}
	e, err := m.Embed(ids)
	if err != nil {
		return nil, err
	}
	return m.ForwardEmbedsLast(c, ids, e, keep)
}

// ForwardEmbedsLast is ForwardLast with the input embeddings given.
func (m *Model) ForwardEmbedsLast(c *Cache, ids []int32, e []float32, keep int) ([]float32, error) {
	return m.forward(c, ids, e, nil, max(keep, 0))
}

// ForwardEmbeds is Forward with the input embeddings given (multimodal
// positions already merged); ids still choose the per-layer token embeddings.
func (m *Model) ForwardEmbeds(c *Cache, ids []int32, e []float32, hook Hook) ([]float32, error) {
	return m.forward(c, ids, e, hook, len(ids))
}

// PositionsError reports a sequence longer than the model's
// max_position_embeddings.
type PositionsError struct{ Positions, Max int }

func (e *PositionsError) Error() string {
	return fmt.Sprintf("gemma3n: %d tokens exceed the model's max_position_embeddings of %d", e.Positions, e.Max)
}

// checkPositions refuses a sequence of n positions beyond the model's
// max_position_embeddings.
func (m *Model) checkPositions(n int) error {
	if max := m.Cfg.MaxPositionEmbeddings; max > 0 && n > max {
		return &PositionsError{n, max}
	}
	return nil
}

// forward runs the decoder for one sequence; the KV-sharing layers run only
// the last keep positions (all of them when a hook wants every layer's states).
func (m *Model) forward(c *Cache, ids []int32, e []float32, hook Hook, keep int) ([]float32, error) {
	out, err := m.forwardSeqs([]Seq{{Cache: c, IDs: ids, Embeds: e, Keep: keep}}, hook)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// streams builds the four AltUp streams [4, n, D] from the embeddings e:
// e itself and three projections rescaled to e's RMS.
func (m *Model) streams(e []float32, n int) []float32 {
	nd := n * m.Cfg.HiddenSize
	H := make([]float32, 4*nd)
	copy(H, e)
	target := make([]float32, n)
	mag := make([]float32, n)
	native.RowRMS(target, e, m.Cfg.HiddenSize, 0)
	for k := 1; k < 4; k++ {
		s := H[k*nd : (k+1)*nd]
		native.Linear(s, e, m.altupProj[k-1], n)
		m.rescale(s, target, mag)
	}
	return H
}

// unmix averages stream 0 with the rescaled unembedding projections of the
// other streams and applies the final norm: [n, D].
func (m *Model) unmix(H []float32, n int, w *work) []float32 {
	D := m.Cfg.HiddenSize
	nd := n * D
	h := make([]float32, nd)
	copy(h, H[:nd])
	target := make([]float32, n)
	mag := make([]float32, n)
	native.RowRMS(target, H[:nd], D, 0)
	y := w.d[:nd]
	for k := 1; k < 4; k++ {
		native.Linear(y, H[k*nd:(k+1)*nd], m.altupUnemb[k-1], n)
		m.rescale(y, target, mag)
		native.Add(h, h, y)
	}
	native.Scale(h, 0.25)
	native.RMSNorm(h, h, m.norm, D, float32(m.Cfg.RMSNormEps))
	return h
}

// rescale multiplies each row of y by target/max(rms(y), √1e-5).
func (m *Model) rescale(y, target, mag []float32) {
	native.RowRMS(mag, y, m.Cfg.HiddenSize, 1e-5)
	native.Div(mag, target, mag)
	native.ScaleRows(y, mag, m.Cfg.HiddenSize)
}

// work holds one forward pass's scratch buffers.
type work struct {
	pred, a, an, laur, q, k, v, att, o, x, f, g, u, d, mod, coef, lr, pg []float32
	idx                                                                  []int32 // sparse MLP scratch
}

func newWork(m *Model, n int) *work {
	cfg := m.Cfg
	D, qd, kd := cfg.HiddenSize, cfg.NumHeads*cfg.HeadDim, cfg.NumKVHeads*cfg.HeadDim
	I := 0
	for _, v := range cfg.IntermediateSize {
		I = max(I, v)
	}
	f := func(k int) []float32 { return make([]float32, k) }
	return &work{
		pred: f(4 * n * D), an: f(n * D), laur: f(n * D), q: f(n * qd), k: f(n * kd), v: f(n * kd),
		att: f(n * qd), o: f(n * D), x: f(n * D), f: f(n * D), g: f(n * I), u: f(n * I), d: f(n * D),
		mod: f(n * 4), coef: f(n * 16), lr: f(n * cfg.LaurelRank), pg: f(n * cfg.PerLayerSize),
		idx: make([]int32, n*I),
	}
}

// modalities computes the AltUp router output tanh(router(norm(x)/D)) [n, 4].
func (m *Model) modalities(y *layer, x []float32, w *work, n int) []float32 {
	D := m.Cfg.HiddenSize
	native.RMSNorm(w.f, x, y.routerNorm, D, float32(m.Cfg.RMSNormEps))
	native.Scale(w.f, 1/float32(D))
	native.Linear(w.mod, w.f, y.router, n)
	native.Tanh(w.mod)
	return w.mod
}

// layer runs decoder layer i over the n tokens of the streams H (updated in
// place); attend fills w.att from w.an for this layer's attention.
func (m *Model) layer(i int, H, ple []float32, n int, w *work, attend func(y *layer)) {
	cfg := m.Cfg
	y := &m.layers[i]
	D, P := cfg.HiddenSize, cfg.PerLayerSize
	nd := n * D
	eps := float32(cfg.RMSNormEps)

	// AltUp predict.
	native.Linear(w.coef, m.modalities(y, H[:nd], w, n), y.predCoefs, n)
	native.AltUpPredict(w.pred, H, w.coef, n, D)
	a := w.pred[:nd]
	native.RMSNorm(w.an, a, y.inNorm, D, eps)

	// Laurel: an + norm(right(left(an))).
	native.Linear(w.lr, w.an, y.laurelL, n)
	native.Linear(w.laur, w.lr, y.laurelR, n)
	native.RMSNorm(w.laur, w.laur, y.laurelNorm, D, eps)
	native.Add(w.laur, w.laur, w.an)

	// Attention.
	m.project(i, y, n, w)
	attend(y)
	native.Linear(w.o, w.att, y.o, n)
	native.RMSNorm(w.o, w.o, y.postAttnNorm, D, eps)
	native.Add(w.x, a, w.o)
	native.AddScaled(w.x, w.laur, float32(1/math.Sqrt2))

	// MLP.
	I := y.inter
	native.RMSNorm(w.f, w.x, y.preFFNorm, D, eps)
	g, u := w.g[:n*I], w.u[:n*I]
	native.Linear(g, w.f, y.gate, n)
	if y.downT.DType == native.Q4 { // activation sparsity: only the survivors' rows
		native.SparseMLPQ4(w.d, g, u, w.idx[:n*I], w.f, y.up, y.downT, n, y.sparsityZ)
	} else {
		native.Linear(u, w.f, y.up, n)
		if y.sparsityZ != 0 {
			native.SparseGeluMul(g, u, I, y.sparsityZ)
		} else {
			native.GeluMul(g, u)
		}
		native.Linear(w.d, g, y.down, n)
	}
	native.RMSNorm(w.d, w.d, y.postFFNorm, D, eps)
	native.Add(w.x, w.x, w.d) // activated

	// AltUp correct.
	corr := w.coef[:n*4]
	native.Linear(corr, m.modalities(y, w.x, w, n), y.corrCoefs, n)
	native.AddConst(corr, 1)
	native.AltUpCorrect(H, w.pred, w.x, corr, n, D)

	// Per-layer input, added to streams 1..3.
	copy(w.d, H[:nd])
	if cfg.AltUpCorrectScale {
		native.MulRows(w.d, y.correctScale)
	}
	native.Linear(w.pg, w.d, y.pleGate, n)
	native.GeluTanh(w.pg)
	native.Mul(w.pg, w.pg, ple[:n*P])
	native.Linear(w.o, w.pg, y.pleProj, n)
	native.RMSNorm(w.o, w.o, y.postPLENorm, D, eps)
	for k := 1; k < 4; k++ {
		s := H[k*nd : (k+1)*nd]
		native.Add(s, s, w.o)
	}
}

// project computes the layer's queries into w.q and, for layers with their
// own keys and values, w.k and w.v (normalised, not yet rotated).
func (m *Model) project(i int, y *layer, n int, w *work) {
	cfg := m.Cfg
	hd, eps := cfg.HeadDim, float32(cfg.RMSNormEps)
	native.Linear(w.q[:n*cfg.NumHeads*hd], w.an[:n*cfg.HiddenSize], y.q, n)
	native.RMSNorm(w.q, w.q, y.qNorm, hd, eps)
	if y.kvSrc == i {
		kd := n * cfg.NumKVHeads * hd
		native.Linear(w.k[:kd], w.an[:n*cfg.HiddenSize], y.k, n)
		native.RMSNorm(w.k[:kd], w.k[:kd], y.kNorm, hd, eps)
		native.Linear(w.v[:kd], w.an[:n*cfg.HiddenSize], y.v, n)
		native.RMSNorm(w.v[:kd], w.v[:kd], nil, hd, eps)
	}
}

func (y *layer) window(cfg Config) int {
	if y.sliding {
		return cfg.SlidingWindow
	}
	return 0
}

// cacheAttention rotates the projections of the n = len(pos) rows from row
// off of w to their positions, appends keys and values to c and attends
// over c's first nk keys.
func (m *Model) cacheAttention(i int, y *layer, c *Cache, pos []int32, nk int, w *work, off int) {
	cfg := m.Cfg
	n, hd := len(pos), cfg.HeadDim
	qd, kd := cfg.NumHeads*hd, cfg.NumKVHeads*hd
	q := w.q[off*qd : (off+n)*qd]
	native.RoPE(q, pos, cfg.NumHeads, hd, y.invFreq)
	if y.kvSrc == i {
		k := w.k[off*kd : (off+n)*kd]
		native.RoPE(k, pos, cfg.NumKVHeads, hd, y.invFreq)
		c.k[i] = append(c.k[i], k...)
		c.v[i] = append(c.v[i], w.v[off*kd:(off+n)*kd]...)
	}
	native.Attention(w.att[off*qd:(off+n)*qd], q, c.k[y.kvSrc], c.v[y.kvSrc], native.AttnParams{
		NQ: n, NK: nk, HeadsQ: cfg.NumHeads, HeadsKV: cfg.NumKVHeads, HeadDim: hd,
		QPos: pos, Window: y.window(cfg), Scale: 1,
	})
}
