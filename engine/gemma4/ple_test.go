package gemma4

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"

	"verdict/engine/model"
	"verdict/engine/weights"
)

// open builds a Decoder of the fixture's store with Open (no reference
// Model), closed when the test ends.
func (fx *fixtureData) open(t testing.TB, opt Options) *Decoder {
	t.Helper()
	if opt.KVPositions == 0 {
		opt.KVPositions = 2048
	}
	d, err := Open(fx.Cfg, fx.store, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// prefill runs ids through a fresh cache of d in one batch and returns the
// logits of every row and the hidden states after each layer.
func prefill(t testing.TB, d *Decoder, ids []int32) (logits, hidden []float32) {
	t.Helper()
	x, err := d.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	c := d.NewCache()
	defer c.Free()
	var b model.Batch
	b.Add(c, ids, len(ids))
	b.Hook = func(_ int, h []float32) { hidden = append(hidden, h...) }
	h, err := x.Forward(&b)
	if err != nil {
		t.Fatal(err)
	}
	logits = make([]float32, len(ids)*d.cfg.Vocab)
	if err := x.Logits(logits, h); err != nil {
		t.Fatal(err)
	}
	return logits, hidden
}

// TestOpenMatchesReference: a Decoder opened from the store (its weights
// read a layer at a time, the per-layer rows read from the store by
// token), one built over a reference Model without keeping it, and one
// keeping it give the same bits, hidden states and logits, for f32 and q4
// weights, with the per-layer table resident or not; the opened decoder
// has no Ref, and the table is resident only where asked or small.
func TestOpenMatchesReference(t *testing.T) {
	for _, name := range fixtures {
		fx := loadFixture(t, name)
		ids := ids32(fx.Meta.IDs)
		for _, w := range []model.Weights{model.WeightsF32, model.WeightsQ4} {
			ref := fx.decoder(t, Options{Weights: w})
			wantL, wantH := prefill(t, ref, ids)
			for _, c := range []struct {
				how      string
				d        *Decoder
				resident bool
			}{
				{"Open", fx.open(t, Options{Weights: w}), true},
				{"Open, table on the host", fx.open(t, Options{Weights: w, PLE: PLEHost}), false},
				{"NewDecoder without Reference", buildDecoder(t, fx.model(t), Options{Weights: w, KVPositions: 2048}), true},
			} {
				if c.d.Ref != nil {
					t.Errorf("%s %s %s: the decoder keeps a reference Model", name, w, c.how)
				}
				if c.d.PLEResident() != (c.resident && fx.Cfg.PerLayerInput > 0) {
					t.Errorf("%s %s %s: per-layer table resident %v, want %v", name, w, c.how, c.d.PLEResident(), c.resident)
				}
				gotL, gotH := prefill(t, c.d, ids)
				if !slices.Equal(gotL, wantL) || !slices.Equal(gotH, wantH) {
					t.Errorf("%s %s %s: logits or hidden states differ from the reference decoder's", name, w, c.how)
				}
			}
		}
	}
}

func buildDecoder(t testing.TB, m *Model, opt Options) *Decoder {
	t.Helper()
	d, err := NewDecoder(m, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// rowsFail is a store whose per-layer table cannot be read (a truncated
// file, say).
type rowsFail struct{ weights.Store }

func (rowsFail) Rows(name string, row0 int, dst []float32) error {
	return errors.New("weights: short read (truncated file)")
}

// TestPLERefuses: a per-layer table whose rows cannot be read fails the
// pass with an error naming the token (no panic) and leaves the cache as
// it was; a bad place is refused by name; a table of the wrong shape is
// refused naming the tensor.
func TestPLERefuses(t *testing.T) {
	fx := loadFixture(t, "gemma4-synthetic-tiny")
	d, err := Open(fx.Cfg, rowsFail{fx.store}, Options{KVPositions: 256, PLE: PLEHost})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	x, err := d.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	c := d.NewCache()
	var b model.Batch
	b.Add(c, []int32{7, 9}, 1)
	if _, err := x.Forward(&b); err == nil || !strings.Contains(err.Error(), "per-layer row of token 7") || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("a table that cannot be read: %v", err)
	}
	if c.Len() != 0 {
		t.Errorf("a failed pass left %d positions in the cache", c.Len())
	}
	c.Free()
	x.Release()
	if _, err := Open(fx.Cfg, fx.store, Options{PLE: "gpu"}); err == nil || !strings.Contains(err.Error(), `place "gpu"`) {
		t.Errorf("a bad place: %v", err)
	}
	bad := *fx.Cfg
	bad.VocabPerLayerInput++
	if _, err := Open(&bad, fx.store, Options{}); err == nil || !strings.Contains(err.Error(), "embed_tokens_per_layer.weight: shape") {
		t.Errorf("a table of the wrong shape: %v", err)
	}
}

// heapAfter reports the live Go heap after build returns (its result kept
// alive), less the heap before.
func heapAfter(build func() any) (int64, any) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := int64(ms.HeapAlloc)
	v := build()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc) - before, v
}

// TestDecoderHeap measures the Go heap a q4 decoder holds once built: over
// a reference Model kept (Options.Reference: the float32 weights and the
// packed ones), built from a reference Model dropped after, and opened
// from the store. The last two hold no float32 copy of a packed matrix, so
// they hold about the packed matrices' float32 size less than the first
// (9/10 of it at least: the allocator's size classes and bookkeeping move
// a few kB); each keeps what it binds in place (the vectors, the small
// matrices) and NewDecoder the Model's per-layer table it reads rows of,
// which Open leaves in the store.
func TestDecoderHeap(t *testing.T) {
	for _, name := range fixtures {
		fx := loadFixture(t, name)
		opt := Options{Weights: model.WeightsQ4, KVPositions: 256, BatchRows: 16, PLE: PLEHost}
		var packedF32 int64
		build := func(keep bool) func() any {
			return func() any {
				m, err := fx.Load()
				if err != nil {
					t.Fatal(err)
				}
				o := opt
				o.Reference = keep
				d, err := NewDecoder(m, o)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
		}
		kept, dk := heapAfter(build(true))
		dropped, dd := heapAfter(build(false))
		opened, do := heapAfter(func() any {
			d, err := Open(fx.Cfg, fx.store, opt)
			if err != nil {
				t.Fatal(err)
			}
			return d
		})
		for _, m := range dk.(*Decoder).packed {
			packedF32 += 4 * int64(m.Rows) * int64(m.Cols)
		}
		packed := dk.(*Decoder).PackedBytes()
		t.Logf("%s q4: Go heap held: reference kept %d B, reference dropped %d B, opened from the store %d B; packed matrices %d B (%d B as float32)",
			name, kept, dropped, opened, packed, packedF32)
		if kept-dropped < packedF32*9/10 || kept-opened < packedF32*9/10 || opened > dropped {
			t.Errorf("%s: dropping the reference saves %d B, opening from the store %d B; want about the packed matrices' float32 %d B at least, and opening to hold no more than dropping",
				name, kept-dropped, kept-opened, packedF32)
		}
		for _, d := range []any{dk, dd, do} {
			d.(*Decoder).Close()
		}
	}
}
