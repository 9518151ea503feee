package gemma4

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

func sqrt64(x float64) float64 { return math.Sqrt(x) }

// Cache is the KV cache of one sequence: per layer that stores K/V (the
// KV-shared layers read their source layer's), the normed and rotated keys
// and the normed values of every position so far, [pos][H_kv·d]. Sliding
// layers keep every position too; the mask bounds what they read.
type Cache struct {
	k, v [][]float32
	n    int
}

// NewCache returns an empty cache for m.
func (m *Model) NewCache() *Cache {
	L := m.Cfg.Layers
	return &Cache{k: make([][]float32, L), v: make([][]float32, L)}
}

// Len is the number of positions cached.
func (c *Cache) Len() int { return c.n }

// Trace receives intermediate values of a Forward (any field may be left
// nil by the caller; Forward fills them all).
type Trace struct {
	// Hidden[0] is the scaled embedding, Hidden[l+1] layer l's output (after
	// layer_scalar, before the final norm); each [n·D].
	Hidden [][]float32
	// PerLayerInputs is [n, L, P] (PLE only).
	PerLayerInputs []float32
	// RouterProbs[l] is [n·E]; TopKIndex[l] and TopKWeights[l] are [n·K] in
	// descending probability (MoE only).
	RouterProbs [][]float32
	TopKIndex   [][]int
	TopKWeights [][]float32
}

// MaxPositions bounds a cache (prompt and generated tokens).
const MaxPositions = 1 << 20

// Forward runs ids at positions cache.Len().. and returns their logits
// [len(ids)·V] (soft-capped), appending their K and V to cache. cache nil
// runs without one (a fresh cache that is dropped). tr, when not nil,
// receives the intermediate values.
func (m *Model) Forward(ids []int, cache *Cache, tr *Trace) ([]float32, error) {
	c := m.Cfg
	n := len(ids)
	if n == 0 {
		return nil, errors.New("gemma4: Forward of no tokens")
	}
	if cache == nil {
		cache = m.NewCache()
	}
	if cache.n+n > MaxPositions {
		return nil, fmt.Errorf("gemma4: %d positions, at most %d", cache.n+n, MaxPositions)
	}
	for i, t := range ids {
		if t < 0 || t >= c.Vocab {
			return nil, fmt.Errorf("gemma4: token %d (at %d) is outside the vocabulary of %d", t, i, c.Vocab)
		}
	}
	// 1. Embeddings: E[t] · float32(√D).
	D := c.Hidden
	h := make([]float32, n*D)
	for i, t := range ids {
		row := m.Embed[t*D : (t+1)*D]
		for j, v := range row {
			h[i*D+j] = v * m.embScale
		}
	}
	return m.forward(h, ids, nil, cache, tr)
}

// ForwardEmbeds is Forward from given input embeddings e [n·D] (a
// multimodal prompt's merged embeddings, MergeMedia): ids [n] are the ids
// the per-layer table reads (pad_token_id on media positions). e is not
// changed. Attention is causal (ForwardMedia applies the image-block mask).
func (m *Model) ForwardEmbeds(e []float32, ids []int, cache *Cache, tr *Trace) ([]float32, error) {
	return m.forwardEmbeds(e, ids, nil, cache, tr)
}

// forwardEmbeds is ForwardEmbeds whose positions see, on the sliding
// layers, keys up to lim[i] (absolute positions, at least their own, within
// this call; nil: causal).
func (m *Model) forwardEmbeds(e []float32, ids []int, lim []int, cache *Cache, tr *Trace) ([]float32, error) {
	c := m.Cfg
	n := len(ids)
	switch {
	case n == 0:
		return nil, errors.New("gemma4: ForwardEmbeds of no positions")
	case len(e) != n*c.Hidden:
		return nil, fmt.Errorf("gemma4: ForwardEmbeds: %d embedding values for %d positions of %d", len(e), n, c.Hidden)
	}
	if cache == nil {
		cache = m.NewCache()
	}
	if cache.n+n > MaxPositions {
		return nil, fmt.Errorf("gemma4: %d positions, at most %d", cache.n+n, MaxPositions)
	}
	vpl := c.Vocab
	if c.PerLayerInput > 0 {
		vpl = min(vpl, c.VocabPerLayerInput)
	}
	for i, t := range ids {
		if t < 0 || t >= vpl {
			return nil, fmt.Errorf("gemma4: per-layer id %d (at %d) is outside the vocabulary of %d", t, i, vpl)
		}
	}
	for i, v := range e {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("gemma4: ForwardEmbeds: embedding value %d of position %d is %v", i%c.Hidden, i/c.Hidden, v)
		}
	}
	if lim != nil {
		if len(lim) != n {
			return nil, fmt.Errorf("gemma4: ForwardEmbeds: %d key limits for %d positions", len(lim), n)
		}
		for i, l := range lim {
			if p := cache.n + i; l < p || l >= cache.n+n {
				return nil, fmt.Errorf("gemma4: ForwardEmbeds: position %d's key limit %d is outside [%d, %d)", p, l, p, cache.n+n)
			}
		}
	}
	return m.forward(clone(e), ids, lim, cache, tr)
}

