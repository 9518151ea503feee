package head

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"slices"
	"strconv"

	"verdict/engine/safefile"
)

// MaxFileBytes bounds a head file.
const MaxFileBytes = 256 << 20

// tensor is one F32 tensor of a head file.
type tensor struct {
	DType   string `json:"dtype"`
	Shape   []int  `json:"shape"`
	Offsets [2]int `json:"data_offsets"`
}

// tensors lists a head's tensors by name with their shapes.
func (h *Head) tensors() (names []string, data [][]float64, shapes [][]int) {
	m := h.Meta
	fp := make([]float64, len(h.Fingerprint))
	for i, v := range h.Fingerprint {
		fp[i] = float64(v)
	}
	return []string{"mu_q", "sd_q", "a", "b", "u", "alpha", "fingerprint"},
		[][]float64{h.MuQ, h.SdQ, h.A, h.B, h.U, {h.Alpha}, fp},
		[][]int{{m.Dq}, {m.Dq}, {m.Rank, m.Dq}, {m.Rank, m.Dc}, {m.Rank}, {1}, {len(fp) / max(m.Dc, 1), m.Dc}}
}

// Save writes the head as a safetensors file: its parameters as F32
// tensors, what it was trained for in the header's metadata.
func (h *Head) Save(path string) error {
	meta, err := json.Marshal(h.Meta)
	if err != nil {
		return err
	}
	header := map[string]any{"__metadata__": map[string]string{"format": Format, "head": string(meta)}}
	names, data, shapes := h.tensors()
	var body bytes.Buffer
	for i, name := range names {
		off := body.Len()
		for _, v := range data[i] {
			binary.Write(&body, binary.LittleEndian, float32(v))
		}
		header[name] = tensor{DType: "F32", Shape: shapes[i], Offsets: [2]int{off, body.Len()}}
	}
	hb, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	var out bytes.Buffer
	binary.Write(&out, binary.LittleEndian, uint64(len(hb)))
	out.Write(hb)
	out.Write(body.Bytes())
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		return fmt.Errorf("head: %w", err)
	}
	return nil
}

// Load reads a head file written by Save.
func Load(path string) (*Head, error) {
	b, err := safefile.ReadFile(path, MaxFileBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("head: %s does not exist: train a head with verdict train-head --out %s", path, path)
	}
	if err != nil {
		return nil, fmt.Errorf("head: %w", err)
	}
	h, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("head %s: %w", path, err)
	}
	return h, nil
}

// parse reads a head file's bytes, checking the header, every tensor's
// dtype, shape and extent, and the metadata's format and sizes.
func parse(b []byte) (*Head, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%d bytes: not a safetensors file", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > uint64(len(b)-8) {
		return nil, fmt.Errorf("header of %d bytes in a %d-byte file: not a safetensors file, or truncated", n, len(b))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	var md map[string]string
	if err := json.Unmarshal(raw["__metadata__"], &md); err != nil || md["format"] != Format {
		return nil, fmt.Errorf("not a decision head (its metadata has no format %q)", Format)
	}
	h := &Head{}
	if err := json.Unmarshal([]byte(md["head"]), &h.Meta); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	m := h.Meta
	if m.Dq < 1 || m.Dc < 1 || m.Rank < 1 || m.Dq > 1<<16 || m.Dc > 1<<16 || m.Rank > 1024 {
		return nil, fmt.Errorf("metadata: sizes dq %d, dc %d, rank %d out of range", m.Dq, m.Dc, m.Rank)
	}
	data := b[8+n:]
	read := func(name string, shape []int) ([]float64, error) {
		var t tensor
		if err := json.Unmarshal(raw[name], &t); err != nil {
			return nil, fmt.Errorf("tensor %s: missing or malformed", name)
		}
		if t.DType != "F32" || (shape != nil && !slices.Equal(t.Shape, shape)) {
			return nil, fmt.Errorf("tensor %s is %s %v, want F32 %v", name, t.DType, t.Shape, shape)
		}
		numel := 1
		for _, d := range t.Shape {
			numel *= d
		}
		lo, hi := t.Offsets[0], t.Offsets[1]
		if lo < 0 || hi > len(data) || hi-lo != 4*numel {
			return nil, fmt.Errorf("tensor %s: data offsets %d..%d do not hold %d values in %d bytes", name, lo, hi, numel, len(data))
		}
		out := make([]float64, numel)
		for i := range out {
			v := math.Float32frombits(binary.LittleEndian.Uint32(data[lo+4*i:]))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, fmt.Errorf("tensor %s: value %d is %v", name, i, v)
			}
			out[i] = float64(v)
		}
		return out, nil
	}
	var err error
	var alpha, fp []float64
	for _, t := range []struct {
		name  string
		shape []int
		dst   *[]float64
	}{
		{"mu_q", []int{m.Dq}, &h.MuQ}, {"sd_q", []int{m.Dq}, &h.SdQ}, {"a", []int{m.Rank, m.Dq}, &h.A},
		{"b", []int{m.Rank, m.Dc}, &h.B}, {"u", []int{m.Rank}, &h.U}, {"alpha", []int{1}, &alpha},
		{"fingerprint", []int{len(fingerprintIDs(1)), m.Dc}, &fp},
	} {
		if *t.dst, err = read(t.name, t.shape); err != nil {
			return nil, err
		}
	}
	for k, v := range h.SdQ {
		if !(v > 0) {
			return nil, fmt.Errorf("tensor sd_q: value %d is %v, must be positive", k, v)
		}
	}
	h.Alpha = alpha[0]
	h.Fingerprint = make([]float32, len(fp))
	for i, v := range fp {
		h.Fingerprint[i] = float32(v)
	}
	return h, nil
}

// Summary describes a head in one line.
func (h *Head) Summary() string {
	return fmt.Sprintf("decision head for %s (config %s), schema %s (%d fields), rank %d, trained on %d examples; held-out accuracy %s (json %s)",
		h.Meta.ModelName, h.Meta.ModelConfig, h.Meta.Schema, len(h.Meta.Fields), h.Meta.Rank, h.Meta.TrainExamples,
		strconv.FormatFloat(h.Meta.HeldAccuracy, 'f', 3, 64), strconv.FormatFloat(h.Meta.JSONAccuracy, 'f', 3, 64))
}
