package gemma3n

import (
	"fmt"

	"verdict/engine/model"
	"verdict/native"
)

// The per-layer embedding table (embed_tokens_per_layer: a row of L·P
// values for every token) is the model's largest tensor and is read a row
// per token, so it stays memory-mapped on the host and a batch's rows are
// uploaded with it. On a GPU with room to spare it is also made resident
// on the device: a decode whose tokens the device chooses itself (greedy
// generation as a device loop) then gathers its rows there, with no host
// work between tokens. Both give the same values: the resident table holds
// the stored ones (bf16 kept as bf16, anything else as float32).

// PLEPlace says where the per-layer embedding table lives (model.PLEPlace).
type PLEPlace = model.PLEPlace

// The places (model.PLEAuto, PLEHost, PLEDevice).
const (
	PLEAuto   = model.PLEAuto
	PLEHost   = model.PLEHost
	PLEDevice = model.PLEDevice
)

const pleSmall, pleChunk = model.PLESmall, model.PLEChunk

// plePlace is the load's choice: VERDICT_PLE overrides LoadOptions.PLE.
func plePlace(opt LoadOptions) (PLEPlace, error) { return model.PLEPlaceOf("gemma3n", opt.PLE) }

// bindPLE makes the per-layer table resident on be when place asks for it
// (see PLEPlace); it runs after the weights are bound and before the
// key/value pool takes its share of the device.
func (m *Model) bindPLE(be *native.Backend, place PLEPlace) error {
	if place == PLEHost {
		return nil
	}
	cfg := m.Cfg
	V, LP := cfg.VocabSizePerLayer, cfg.NumLayers*cfg.PerLayerSize
	_, dt, _ := m.store.Info(m.pleName)
	size := int64(V) * int64(LP) * 4
	if dt == "BF16" {
		size /= 2
	}
	if place == PLEAuto && size > pleSmall {
		d, ok := be.Info()
		if !ok || size > d.MemFree/4 {
			return nil
		}
	}
	// The whole table bound as stored: bf16 from the mapped checkpoint, and
	// float32 on the host's backend, which binds in place (no copy where
	// the mapped checkpoint is aligned).
	var whole native.Matrix
	if dt == "BF16" {
		if raw, err := m.store.BF16(m.pleName); err == nil {
			whole = native.NewBF16(V, LP, raw[:V*LP])
		}
	} else if !m.onDevice && dt == "F32" {
		if w, err := m.store.Float32(m.pleName); err == nil {
			whole = native.NewF32(V, LP, w[:V*LP])
		}
	}
	if whole.Rows > 0 {
		t, err := m.bound.Matrix(whole)
		if err != nil {
			return m.pleRefused(place, size, err)
		}
		m.ple = t
		return nil
	}
	ar, err := be.NewArena(native.ArenaBytes(V * LP))
	if err != nil {
		return m.pleRefused(place, size, err)
	}
	st, err := be.NewStream()
	if err != nil {
		ar.Free()
		return m.pleRefused(place, size, err)
	}
	defer st.Close()
	t := ar.Take(native.F32, V, LP)
	buf := make([]float32, min(pleChunk, V)*LP)
	for r := 0; r < V; r += pleChunk {
		n := min(pleChunk, V-r)
		if err := m.store.Rows(m.pleName, r, buf[:n*LP]); err != nil {
			ar.Free()
			return fmt.Errorf("gemma3n: per-layer embedding rows %d..%d: %w", r, r+n, err)
		}
		st.Upload(t.Sub(r*LP, n, LP), buf[:n*LP])
		if err := st.Sync(); err != nil { // buf is written again next
			ar.Free()
			return m.pleRefused(place, size, err)
		}
	}
	m.ple, m.pleArena = t, ar
	return nil
}

// pleRefused is the answer to a table that could not be made resident:
// an error when it was asked for, else the host path (nil).
func (m *Model) pleRefused(place PLEPlace, size int64, err error) error {
	if place == PLEDevice {
		return fmt.Errorf("gemma3n: the per-layer embedding table (%.2f GiB) on the device: %w", float64(size)/(1<<30), err)
	}
	return nil
}

// PLEResident reports whether the per-layer table is resident on the
// model's backend.
func (m *Model) PLEResident() bool { return !m.ple.Nil() }

// PLEBytes reports the device memory the resident per-layer table takes
// (0 when it stays on the host, or the backend is the host's, where it is
// the mapped checkpoint either way).
func (m *Model) PLEBytes() int64 {
	if m.ple.Nil() {
		return 0
	}
	if !m.onDevice {
		return 0
	}
	n := int64(m.ple.Len()) * 4
	if m.ple.DType() == native.BF16 {
		n /= 2
	}
	return n
}

// freePLE releases a resident table (a bf16 one goes with the bound
// weights).
func (m *Model) freePLE() {
	if m.pleArena != nil {
		m.pleArena.Free()
		m.pleArena = nil
	}
	m.ple = native.Tensor{}
}
