package kit

import (
	"fmt"
	"runtime"
	"time"

	"verdict/engine/model"
	"verdict/native"
)

// Prepare begins a Forward of n rows on an Exec of rows rows: it refuses an
// empty or too large batch, then runs prepare (the family's: positions,
// slots, the rows' description), once more when the pool was full (a
// *model.KVError), after giving the collector the chance to see caches
// dropped without Free, which then give their blocks back. name (the
// family) prefixes its errors.
func Prepare(name string, n, rows int, prepare func() error) error {
	if n == 0 {
		return fmt.Errorf("%s: empty batch", name)
	}
	if n > rows {
		return fmt.Errorf("%s: a batch of %d rows exceeds the %d an Exec takes", name, n, rows)
	}
	err := prepare()
	if _, full := err.(*model.KVError); full {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
		err = prepare()
	}
	return err
}

// Prefill runs b's rows (of any sequences) through x.Forward in chunks of
// up to x.Rows(), cut where x's model allows (model.Cuts, all chosen before
// anything runs), and returns the wanted outputs' hidden states on the
// host [outputs, D], in batch order (nil when none is wanted): for prompts
// longer than one batch. A hook sees every chunk's layers in turn. name
// (the family) prefixes its errors.
func Prefill(name string, x model.Exec, b *model.Batch) ([]float32, error) {
	if len(b.Rows) == 0 {
		return nil, fmt.Errorf("%s: empty input", name)
	}
	cuts, err := model.Cuts(x, b)
	if err != nil {
		return nil, err
	}
	var out []float32
	lo := 0
	for _, hi := range cuts {
		part := model.Batch{Rows: b.Rows[lo:hi], Embeds: b.Embeds, Hook: b.Hook}
		lo = hi
		h, err := x.Forward(&part)
		if err != nil {
			return nil, err
		}
		if k := h.Rows(); k > 0 {
			o := len(out)
			out = append(out, make([]float32, k*h.Cols())...)
			if err := x.Download(out[o:], h); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// Upload places host hidden states h [n, Hidden] in the Exec's output
// tensor Out, for the heads (tests and tools that hold states on the host).
func (x *Head) Upload(h []float32) (native.Tensor, error) {
	D := x.Hidden
	n := len(h) / D
	if n*D != len(h) || n > x.Out.Rows() {
		return native.Tensor{}, fmt.Errorf("%s: %d values are not up to %d rows of %d", x.Name, len(h), x.Out.Rows(), D)
	}
	t := x.Out.Slice(0, n)
	x.St.Upload(t, h)
	return t, x.St.Sync()
}

// Download copies the F32 tensor t (an Exec's output) to the host.
func (x *Head) Download(dst []float32, t native.Tensor) error {
	if len(dst) != t.Len() {
		return fmt.Errorf("%s: Download: %d values for a tensor of %d", x.Name, len(dst), t.Len())
	}
	x.St.Download(dst, t)
	return x.St.Sync()
}

// Run is Forward followed by then on x (nil: nothing), for an Exec's
// model.Runner.Run.
func Run(x model.Exec, b *model.Batch, then func(x model.Exec, h native.Tensor) error) error {
	h, err := x.Forward(b)
	if err != nil || then == nil {
		return err
	}
	return then(x, h)
}

// Embed returns the scaled input embeddings of ids [len(ids), Hidden] on
// the host, on an Exec of m, its rows at a time. m's Execs must embed a
// Head with its input side filled. name (the family) prefixes its errors.
func Embed(name string, m model.Model, ids []int32) ([]float32, error) {
	V := m.Config().Vocab
	for _, id := range ids {
		if id < 0 || int(id) >= V {
			return nil, fmt.Errorf("%s: token id %d outside the vocabulary of %d", name, id, V)
		}
	}
	ex, err := m.Acquire()
	if err != nil {
		return nil, err
	}
	defer ex.Release()
	hx, ok := ex.(interface{ head() *Head })
	if !ok {
		return nil, fmt.Errorf("%s: Embed: the Exec has no kit.Head", name)
	}
	x := hx.head()
	st, D, R := x.St, x.Hidden, ex.Rows()
	out := make([]float32, len(ids)*D)
	for lo := 0; lo < len(ids); lo += R {
		n := min(R, len(ids)-lo)
		st.UploadI32(x.InIDs.Sub(0, 1, n), ids[lo:lo+n])
		st.Embed(x.InEmb.Slice(0, n), x.Input, x.InIDs.Sub(0, 1, n), x.InputScale)
		st.Download(out[lo*D:(lo+n)*D], x.InEmb.Slice(0, n))
		if err := st.Sync(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Forward runs ids through m on c (nil: a cache of its own, freed after)
// and returns the final normalised hidden states of every position
// [len(ids), Hidden] on the host; a hook sees every layer. A convenience
// over Exec.Prefill for tests, checks and tools.
func Forward(m model.Model, c model.Cache, ids []int32, hook model.Hook) ([]float32, error) {
	x, err := m.Acquire()
	if err != nil {
		return nil, err
	}
	defer x.Release()
	if c == nil {
		c = m.NewCache()
		defer c.Free()
	}
	var b model.Batch
	b.Add(c, ids, len(ids))
	b.Hook = hook
	return x.Prefill(&b)
}

// Logits computes the output logits [n, Vocab] of host hidden states h
// [n, Hidden] on an Exec of m, its Rows at a time: a convenience over
// Exec.Logits. name (the family) prefixes its errors.
func Logits(name string, m model.Model, h []float32, n int) ([]float32, error) {
	cfg := m.Config()
	D, V := cfg.Hidden, cfg.Vocab
	if n < 0 || len(h) != n*D {
		return nil, fmt.Errorf("%s: Logits: %d values for %d rows of %d", name, len(h), n, D)
	}
	x, err := m.Acquire()
	if err != nil {
		return nil, err
	}
	defer x.Release()
	out := make([]float32, n*V)
	for r := 0; r < n; r += x.Rows() {
		e := min(r+x.Rows(), n)
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