// forward runs the input embeddings h [n·D] (overwritten) of positions
// whose per-layer ids are ids from cache.Len() on (GEMMA4.md §2-6). lim,
// when not nil, is each position's last key on the sliding layers
// (blockLimits; nil: its own).
func (m *Model) forward(h []float32, ids []int, lim []int, cache *Cache, tr *Trace) ([]float32, error) {
	c := m.Cfg
	n := len(ids)
	D, L, P := c.Hidden, c.Layers, c.PerLayerInput
	pos0 := cache.n
	if tr != nil {
		tr.Hidden = append(tr.Hidden[:0], clone(h))
	}

	// 2. Per-layer inputs: pli = (RMSNorm_P(W_plp h⁰ · D^-0.5) + E_pl[t] · √P) · 2^-0.5.
	var pli []float32
	if P > 0 {
		LP := L * P
		pli = make([]float32, n*LP)
		projScale := float32(math.Pow(float64(D), -0.5))
		inScale := float32(math.Pow(2, -0.5))
		for i, t := range ids {
			out := pli[i*LP : (i+1)*LP]
			matVec(out, m.PLProj, h[i*D:(i+1)*D])
			for j := range out {
				out[j] *= projScale
			}
			for l := range L {
				rmsNorm(out[l*P:(l+1)*P], out[l*P:(l+1)*P], m.PLNorm, c.Eps)
			}
			tok := m.EmbedPL[t*LP : (t+1)*LP]
			for j := range out {
				out[j] = (out[j] + tok[j]*m.pleScale) * inScale
			}
		}
		if tr != nil {
			tr.PerLayerInputs = clone(pli)
		}
	}
	if tr != nil && c.MoE {
		tr.RouterProbs = make([][]float32, L)
		tr.TopKIndex = make([][]int, L)
		tr.TopKWeights = make([][]float32, L)
	}

	// 3. The decoder layers, each over all n tokens.
	s := newScratch(m, n, cache.n+n)
	for l := range L {
		m.layer(l, h, pli, pos0, lim, cache, s, tr)
		if tr != nil {
			tr.Hidden = append(tr.Hidden, clone(h))
		}
	}
	cache.n += n

	// 6. Output: final norm, tied head, soft-cap.
	V := c.Vocab
	logits := make([]float32, n*V)
	x := make([]float32, D)
	for i := range n {
		rmsNorm(x, h[i*D:(i+1)*D], m.Norm, c.Eps)
		out := logits[i*V : (i+1)*V]
		matVec(out, m.Embed, x)
		if c.SoftCap > 0 {
			softCap(out, c.SoftCap)
		}
	}
	return logits, nil
}

// Generate runs the prompt through a fresh cache and then picks n tokens
// greedily, feeding each back one at a time (no stop token).
func (m *Model) Generate(ids []int, n int) ([]int, error) {
	cache := m.NewCache()
	logits, err := m.Forward(ids, cache, nil)
	if err != nil {
		return nil, err
	}
	V := m.Cfg.Vocab
	out := make([]int, 0, n)
	row := logits[len(logits)-V:]
	for len(out) < n {
		t := argmax(row)
		out = append(out, t)
		if len(out) == n {
			break
		}
		if row, err = m.Forward([]int{t}, cache, nil); err != nil {
			return out, err
		}
	}
	return out, nil
}

