package gemma4

import (
	"verdict/engine/model"
	"verdict/engine/model/kit"
)

// Embed returns the scaled input embeddings of ids [len(ids), D] on the
// host (kit.Embed).
func (d *Decoder) Embed(ids []int32) ([]float32, error) { return kit.Embed("gemma4", d, ids) }

// Forward runs ids through the decoder on c (nil: a cache of its own,
// freed after) and returns the final normalised hidden states of every
// position [len(ids), D] on the host; hook sees every layer (kit.Forward).
func (d *Decoder) Forward(c model.Cache, ids []int32, hook model.Hook) ([]float32, error) {
	return kit.Forward(d, c, ids, hook)
}

// Logits computes the soft-capped output logits [n, vocab] of host hidden
// states h [n, D] (kit.Logits).
func (d *Decoder) Logits(h []float32, n int) ([]float32, error) {
	return kit.Logits("gemma4", d, h, n)
}

// The decoder's costs, for the benchmarks and the session's info.

// weightSets lists the decoder's weights, by role: the embedding (the
// head too), the per-layer table, the experts of each layer, the rest.
func (d *Decoder) weightSets() (embed, perLayer, experts, rest int64) {
	m := d.Ref
	n := func(vs ...[]float32) int64 {
		var s int64
		for _, v := range vs {
			s += int64(len(v))
		}
		return s
	}
	embed, perLayer = n(m.Embed), n(m.EmbedPL)
	rest = n(m.PLProj, m.PLNorm, m.Norm)
	for i := range m.Layers {
		y := &m.Layers[i]
		experts += n(y.ExpertGateUp, y.ExpertDown)
		rest += n(y.InputNorm, y.PostAttnNorm, y.Q, y.QNorm, y.K, y.V, y.KNorm, y.O, y.PreFFNorm, y.PostFFNorm,
			y.Gate, y.Up, y.Down, y.PLEGate, y.PLEProj, y.PLENorm, y.RouterProj, y.RouterScale, y.PerExpertScale,
			y.PostFFNorm1, y.PostFFNorm2, y.PreFFNorm2) + 1 // layer_scalar
	}
	return
}

// Params counts the decoder's parameters.
func (d *Decoder) Params() int64 {
	e, p, x, r := d.weightSets()
	return e + p + x + r
}

// WeightBytes reports the memory the decoder's weights take (float32).
func (d *Decoder) WeightBytes() int64 { return 4 * d.Params() }

// ResidentBytes is 0: the decoder keeps no table besides its weights.
func (d *Decoder) ResidentBytes() int64 { return 0 }

// keys is the number of keys the query at position pos of layer l sees.
func (c *Config) keys(l, pos int) int {
	if c.LayerTypes[l] == Sliding && pos+1 > c.SlidingWindow {
		return c.SlidingWindow
	}
	return pos + 1
}

// DecodeBytes reports the bytes one decode step reads at context length ctx
// (the new token included): every weight once but the per-layer table (one
// row) and the experts (the K of E a token chooses, on average), and the
// keys and values every layer attends over.
func (d *Decoder) DecodeBytes(ctx int) int64 {
	c := d.cfg
	e, _, x, r := d.weightSets()
	n := e + r + int64(c.Layers*c.PerLayerInput)
	if c.MoE {
		n += x * int64(c.TopK) / int64(c.Experts)
	}
	n *= 4
	for l := range c.Layers {
		n += int64(c.keys(l, max(ctx-1, 0))) * int64(c.LayerKVHeads(l)*c.LayerHeadDim(l)) * 2 * 4
	}
	return n
}

// ForwardFLOPs reports the floating-point operations (2 a multiply-add) of
// the matrix products and attention of a pass over n tokens after ctx0
// cached ones, outputs of them reaching the head. Every row runs every
// layer, so consumers does not change it.
func (d *Decoder) ForwardFLOPs(n, ctx0, outputs, consumers int) float64 {
	c := d.cfg
	D := float64(c.Hidden)
	macs := float64(n) * float64(c.Layers*c.PerLayerInput) * D
	for l := range c.Layers {
		y := &d.Ref.Layers[l]
		hd, kvd := float64(c.Heads*y.headDim), float64(y.kvH*y.headDim)
		per := 2*hd*D + 3*float64(y.intermediate)*D + 2*float64(c.PerLayerInput)*D
		if !c.KVShared(l) {
			per += kvd * D
			if !c.VIsK(l) {
				per += kvd * D
			}
		}
		if c.MoE {
			per += float64(c.Experts)*D + float64(c.TopK)*3*float64(c.MoEIntermediate)*D
		}
		macs += float64(n) * per
		for t := range n {
			macs += 2 * hd * float64(c.keys(l, ctx0+t)) // q·k and p·v
		}
	}
	macs += float64(outputs) * float64(c.Vocab) * D
	return 2 * macs
}

// HeadBytes reports the bytes of weights the dense head reads (the tied
// embedding) and the sparse head reads for rows rows.
func (d *Decoder) HeadBytes(rows int) (dense, sparse int64) {
	c := d.cfg
	return 4 * int64(c.Vocab) * int64(c.Hidden), 4 * int64(rows) * int64(c.Hidden)
}
