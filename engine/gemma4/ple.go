package gemma4

import (
	"fmt"

	"verdict/engine/model"
	"verdict/engine/weights"
	"verdict/native"
)

// The per-layer embedding table (embed_tokens_per_layer: a row of L·P
// values for every token; 262,144 × 35 × 256 floats, 9.4 GB, for E4B's
// shapes) is read a row per token, so it is not copied at load: a pass
// reads its batch's rows from where the table is (the store a Decoder was
// opened from, or the reference Model's slice for NewDecoder) and uploads
// them. A device loop chooses its tokens on the device, so it gathers
// their rows from a table there: a loop over a few tokens (a catalog's)
// uploads theirs (loop.go); a loop over any token (DecodeGreedy) needs the
// whole table resident, which PLEPlace decides, as Gemma 3n's ple.go does.
// Every way gives the same values: the stored ones as float32 (bf16 and
// f16 widen exactly).

// PLEPlace says where the per-layer table is kept for device loops
// (model.PLEPlace).
type PLEPlace = model.PLEPlace

// The places (model.PLEAuto, PLEHost, PLEDevice).
const (
	PLEAuto   = model.PLEAuto
	PLEHost   = model.PLEHost
	PLEDevice = model.PLEDevice
)

const pleSmall, pleChunk = model.PLESmall, model.PLEChunk

// plePlaceOf checks a place ("" is PLEAuto); VERDICT_PLE overrides it, as
// for Gemma 3n.
func plePlaceOf(p PLEPlace) (PLEPlace, error) { return model.PLEPlaceOf("gemma4", p) }

// pleTable is where a Decoder reads per-layer rows: a store's tensor or a
// reference Model's slice, and the resident copy loops gather from.
type pleTable struct {
	st       weights.Store
	name     string // the table's tensor in st
	dtype    string // as stored ("F32", "BF16", "F16")
	host     []float32
	vocab    int
	width    int           // L·P
	res      native.Tensor // the resident table, or nil
	arena    *native.Arena // the resident table's memory when uploaded by rows
	resBytes int64         // device memory it takes (0 on the host's backend)
}

// pleFromModel reads rows from the reference's table (no copy).
func pleFromModel(m *Model) pleTable {
	c := m.Cfg
	return pleTable{host: m.EmbedPL, dtype: "F32", vocab: c.VocabPerLayerInput, width: c.Layers * c.PerLayerInput}
}

// pleFromStore reads rows of st's tensor name, whose shape Open's loader
// has checked.
func pleFromStore(c *Config, st weights.Store, name string) (pleTable, error) {
	_, dt, ok := st.Info(name)
	if !ok {
		return pleTable{}, fmt.Errorf("gemma4: %s: %w", name, weights.ErrNotFound)
	}
	if !weights.Readable(dt) {
		return pleTable{}, fmt.Errorf("gemma4: %s: element type %q is not readable", name, dt)
	}
	return pleTable{st: st, name: name, dtype: dt, vocab: c.VocabPerLayerInput, width: c.Layers * c.PerLayerInput}, nil
}

// valueBytes is the bytes a stored value takes.
func (p *pleTable) valueBytes() int64 {
	switch p.dtype {
	case "BF16", "F16":
		return 2
	}
	return 4
}

// row writes token id's row [L·P] into dst.
func (p *pleTable) row(id int32, dst []float32) error {
	if id < 0 || int(id) >= p.vocab {
		return fmt.Errorf("gemma4: per-layer row of token %d: outside the table's %d rows", id, p.vocab)
	}
	if p.host != nil {
		copy(dst[:p.width], p.host[int(id)*p.width:])
		return nil
	}
	if err := p.st.Rows(p.name, int(id), dst[:p.width]); err != nil {
		return fmt.Errorf("gemma4: per-layer row of token %d: %w", id, err)
	}
	return nil
}

// placePLE makes the per-layer table resident on the backend when place
// asks for it (PLEPlace); it runs after the weights are bound and before
// the key/value pool takes its share of the device.
func (d *Decoder) placePLE(place PLEPlace) error {
	p := &d.ple
	if d.cfg.PerLayerInput == 0 || place == PLEHost {
		return nil
	}
	V, LP := p.vocab, p.width
	size := int64(V) * int64(LP) * p.valueBytes()
	info, onDevice := d.be.Info()
	if place == PLEAuto && size > pleSmall && (!onDevice || size > info.MemFree/4) {
		return nil
	}
	// Bound as it is where that costs no copy on the host: the reference's
	// slice, a bf16 store's mapped bits, a float32 store's values.
	var whole native.Matrix
	switch {
	case p.host != nil:
		whole = native.NewF32(V, LP, p.host[:V*LP])
	case p.dtype == "BF16":
		if raw, err := p.st.BF16(p.name); err == nil && len(raw) >= V*LP {
			whole = native.NewBF16(V, LP, raw[:V*LP])
		}
	case p.dtype == "F32" && !onDevice:
		if w, err := p.st.Float32(p.name); err == nil && len(w) >= V*LP {
			whole = native.NewF32(V, LP, w[:V*LP])
		}
	}
	if whole.Rows > 0 {
		t, err := d.bound.Matrix(whole)
		if err != nil {
			return d.pleRefused(place, size, err)
		}
		p.res = t
		if onDevice {
			p.resBytes = size
		}
		return nil
	}
	ar, err := d.be.NewArena(native.ArenaBytes(V * LP))
	if err != nil {
		return d.pleRefused(place, size, err)
	}
	st, err := d.be.NewStream()
	if err != nil {
		ar.Free()
		return d.pleRefused(place, size, err)
	}
	defer st.Close()
	t := ar.Take(native.F32, V, LP)
	buf := make([]float32, min(pleChunk, V)*LP)
	for r := 0; r < V; r += pleChunk {
		n := min(pleChunk, V-r)
		if err := p.st.Rows(p.name, r, buf[:n*LP]); err != nil {
			ar.Free()
			return fmt.Errorf("gemma4: per-layer embedding rows %d..%d: %w", r, r+n, err)
		}
		st.Upload(t.Sub(r*LP, n, LP), buf[:n*LP])
		if err := st.Sync(); err != nil { // buf is written again next
			ar.Free()
			return d.pleRefused(place, size, err)
		}
	}
	p.res, p.arena = t, ar
	if onDevice {
		p.resBytes = int64(V) * int64(LP) * 4
	}
	return nil
}

// pleRefused answers a table that could not be made resident: an error
// when it was asked for, else the rows stay where they are (nil).
func (d *Decoder) pleRefused(place PLEPlace, size int64, err error) error {
	if place == PLEDevice {
		return fmt.Errorf("gemma4: the per-layer embedding table (%.2f GiB) on the backend: %w", float64(size)/(1<<30), err)
	}
	return nil
}

// freePLE releases a resident table uploaded by rows (a bound one goes
// with the bound weights).
func (d *Decoder) freePLE() {
	if d.ple.arena != nil {
		d.ple.arena.Free()
		d.ple.arena = nil
	}
	d.ple.res, d.ple.resBytes = native.Tensor{}, 0
}

// PLEResident reports whether the per-layer table is resident on the
// backend (false when the model has none).
func (d *Decoder) PLEResident() bool { return !d.ple.res.Nil() }

// ResidentBytes reports the device memory the resident per-layer table
// takes (0 when it is not resident, or the backend is the host's, where
// it is the store's or the reference's memory).
func (d *Decoder) ResidentBytes() int64 { return d.ple.resBytes }
