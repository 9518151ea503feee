package gemma3n

import (
	"fmt"

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
// host (the tied embedding's rows, dequantised).
func (m *Model) Embed(ids []int32) ([]float32, error) {
	for _, id := range ids {
		if id < 0 || int(id) >= m.Cfg.VocabSize {
			return nil, fmt.Errorf("gemma3n: token id %d outside the vocabulary of %d", id, m.Cfg.VocabSize)
		}
	}
	x, err := m.acquire()
	if err != nil {
		return nil, err
	}
	defer x.Release()
	D := m.Cfg.HiddenSize
	out := make([]float32, len(ids)*D)
	for lo := 0; lo < len(ids); lo += x.cap {
		n := min(x.cap, len(ids)-lo)
		x.st.UploadI32(x.ids.Sub(0, 1, n), ids[lo:lo+n])
		x.st.Embed(x.e.Slice(0, n), m.t.embed, x.ids.Sub(0, 1, n), m.embedScale)
		x.st.Download(out[lo*D:(lo+n)*D], x.e.Slice(0, n))
		if err := x.st.Sync(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
