package gemma3n

import "verdict/native"

// The model's costs, for benchmarks: the bytes a decode step must read and
// the arithmetic a forward pass does.

// layerMatrices lists a layer's matrices (those it holds).
func (y *layer) matrices() []native.Matrix {
	return []native.Matrix{y.q, y.k, y.v, y.o, y.gate, y.up, y.down, y.downT, y.router, y.predCoefs, y.corrCoefs,
		y.laurelL, y.laurelR, y.pleGate, y.pleProj}
}

// sparse reports whether the layer's MLP reads only the surviving rows.
func (y *layer) sparse() bool { return y.downT.DType == native.Q4 }

func vecBytes(vs ...[]float32) int64 {
	var n int64
	for _, v := range vs {
		n += int64(len(v)) * 4
	}
	return n
}

// WeightBytes reports the memory the decoder's weights take (packed, as
// stored, or float32), the per-layer embedding table excluded (it is read
// by row).
func (m *Model) WeightBytes() int64 {
	n := m.embed.Bytes() + m.pleProj.Bytes() + vecBytes(m.pleNorm, m.norm)
	for k := 0; k < 3; k++ {
		n += m.altupProj[k].Bytes() + m.altupUnemb[k].Bytes()
	}
	for i := range m.layers {
		y := &m.layers[i]
		for _, w := range y.matrices() {
			n += w.Bytes()
		}
		n += vecBytes(y.qNorm, y.kNorm, y.inNorm, y.postAttnNorm, y.preFFNorm, y.postFFNorm,
			y.routerNorm, y.correctScale, y.laurelNorm, y.postPLENorm)
	}
	return n
}

// DecodeBytes reports the bytes one decode step reads from memory at
// context length ctx (the new token included): every weight once (the
// output head is the whole embedding matrix; of a sparse MLP's up and
// downᵀ, the expected share of surviving rows), the token's per-layer
// embedding row, and the keys and values every layer attends over.
func (m *Model) DecodeBytes(ctx int) int64 {
	cfg := m.Cfg
	n := m.WeightBytes() + int64(cfg.NumLayers*cfg.PerLayerSize)*4
	for i := range m.layers {
		if y := &m.layers[i]; y.sparse() {
			n -= int64((1 - y.keep) * float64(y.up.Bytes()+y.downT.Bytes()))
		}
	}
	kv := int64(cfg.NumKVHeads*cfg.HeadDim) * 4 * 2
	for i := range m.layers {
		n += int64(m.layers[i].keys(cfg, ctx-1)) * kv
	}
	return n
}

// keys is the number of keys the query at position pos attends to.
func (y *layer) keys(cfg Config, pos int) int {
	if w := y.window(cfg); w > 0 && pos+1 > w {
		return w
	}
	return pos + 1
}

// matMACs is the multiply-adds of one token through the matrices of layer
// y (and what it uses of the shared ones).
func (y *layer) matMACs(m *Model, i int) float64 {
	var n float64
	for _, w := range []native.Matrix{y.q, y.o, y.gate, y.up, y.down, y.downT, y.router, y.laurelL, y.laurelR, y.pleGate, y.pleProj} {
		n += float64(w.Rows) * float64(w.Cols)
	}
	if y.sparse() { // only the surviving rows of up and downᵀ
		n -= (1 - y.keep) * (float64(y.up.Rows)*float64(y.up.Cols) + float64(y.downT.Rows)*float64(y.downT.Cols))
	}
	if y.kvSrc == i {
		n += float64(y.k.Rows)*float64(y.k.Cols) + float64(y.v.Rows)*float64(y.v.Cols)
	}
	// predict and correct coefficients: [n,4]·[16,4]ᵀ and [n,4]·[4,4]ᵀ
	return n + 16*4 + 4*4
}

// ForwardFLOPs reports the floating-point operations (2 a multiply-add) of
// the matrix products and attention of a forward pass over n tokens after
// ctx0 cached ones, of which the last outputs reach the output head. When
// consumers > 0, the KV-sharing layers run only the last consumers
// positions (a batch with consumers outputs wanted); 0 means all positions.
func (m *Model) ForwardFLOPs(n, ctx0, outputs, consumers int) float64 {
	cfg := m.Cfg
	D := float64(cfg.HiddenSize)
	first := cfg.NumLayers - cfg.NumKVSharedLayers
	// Embedding side: per-layer projection and the AltUp streams.
	perTok := float64(m.pleProj.Rows)*float64(m.pleProj.Cols) + 3*D*D
	macs := float64(n) * perTok
	hq := float64(cfg.NumHeads * cfg.HeadDim)
	for i := range m.layers {
		y := &m.layers[i]
		lo := 0
		if consumers > 0 && i >= first && cfg.NumKVSharedLayers > 0 {
			lo = max(0, n-consumers)
		}
		macs += float64(n-lo) * y.matMACs(m, i)
		for t := lo; t < n; t++ {
			macs += 2 * hq * float64(y.keys(cfg, ctx0+t)) // q·k and p·v
		}
	}
	last := n // positions out of the last layer
	if consumers > 0 && cfg.NumKVSharedLayers > 0 {
		last = min(n, consumers)
	}
	// Unmixing the streams, and the output head.
	macs += float64(last)*3*D*D + float64(outputs)*float64(m.embed.Rows)*D
	return 2 * macs
}