// scratch holds a Forward's work buffers.
type scratch struct {
	a, att, f, moe, x []float32 // [D]-sized (att: [H·d_max])
	q                 []float32 // [n·H·d_max]
	g, u              []float32 // [I'_max]
	scores            []float32 // [total positions]
	pg                []float32 // [P]
	logit             []float32 // [E]
	eg                []float32 // [2·I_e]
}

func newScratch(m *Model, n, total int) *scratch {
	c := m.Cfg
	dmax := max(c.HeadDim, c.GlobalHeadDim)
	imax := c.Intermediate
	if c.DoubleWideMLP {
		imax *= 2
	}
	return &scratch{
		a: make([]float32, c.Hidden), att: make([]float32, c.Heads*dmax), f: make([]float32, c.Hidden),
		moe: make([]float32, c.Hidden), x: make([]float32, c.Hidden),
		q: make([]float32, n*c.Heads*dmax), g: make([]float32, imax), u: make([]float32, imax),
		scores: make([]float32, total), pg: make([]float32, c.PerLayerInput),
		logit: make([]float32, c.Experts), eg: make([]float32, 2*c.MoEIntermediate),
	}
}

// layer runs decoder layer l over the n tokens of h in place (GEMMA4.md §3-5).
// On a sliding layer token i sees keys up to lim[i] (nil: its own).
func (m *Model) layer(l int, h, pli []float32, pos0 int, lim []int, cache *Cache, s *scratch, tr *Trace) {
	c := m.Cfg
	ly := &m.Layers[l]
	D, H, d, kvH := c.Hidden, c.Heads, ly.headDim, ly.kvH
	n := len(h) / D
	typ := c.LayerTypes[l]
	rt := &m.rope[typ]
	Hd, kvd := H*d, kvH*d

	// Attention: queries of every token, then this layer's K/V appended.
	q := s.q[:n*Hd]
	for i := range n {
		rmsNorm(s.a, h[i*D:(i+1)*D], ly.InputNorm, c.Eps)
		qi := q[i*Hd : (i+1)*Hd]
		matVec(qi, ly.Q, s.a)
		rmsNormHeads(qi, ly.QNorm, d, c.Eps)
		rt.rope(qi, pos0+i)
		if !c.KVShared(l) {
			k := make([]float32, kvd)
			v := make([]float32, kvd)
			matVec(k, ly.K, s.a)
			if ly.V != nil {
				matVec(v, ly.V, s.a)
			} else {
				copy(v, k) // attention_k_eq_v: the raw K projection, before k_norm and RoPE
			}
			rmsNormHeads(k, ly.KNorm, d, c.Eps)
			rt.rope(k, pos0+i)
			rmsNormHeads(v, nil, d, c.Eps)
			cache.k[l] = append(cache.k[l], k...)
			cache.v[l] = append(cache.v[l], v...)
		}
	}
	src := c.KVSource(l)
	kc, vc := cache.k[src], cache.v[src]
	group := H / kvH
	for i := range n {
		pos := pos0 + i
		lo, end := 0, pos+1
		if typ == Sliding {
			// The window counts back from the query's own position; an image
			// block's query also sees the block's later keys (lim).
			lo = max(0, pos-c.SlidingWindow+1)
			if lim != nil {
				end = lim[i] + 1
			}
		}
		att := s.att[:Hd]
		for hh := range H {
			attendHead(att[hh*d:(hh+1)*d], q[i*Hd+hh*d:i*Hd+(hh+1)*d], kc, vc, kvd, (hh/group)*d, lo, end, s.scores)
		}
		hi := h[i*D : (i+1)*D]
		matVec(s.x, ly.O, att)
		rmsNorm(s.x, s.x, ly.PostAttnNorm, c.Eps)
		for j := range hi {
			hi[j] += s.x[j]
		}
	}

	// Feed-forward, per token: dense MLP (+ experts), PLE, layer_scalar.
	I := ly.intermediate
	for i := range n {
		r := h[i*D : (i+1)*D]
		rmsNorm(s.a, r, ly.PreFFNorm, c.Eps)
		g, u := s.g[:I], s.u[:I]
		matVec(g, ly.Gate, s.a)
		matVec(u, ly.Up, s.a)
		gatedGelu(g, u)
		matVec(s.f, ly.Down, g)
		if c.MoE {
			m.moe(l, i, n, r, s, tr)
			rmsNorm(s.f, s.f, ly.PostFFNorm1, c.Eps)
			rmsNorm(s.moe, s.moe, ly.PostFFNorm2, c.Eps)
			for j := range s.f {
				s.f[j] += s.moe[j]
			}
		}
		rmsNorm(s.f, s.f, ly.PostFFNorm, c.Eps)
		for j := range r {
			r[j] += s.f[j]
		}
		if P := c.PerLayerInput; P > 0 {
			pg := s.pg
			matVec(pg, ly.PLEGate, r)
			in := pli[(i*c.Layers+l)*P : (i*c.Layers+l+1)*P]
			for j := range pg {
				pg[j] = geluTanh(pg[j]) * in[j]
			}
			matVec(s.x, ly.PLEProj, pg)
			rmsNorm(s.x, s.x, ly.PLENorm, c.Eps)
			for j := range r {
				r[j] += s.x[j]
			}
		}
		for j := range r {
			r[j] *= ly.Scalar
		}
	}
}

