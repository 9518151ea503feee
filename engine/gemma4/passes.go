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
