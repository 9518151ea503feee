package gemma3n

import (
	"fmt"

	"verdict/engine/model"
	"verdict/native"
)

// Prefill runs the batch's rows (of any sequences) through Forward in
// chunks of the Exec's rows and returns the wanted outputs' hidden states
// on the host [outputs, D], in batch order (nil when none is wanted): for
// prompts longer than one batch. A hook sees every chunk's layers in turn.
func (x *Exec) Prefill(b *Batch) ([]float32, error) {
	D := x.m.Cfg.HiddenSize
	if len(b.Rows) == 0 {
		return nil, fmt.Errorf("gemma3n: empty input")
	}
	var out []float32
	rows := b.Rows
	for lo := 0; lo < len(rows); lo += x.cap {
		part := Batch{Rows: rows[lo:min(lo+x.cap, len(rows))], Embeds: b.Embeds, Hook: b.Hook}
		h, err := x.Forward(&part)
		if err != nil {
			return nil, err
		}
		if k := h.Rows(); k > 0 {
			o := len(out)
			out = append(out, make([]float32, k*D)...)
			x.st.Download(out[o:], h)
			if err := x.st.Sync(); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// Upload places host hidden states h [n, D] in the Exec's output tensor, for
// the heads (tests and tools that hold states on the host).
func (x *Exec) Upload(h []float32) (native.Tensor, error) {
	D := x.m.Cfg.HiddenSize
	n := len(h) / D
	if n*D != len(h) || n > x.cap {
		return native.Tensor{}, fmt.Errorf("gemma3n: %d values are not up to %d rows of %d", len(h), x.cap, D)
	}
	t := x.h.Slice(0, n)
	x.st.Upload(t, h)
	return t, x.st.Sync()
}

// Forward runs ids through the decoder on c (nil: a cache of its own,
// freed after) and returns the final normalised hidden states of every
// position [len(ids), D] on the host; a hook sees every layer. A
// convenience over Exec.Forward for tests, checks and tools.
func (m *Model) Forward(c model.Cache, ids []int32, hook Hook) ([]float32, error) {
	x, err := m.acquire()
	if err != nil {
		return nil, err
	}
	defer x.Release()
	if c == nil {
		c = m.NewCache()
		defer c.Free()
	}
	var b Batch
	b.Add(c, ids, len(ids))
	b.Hook = hook
	return x.Prefill(&b)
}

// Logits computes the soft-capped output logits [n, vocab] of host hidden
// states h [n, D]: a convenience over Exec.Logits.
func (m *Model) Logits(h []float32, n int) ([]float32, error) {
	x, err := m.acquire()
	if err != nil {
		return nil, err
	}
	defer x.Release()
	D, V := m.Cfg.HiddenSize, m.Cfg.VocabSize
	out := make([]float32, n*V)
	for r := 0; r < n; r += x.cap {
		e := min(r+x.cap, n)
		t, err := x.Upload(h[r*D : e*D])
		if err != nil {
			return nil, err
		}
		if err := x.Logits(out[r*V:e*V], t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Download copies the tensor t (F32, an Exec's output) to the host.
func (x *Exec) Download(dst []float32, t native.Tensor) error {
	x.st.Download(dst, t)
	return x.st.Sync()
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