// moe writes the experts' weighted sum for token i (residual r) into s.moe
// (GEMMA4.md §5): the router on its own weightless norm of r, top-K of the
// softmax renormalised and scaled per expert, the experts on
// pre_feedforward_layernorm_2(r), summed in ascending expert id (index_add_).
func (m *Model) moe(l, i, n int, r []float32, s *scratch, tr *Trace) {
	c := m.Cfg
	ly := &m.Layers[l]
	D, E, K, Ie := c.Hidden, c.Experts, c.TopK, c.MoEIntermediate
	rootD := float32(math.Pow(float64(D), -0.5))
	rmsNorm(s.x, r, nil, c.Eps)
	for j := range s.x {
		s.x[j] = s.x[j] * ly.RouterScale[j] * rootD
	}
	p := s.logit[:E]
	matVec(p, ly.RouterProj, s.x)
	idx, w := route(p, K, ly.PerExpertScale)
	if tr != nil {
		if tr.RouterProbs[l] == nil {
			tr.RouterProbs[l] = make([]float32, n*E)
			tr.TopKIndex[l] = make([]int, n*K)
			tr.TopKWeights[l] = make([]float32, n*K)
		}
		copy(tr.RouterProbs[l][i*E:], p)
		copy(tr.TopKIndex[l][i*K:], idx)
		copy(tr.TopKWeights[l][i*K:], w)
	}

	rmsNorm(s.a, r, ly.PreFFNorm2, c.Eps)
	clear(s.moe)
	order := make([]int, K)
	for k := range order {
		order[k] = k
	}
	sort.Slice(order, func(a, b int) bool { return idx[order[a]] < idx[order[b]] })
	gu := s.eg[:2*Ie]
	y := s.x
	for _, k := range order {
		e := idx[k]
		matVec(gu, ly.ExpertGateUp[e*2*Ie*D:(e+1)*2*Ie*D], s.a)
		g, u := gu[:Ie], gu[Ie:]
		gatedGelu(g, u)
		matVec(y, ly.ExpertDown[e*D*Ie:(e+1)*D*Ie], g)
		for j := range y {
			s.moe[j] += y[j] * w[k]
		}
	}
}

// route turns one token's router logits p [E] into its experts: the
// softmax (p is overwritten with it), the top K in descending probability
// (ties to the lower id), and their weights renormalised over the K and
// scaled per expert.
func route(p []float32, K int, perExpert []float32) (idx []int, w []float32) {
	softmax(p)
	idx = make([]int, len(p))
	for e := range idx {
		idx[e] = e
	}
	sort.SliceStable(idx, func(a, b int) bool { return p[idx[a]] > p[idx[b]] })
	idx = idx[:K]
	w = make([]float32, K)
	var sum float32
	for k, e := range idx {
		w[k] = p[e]
		sum += w[k]
	}
	for k, e := range idx {
		w[k] = w[k] / sum * perExpert[e]
	}
	return idx, w
}

func clone(x []float32) []float32 { return append([]float32(nil), x...) }
