package gguf

import (
	"fmt"
	"slices"
	"sync"

	"verdict/engine/weights"
)

// Store serves a gemma4 GGUF's text-decoder tensors under their Hugging
// Face names (Prefix + name) as a weights.Store, dequantised to float32 on
// read. Tensors keep the file's layout: the converter permutes nothing, so
// a GGUF tensor's ggml dims reversed are the checkpoint's shape.
type Store struct {
	G      *weights.GGUF
	cfg    []byte
	mu     sync.RWMutex
	closed bool
	byHF   map[string]*weights.GGUFTensor
	names  []string
}

var _ weights.Store = (*Store)(nil)

// Open opens a gemma4 GGUF file. Close releases it.
func Open(path string) (*Store, error) {
	g, err := weights.OpenGGUFFile(path)
	if err != nil {
		return nil, err
	}
	s, err := New(g)
	if err != nil {
		g.Close()
		return nil, err
	}
	return s, nil
}

// New serves a parsed gemma4 GGUF; it takes g over (Close closes it). It
// refuses a file whose metadata does not make a Gemma 4 config
// (ConfigJSON), a tensor it has no Hugging Face name for, one of a type
// it cannot read as float32, and one whose rows are not whole blocks of its
// type; each error names the file and the key or tensor.
func New(g *weights.GGUF) (*Store, error) {
	wrap := func(err error) error { return fmt.Errorf("gemma4 gguf: %s: %w", g.Path, err) }
	cfg, err := ConfigJSON(g)
	if err != nil {
		return nil, wrap(err)
	}
	s := &Store{G: g, cfg: cfg, byHF: make(map[string]*weights.GGUFTensor, len(g.Tensors))}
	L, _ := meta{g}.int("block_count", 1, 1<<30)
	for _, t := range g.Tensors {
		if t.Name == RopeFreqs {
			continue // read into the config
		}
		if t.Name == "output.weight" {
			return nil, wrap(fmt.Errorf("tensor output.weight: an output head of its own, where Gemma 4 ties it to token_embd.weight"))
		}
		hf, ok := HFName(t.Name)
		if !ok {
			if _, key, blk := blockOf(t.Name); blk && (key == "ffn_gate_exps.weight" || key == "ffn_up_exps.weight") {
				return nil, wrap(fmt.Errorf("tensor %s: separate expert gate and up projections are not read (the converter writes them fused, as ffn_gate_up_exps.weight)", t.Name))
			}
			return nil, wrap(fmt.Errorf("tensor %s is not part of a Gemma 4 text decoder as llama.cpp's converter writes it", t.Name))
		}
		if i, _, blk := blockOf(t.Name); blk && i >= L {
			return nil, wrap(fmt.Errorf("tensor %s: block %d beyond %s.block_count %d", t.Name, i, Arch, L))
		}
		if err := readable(t); err != nil {
			return nil, wrap(err)
		}
		s.byHF[hf] = t
		s.names = append(s.names, hf)
	}
	slices.Sort(s.names)
	return s, nil
}

// readable checks that t's type has a float32 reader and that each of its
// rows (ne0 values) is whole blocks of that type.
func readable(t *weights.GGUFTensor) error {
	ne0 := 1
	if len(t.Dims) > 0 {
		ne0 = t.Dims[0]
	}
	block := 0
	switch t.Type {
	case weights.GGMLF32, weights.GGMLF16, weights.GGMLBF16:
		block = 1
	case weights.GGMLQ8_0, weights.GGMLQ4_0:
		block = 32
	case weights.GGMLQ4_K, weights.GGMLQ5_K, weights.GGMLQ6_K:
		block = 256
	default:
		return fmt.Errorf("tensor %s: type %s cannot be read as float32 (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K can)", t.Name, t.Type)
	}
	if ne0%block != 0 {
		return fmt.Errorf("tensor %s: rows of %d values are not whole %s blocks of %d", t.Name, ne0, t.Type, block)
	}
	return nil
}

// ConfigJSON is the Hugging Face config.json rebuilt from the metadata.
func (s *Store) ConfigJSON() []byte { return slices.Clone(s.cfg) }

// Tokens is the file's vocabulary (tokenizer.ggml.tokens), nil when absent.
func (s *Store) Tokens() []string {
	t, _ := s.G.KV["tokenizer.ggml.tokens"].Strings()
	return t
}

// Path is the file's path.
func (s *Store) Path() string { return s.G.Path }

// Tensor returns the GGUF tensor served under a Hugging Face name.
func (s *Store) Tensor(hf string) (*weights.GGUFTensor, bool) {
	t, ok := s.byHF[hf]
	return t, ok
}

// Info implements weights.Store; dtype is the GGUF type's name.
func (s *Store) Info(name string) ([]int, string, bool) {
	t, ok := s.byHF[name]
	if !ok {
		return nil, "", false
	}
	return t.Shape(), t.Type.String(), true
}

// Names implements weights.Store.
func (s *Store) Names() []string { return slices.Clone(s.names) }

func (s *Store) lookup(name string) (*weights.GGUFTensor, error) {
	if s.closed {
		return nil, fmt.Errorf("gemma4 gguf: %s: the store is closed", s.G.Path)
	}
	t, ok := s.byHF[name]
	if !ok {
		return nil, fmt.Errorf("gemma4 gguf: %s: %w", name, weights.ErrNotFound)
	}
	return t, nil
}

func numel(t *weights.GGUFTensor) int {
	n := 1
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Float32 implements weights.Store: a new slice, whatever the type.
func (s *Store) Float32(name string) ([]float32, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	out := make([]float32, numel(t))
	if err := weights.DequantizeGGML(t.Type, out, t.Data()); err != nil {
		return nil, fmt.Errorf("gemma4 gguf: %s (%s): %w", name, t.Name, err)
	}
	return out, nil
}

// BF16 implements weights.Store for BF16 tensors.
func (s *Store) BF16(name string) ([]uint16, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	if t.Type != weights.GGMLBF16 {
		return nil, fmt.Errorf("gemma4 gguf: %s (%s): type is %s, not BF16", name, t.Name, t.Type)
	}
	b := t.Data()
	out := make([]uint16, len(b)/2)
	for i := range out {
		out[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
	}
	return out, nil
}

// Rows implements weights.Store, dequantising only the rows asked for.
func (s *Store) Rows(name string, row0 int, dst []float32) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, err := s.lookup(name)
	if err != nil {
		return err
	}
	sh := t.Shape()
	if len(sh) < 2 {
		return fmt.Errorf("gemma4 gguf: %s (%s): Rows needs at least two dimensions, it has %v", name, t.Name, sh)
	}
	cols := numel(t) / max(1, sh[0])
	if cols == 0 || len(dst)%cols != 0 {
		return fmt.Errorf("gemma4 gguf: %s (%s): %d values are not whole rows of %d", name, t.Name, len(dst), cols)
	}
	n := len(dst) / cols
	if row0 < 0 || row0 > sh[0] || n > sh[0]-row0 {
		return fmt.Errorf("gemma4 gguf: %s (%s): rows %d to %d outside its %d", name, t.Name, row0, row0+n, sh[0])
	}
	if n == 0 {
		return nil
	}
	rowBytes := len(t.Data()) / sh[0]
	data := t.Data()[row0*rowBytes : (row0+n)*rowBytes]
	if err := weights.DequantizeGGML(t.Type, dst, data); err != nil {
		return fmt.Errorf("gemma4 gguf: %s (%s): %w", name, t.Name, err)
	}
	return nil
}

// Close implements weights.Store: it unmaps the file.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.G.Close()
}
