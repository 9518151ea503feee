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
	split  map[string]splitExperts
	names  []string
}

// splitExperts is one block's expert gate and up projections as llama.cpp
// also accepts them, two tensors (ffn_gate_exps, ffn_up_exps, each
// [E, F, H]), served as the one Hugging Face experts.gate_up_proj
// [E, 2F, H]: each expert's F gate rows, then its F up rows, as
// ffn_gate_up_exps holds them (llama.cpp's build_moe_ffn reads the first
// half of a fused row block as the gate).
type splitExperts struct{ gate, up *weights.GGUFTensor }

// shape is the fused tensor's [E, 2F, H].
func (x splitExperts) shape() []int {
	sh := x.gate.Shape()
	return []int{sh[0], 2 * sh[1], sh[2]}
}

// dtype is the two tensors' type when they agree, else "F32": the view is
// served as float32 either way, and each half's type was checked readable.
func (x splitExperts) dtype() string {
	if x.gate.Type == x.up.Type {
		return x.gate.Type.String()
	}
	return weights.GGMLF32.String()
}

// experts writes the fused rows of experts e0 to e0+len(dst)/(2FH): for each
// expert its gate rows, then its up rows.
func (x splitExperts) experts(e0 int, dst []float32) error {
	sh := x.gate.Shape()
	half := sh[1] * sh[2]
	gb, ub := len(x.gate.Data())/sh[0], len(x.up.Data())/sh[0]
	for k := 0; k < len(dst)/(2*half); k++ {
		e := e0 + k
		out := dst[2*k*half : 2*(k+1)*half]
		if err := weights.DequantizeGGML(x.gate.Type, out[:half], x.gate.Data()[e*gb:(e+1)*gb]); err != nil {
			return fmt.Errorf("%s: %w", x.gate.Name, err)
		}
		if err := weights.DequantizeGGML(x.up.Type, out[half:], x.up.Data()[e*ub:(e+1)*ub]); err != nil {
			return fmt.Errorf("%s: %w", x.up.Name, err)
		}
	}
	return nil
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
// type; each error names the file and the key or tensor. A block's experts
// may be fused (ffn_gate_up_exps, as the converter writes them) or split
// (ffn_gate_exps and ffn_up_exps, which llama.cpp also loads); a block with
// both, or with only one of the split pair, or a pair of unlike shapes, is
// refused.
func New(g *weights.GGUF) (*Store, error) {
	wrap := func(err error) error { return fmt.Errorf("gemma4 gguf: %s: %w", g.Path, err) }
	cfg, err := ConfigJSON(g)
	if err != nil {
		return nil, wrap(err)
	}
	s := &Store{G: g, cfg: cfg, byHF: make(map[string]*weights.GGUFTensor, len(g.Tensors)), split: map[string]splitExperts{}}
	L, _ := meta{g}.int("block_count", 1, 1<<30)
	gates, ups := map[int]*weights.GGUFTensor{}, map[int]*weights.GGUFTensor{}
	for _, t := range g.Tensors {
		if t.Name == RopeFreqs {
			continue // read into the config
		}
		if t.Name == "output.weight" {
			return nil, wrap(fmt.Errorf("tensor output.weight: an output head of its own, where Gemma 4 ties it to token_embd.weight"))
		}
		i, key, blk := blockOf(t.Name)
		if blk && i >= L {
			return nil, wrap(fmt.Errorf("tensor %s: block %d beyond %s.block_count %d", t.Name, i, Arch, L))
		}
		hf, ok := HFName(t.Name)
		if !ok && (!blk || (key != gateExps && key != upExps)) {
			return nil, wrap(fmt.Errorf("tensor %s is not part of a Gemma 4 text decoder as llama.cpp's converter writes it", t.Name))
		}
		if err := readable(t); err != nil {
			return nil, wrap(err)
		}
		switch {
		case key == gateExps:
			gates[i] = t
		case key == upExps:
			ups[i] = t
		default:
			s.byHF[hf] = t
			s.names = append(s.names, hf)
		}
	}
	if err := s.pairExperts(gates, ups); err != nil {
		return nil, wrap(err)
	}
	slices.Sort(s.names)
	return s, nil
}

// The split expert projections' names (after "blk.N.").
const (
	gateExps = "ffn_gate_exps.weight"
	upExps   = "ffn_up_exps.weight"
)

// pairExperts serves each block's split gate and up expert tensors as
// its experts.gate_up_proj, refusing a block with only one of them, one
// that also has the fused tensor, and a pair whose shapes differ or are
// not [E, F, H] with every dimension at least 1.
func (s *Store) pairExperts(gates, ups map[int]*weights.GGUFTensor) error {
	blocks := make([]int, 0, len(gates)+len(ups))
	for i := range gates {
		blocks = append(blocks, i)
	}
	for i := range ups {
		if gates[i] == nil {
			blocks = append(blocks, i)
		}
	}
	slices.Sort(blocks)
	for _, i := range blocks {
		gate, up := gates[i], ups[i]
		if gate == nil {
			return fmt.Errorf("tensor %s without blk.%d.%s: split expert projections come in pairs", up.Name, i, gateExps)
		}
		if up == nil {
			return fmt.Errorf("tensor %s without blk.%d.%s: split expert projections come in pairs", gate.Name, i, upExps)
		}
		hf := fmt.Sprintf("%slayers.%d.experts.gate_up_proj", Prefix, i)
		if fused, ok := s.byHF[hf]; ok {
			return fmt.Errorf("tensor %s beside %s and %s: a block's experts are fused or split, not both", fused.Name, gate.Name, up.Name)
		}
		if len(gate.Dims) != 3 || !slices.Equal(gate.Dims, up.Dims) || slices.Min(gate.Dims) < 1 {
			return fmt.Errorf("tensors %s (dimensions %v) and %s (%v): want the same three dimensions [hidden, expert width, experts]", gate.Name, gate.Dims, up.Name, up.Dims)
		}
		s.split[hf] = splitExperts{gate, up}
		s.names = append(s.names, hf)
	}
	return nil
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
	case weights.GGMLQ8_0, weights.GGMLQ4_0, weights.GGMLQ4_1, weights.GGMLQ5_0, weights.GGMLQ5_1:
		block = 32
	case weights.GGMLQ4_K, weights.GGMLQ5_K, weights.GGMLQ6_K:
		block = 256
	default:
		return fmt.Errorf("tensor %s: type %s cannot be read as float32 (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K can)", t.Name, t.Type)
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

// Tensor returns the GGUF tensor served under a Hugging Face name; ok is
// false for a name served from two (split experts' gate_up_proj).
func (s *Store) Tensor(hf string) (*weights.GGUFTensor, bool) {
	t, ok := s.byHF[hf]
	return t, ok
}

// Info implements weights.Store; dtype is the GGUF type's name.
func (s *Store) Info(name string) ([]int, string, bool) {
	if x, ok := s.split[name]; ok {
		return x.shape(), x.dtype(), true
	}
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
	if x, ok := s.split[name]; ok && !s.closed {
		sh := x.shape()
		out := make([]float32, sh[0]*sh[1]*sh[2])
		if err := x.experts(0, out); err != nil {
			return nil, fmt.Errorf("gemma4 gguf: %s: %w", name, err)
		}
		return out, nil
	}
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
	if x, ok := s.split[name]; ok && !s.closed {
		return nil, fmt.Errorf("gemma4 gguf: %s (%s and %s): type is %s, not BF16", name, x.gate.Name, x.up.Name, x.dtype())
	}
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
	if x, ok := s.split[name]; ok && !s.closed {
		sh := x.shape()
		cols := sh[1] * sh[2]
		if cols == 0 || len(dst)%cols != 0 {
			return fmt.Errorf("gemma4 gguf: %s: %d values are not whole rows of %d", name, len(dst), cols)
		}
		if n := len(dst) / cols; row0 < 0 || row0 > sh[0] || n > sh[0]-row0 {
			return fmt.Errorf("gemma4 gguf: %s: rows %d to %d outside its %d", name, row0, row0+n, sh[0])
		}
		if err := x.experts(row0, dst); err != nil {
			return fmt.Errorf("gemma4 gguf: %s: %w", name, err)
		}
		return nil
	}
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
