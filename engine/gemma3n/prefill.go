package gemma3n

import (
	"verdict/engine/model"
	"verdict/engine/model/kit"
)

// Prefill runs the batch's rows (of any sequences) through Forward in
// chunks of the Exec's rows and returns the wanted outputs' hidden states
// on the host [outputs, D], in batch order (kit.Prefill).
func (x *Exec) Prefill(b *Batch) ([]float32, error) { return kit.Prefill("gemma3n", x, b) }

// Forward runs ids through the decoder on c (nil: a cache of its own,
// freed after) and returns the final normalised hidden states of every
// position [len(ids), D] on the host; a hook sees every layer
// (kit.Forward).
func (m *Model) Forward(c model.Cache, ids []int32, hook Hook) ([]float32, error) {
	return kit.Forward(m, c, ids, hook)
}

// Logits computes the soft-capped output logits [n, vocab] of host hidden
// states h [n, D] (kit.Logits).
func (m *Model) Logits(h []float32, n int) ([]float32, error) {
	return kit.Logits("gemma3n", m, h, n)
}

// Embed returns the scaled input embeddings of ids [len(ids), D] on the
// host (the tied embedding's rows, dequantised; kit.Embed).
func (m *Model) Embed(ids []int32) ([]float32, error) { return kit.Embed("gemma3n", m, ids) }
