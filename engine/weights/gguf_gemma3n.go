package weights

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// A Gemma 3n GGUF (llama.cpp's gemma3n architecture, as convert_hf_to_gguf.py
// writes it and llama-quantize quantises it; Ollama's converter writes the
// same tensors) served under the Hugging Face names the gemma3n loader
// binds. What the converters did, undone here:
//
//   - names: model.language_model.X is token_embd, blk.N.attn_q, ...
//     (ggufGemma3nGlobal and ggufGemma3nBlock);
//   - the three altup_projections.i (and altup_unembed_projections.i) are
//     stacked into one [3, D, D] tensor: each i is served as a slice of it;
//   - "_scale" tensors got a ".weight" suffix (altup.correct_output_scale);
//   - llama.cpp's pads the per-layer embedding table with zero rows up to
//     vocab_size: the rows past vocab_size_per_layer_input are not served;
//   - Ollama's clamps the AltUp coefficients to altup_coef_clip, which the
//     loader does anyway;
//   - norm weights are stored as they are (Gemma 3n's RMSNorm multiplies by
//     the weight, no +1 shift, unlike Gemma 3) and q/k are not permuted
//     (Gemma uses NeoX-style RoPE), so nothing else changes.
//
// Tensor dtypes are reported as the GGUF type ("F32", "F16", "BF16", "Q8_0",
// ...); every one of them reads as float32 (Float32, Rows), and BF16 ones
// also zero-copy (BF16).

// GGUFPrefix is the name prefix a Gemma 3n GGUF's tensors are served under.
const GGUFPrefix = "model.language_model."

// ggufGemma3nGlobal maps the GGUF names of the model-wide tensors to the
// Hugging Face names under GGUFPrefix.
var ggufGemma3nGlobal = map[string]string{
	"token_embd.weight":           "embed_tokens.weight",
	"output_norm.weight":          "norm.weight",
	"per_layer_token_embd.weight": "embed_tokens_per_layer.weight",
	"per_layer_model_proj.weight": "per_layer_model_projection.weight",
	"per_layer_proj_norm.weight":  "per_layer_projection_norm.weight",
}

// ggufGemma3nStacked are the stacked [3, D, D] tensors, served as name.i.weight.
var ggufGemma3nStacked = map[string]string{
	"altup_proj.weight":        "altup_projections",
	"altup_unembd_proj.weight": "altup_unembed_projections",
}

// ggufGemma3nBlock maps blk.N.<key> to layers.N.<value>.
var ggufGemma3nBlock = map[string]string{
	"attn_q.weight":              "self_attn.q_proj.weight",
	"attn_k.weight":              "self_attn.k_proj.weight",
	"attn_v.weight":              "self_attn.v_proj.weight",
	"attn_output.weight":         "self_attn.o_proj.weight",
	"attn_q_norm.weight":         "self_attn.q_norm.weight",
	"attn_k_norm.weight":         "self_attn.k_norm.weight",
	"attn_norm.weight":           "input_layernorm.weight",
	"post_attention_norm.weight": "post_attention_layernorm.weight",
	"ffn_norm.weight":            "pre_feedforward_layernorm.weight",
	"post_ffw_norm.weight":       "post_feedforward_layernorm.weight",
	"ffn_gate.weight":            "mlp.gate_proj.weight",
	"ffn_up.weight":              "mlp.up_proj.weight",
	"ffn_down.weight":            "mlp.down_proj.weight",
	"altup_correct_coef.weight":  "altup.correction_coefs.weight",
	"altup_correct_scale.weight": "altup.correct_output_scale",
	"altup_predict_coef.weight":  "altup.prediction_coefs.weight",
	"altup_router.weight":        "altup.modality_router.weight",
	"altup_router_norm.weight":   "altup.router_norm.weight",
	"laurel_l.weight":            "laurel.linear_left.weight",
	"laurel_r.weight":            "laurel.linear_right.weight",
	"laurel_post_norm.weight":    "laurel.post_laurel_norm.weight",
	"inp_gate.weight":            "per_layer_input_gate.weight",
	"proj.weight":                "per_layer_projection.weight",
	"post_norm.weight":           "post_per_layer_input_norm.weight",
}

// GemmaVocabPerLayer is Gemma 3n's vocab_size_per_layer_input: the rows of
// the per-layer embedding table before the converter's zero padding.
const GemmaVocabPerLayer = 262144

// ggufView is one served tensor: rows [row0, row0+shape[0]) of a GGUF
// tensor (all of it, a slice of a stacked one, or the unpadded rows).
type ggufView struct {
	t     *GGUFTensor
	shape []int // Hugging Face order
	raw   []byte
	numel int
}

// GGUFStore is a Gemma 3n GGUF served as a Store.
type GGUFStore struct {
	G        *GGUF
	mu       sync.RWMutex
	closed   bool
	views    map[string]*ggufView
	names    []string
	cfg      []byte
	ignored  []string // GGUF tensors not served (vision, audio, an output head)
	vocabPLE int
}

// IsGGUF reports whether path names a file that starts with the GGUF magic.
func IsGGUF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [4]byte
	_, err = f.ReadAt(b[:], 0)
	return err == nil && string(b[:]) == ggufMagic
}

// FindGGUF returns the one .gguf file of a folder: "" and no error when
// there is none, an error when there are several (naming them) or when the
// only ones are multimodal projectors (mmproj-*.gguf).
func FindGGUF(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("weights: %w", err)
	}
	var found, proj []string
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.EqualFold(filepath.Ext(n), ".gguf") {
			continue
		}
		if strings.HasPrefix(strings.ToLower(n), "mmproj") {
			proj = append(proj, n)
			continue
		}
		found = append(found, n)
	}
	switch {
	case len(found) == 1:
		return filepath.Join(dir, found[0]), nil
	case len(found) > 1:
		return "", fmt.Errorf("weights: %s holds %d GGUF files (%s): name the one to open", dir, len(found), strings.Join(found, ", "))
	case len(proj) > 0:
		return "", fmt.Errorf("weights: %s holds only the multimodal projector %s, not the text model's GGUF", dir, strings.Join(proj, ", "))
	}
	return "", nil
}

// OpenGGUF opens a Gemma 3n GGUF file as a Store of Hugging Face names; its
// ConfigJSON gives the matching config.json.
func OpenGGUF(path string) (*GGUFStore, error) {
	g, err := OpenGGUFFile(path)
	if err != nil {
		return nil, err
	}
	s, err := NewGGUFStore(g)
	if err != nil {
		g.Close()
		return nil, err
	}
	return s, nil
}

// NewGGUFStore serves a parsed Gemma 3n GGUF; it takes g over (Close closes it).
func NewGGUFStore(g *GGUF) (*GGUFStore, error) {
	wrap := func(err error) error { return fmt.Errorf("weights: %s: %w", g.Path, err) }
	if a := g.Arch(); a != "gemma3n" {
		if a == "" {
			return nil, wrap(errors.New("no general.architecture: not a llama.cpp model file"))
		}
		return nil, wrap(fmt.Errorf("architecture %q is not gemma3n (Verdict opens gemma3n and gemma4 GGUF files)", a))
	}
	s := &GGUFStore{G: g, views: map[string]*ggufView{}}
	nLayers, err := g.metaInt("gemma3n.block_count")
	if err != nil {
		return nil, wrap(err)
	}
	if nLayers <= 0 || nLayers > 1024 {
		return nil, wrap(fmt.Errorf("gemma3n.block_count %d is outside 1 to 1024", nLayers))
	}
	for _, t := range g.Tensors {
		if err := s.add(t, int(nLayers)); err != nil {
			return nil, wrap(err)
		}
	}
	for name := range ggufGemma3nGlobal {
		if _, ok := g.Tensor(name); !ok {
			return nil, wrap(fmt.Errorf("missing tensor %s", name))
		}
	}
	for name := range ggufGemma3nStacked {
		if _, ok := g.Tensor(name); !ok {
			return nil, wrap(fmt.Errorf("missing tensor %s", name))
		}
	}
	for i := 0; i < int(nLayers); i++ {
		for k := range ggufGemma3nBlock {
			if k == "attn_k.weight" || k == "attn_v.weight" || k == "attn_k_norm.weight" {
				continue // the loader decides which layers need their own k and v
			}
			if name := fmt.Sprintf("blk.%d.%s", i, k); !has(g, name) {
				return nil, wrap(fmt.Errorf("missing tensor %s", name))
			}
		}
	}
	if err := s.trimPLE(); err != nil {
		return nil, wrap(err)
	}
	for name := range s.views {
		s.names = append(s.names, name)
	}
	slices.Sort(s.names)
	if s.cfg, err = s.configJSON(int(nLayers)); err != nil {
		return nil, wrap(err)
	}
	return s, nil
}

func has(g *GGUF, name string) bool { _, ok := g.Tensor(name); return ok }

func (s *GGUFStore) add(t *GGUFTensor, nLayers int) error {
	if hf, ok := ggufGemma3nGlobal[t.Name]; ok {
		return s.view(GGUFPrefix+hf, t, -1, -1)
	}
	if hf, ok := ggufGemma3nStacked[t.Name]; ok {
		if len(t.Dims) != 3 || t.Dims[2] != 3 {
			return fmt.Errorf("tensor %s has dimensions %v, want [D, D, 3]", t.Name, t.Dims)
		}
		for i := 0; i < 3; i++ {
			if err := s.view(fmt.Sprintf("%s%s.%d.weight", GGUFPrefix, hf, i), t, i, -1); err != nil {
				return err
			}
		}
		return nil
	}
	if rest, ok := strings.CutPrefix(t.Name, "blk."); ok {
		num, key, _ := strings.Cut(rest, ".")
		i, err := strconv.Atoi(num)
		if err != nil || i < 0 || strconv.Itoa(i) != num {
			return fmt.Errorf("tensor %s: bad block number", t.Name)
		}
		hf, ok := ggufGemma3nBlock[key]
		if !ok {
			s.ignored = append(s.ignored, t.Name)
			return nil
		}
		if i >= nLayers {
			return fmt.Errorf("tensor %s: block %d beyond gemma3n.block_count %d", t.Name, i, nLayers)
		}
		return s.view(fmt.Sprintf("%slayers.%d.%s", GGUFPrefix, i, hf), t, -1, -1)
	}
	s.ignored = append(s.ignored, t.Name)
	return nil
}

// view serves slice (of the outermost dimension, -1 for none) of t, keeping
// the first rows rows (-1 for all).
func (s *GGUFStore) view(name string, t *GGUFTensor, slice, rows int) error {
	shape := t.Shape()
	raw := t.data
	if slice >= 0 {
		per := len(raw) / shape[0]
		raw = raw[slice*per : (slice+1)*per : (slice+1)*per]
		shape = shape[1:]
	}
	if rows >= 0 {
		per := len(raw) / max(1, shape[0])
		raw = raw[: rows*per : rows*per]
		shape = append([]int{rows}, shape[1:]...)
	}
	n, err := numel(shape)
	if err != nil {
		return fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	s.views[name] = &ggufView{t: t, shape: shape, raw: raw, numel: n}
	return nil
}

// trimPLE drops the per-layer embedding rows the converter padded with
// zeros (vocab_size_per_layer_input to vocab_size).
func (s *GGUFStore) trimPLE() error {
	name := GGUFPrefix + "embed_tokens_per_layer.weight"
	v := s.views[name]
	s.vocabPLE = v.shape[0]
	if len(v.shape) != 2 || v.shape[0] <= GemmaVocabPerLayer {
		return nil
	}
	cols := v.shape[1]
	pad := (v.shape[0] - GemmaVocabPerLayer) * cols
	buf := make([]float32, min(pad, 1<<20))
	for r := GemmaVocabPerLayer; r < v.shape[0]; {
		n := min(v.shape[0]-r, max(1, len(buf)/cols))
		if err := s.rows(v, r, buf[:n*cols]); err != nil {
			return err
		}
		for _, x := range buf[:n*cols] {
			if x != 0 {
				return nil // real rows: the table is served whole
			}
		}
		r += n
	}
	s.vocabPLE = GemmaVocabPerLayer
	return s.view(name, v.t, -1, GemmaVocabPerLayer)
}

// Tokens is the file's vocabulary (tokenizer.ggml.tokens), nil when absent.
func (s *GGUFStore) Tokens() []string {
	t, _ := s.G.KV["tokenizer.ggml.tokens"].Strings()
	return t
}

// Ignored lists the GGUF tensors the store does not serve.
func (s *GGUFStore) Ignored() []string { return slices.Clone(s.ignored) }

// ConfigJSON is the Hugging Face config.json (a gemma3n_text config) built
// from the file's gemma3n.* metadata and tensor shapes.
func (s *GGUFStore) ConfigJSON() []byte { return slices.Clone(s.cfg) }

// Info implements Store.
func (s *GGUFStore) Info(name string) ([]int, string, bool) {
	v, ok := s.views[name]
	if !ok {
		return nil, "", false
	}
	return copyShape(v.shape), v.t.Type.String(), true
}

// Names implements Store.
func (s *GGUFStore) Names() []string { return slices.Clone(s.names) }

func (s *GGUFStore) lookup(name string) (*ggufView, error) {
	if s.closed {
		return nil, errClosed
	}
	v, ok := s.views[name]
	if !ok {
		return nil, fmt.Errorf("weights: %s: %w", name, ErrNotFound)
	}
	if tt := ggmlTypes[v.t.Type]; tt.dequant == nil {
		return nil, fmt.Errorf("weights: %s: %s (GGUF %s): type %s cannot be read as float32 (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K can)", s.G.Path, name, v.t.Name, tt.name)
	}
	return v, nil
}

// Float32 implements Store: F32 data is zero-copy when aligned on a
// little-endian host, anything else is dequantised into a new slice.
func (s *GGUFStore) Float32(name string) ([]float32, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	if v.numel == 0 {
		return []float32{}, nil
	}
	if v.t.Type == GGMLF32 && s.G.file.mapped && littleEndian && aligned(v.raw, 4) {
		return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(v.raw))), v.numel), nil
	}
	out := make([]float32, v.numel)
	if err := DequantizeGGML(v.t.Type, out, v.raw); err != nil {
		return nil, fmt.Errorf("weights: %s: %w", name, err)
	}
	return out, nil
}

// BF16 implements Store.
func (s *GGUFStore) BF16(name string) ([]uint16, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	if v.t.Type != GGMLBF16 {
		return nil, fmt.Errorf("weights: %s: %s: type is %s, not BF16", s.G.Path, name, v.t.Type)
	}
	if v.numel == 0 {
		return []uint16{}, nil
	}
	if s.G.file.mapped && littleEndian && aligned(v.raw, 2) {
		return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(v.raw))), v.numel), nil
	}
	out := make([]uint16, v.numel)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(v.raw[2*i:])
	}
	return out, nil
}

// Rows implements Store, dequantising only the rows asked for.
func (s *GGUFStore) Rows(name string, row0 int, dst []float32) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, err := s.lookup(name)
	if err != nil {
		return err
	}
	return s.rows(v, row0, dst)
}

func (s *GGUFStore) rows(v *ggufView, row0 int, dst []float32) error {
	lo, hi, err := rowSpan(v.t.Name, v.shape, row0, len(dst))
	if err != nil {
		return err
	}
	if lo == hi {
		return nil
	}
	tt := ggmlTypes[v.t.Type]
	// Rows are whole blocks: a row's length (ne0) is a multiple of the block.
	return DequantizeGGML(v.t.Type, dst, v.raw[lo/tt.block*tt.size:hi/tt.block*tt.size])
}

// Close implements Store: it unmaps the file.
func (s *GGUFStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.G.Close(); err != nil {
		return fmt.Errorf("weights: %s: munmap: %w", s.G.Path, err)
	}
	return nil
}

// metaInt reads a required integer key.
func (g *GGUF) metaInt(key string) (int64, error) {
	v, ok := g.KV[key]
	if !ok {
		return 0, fmt.Errorf("missing metadata %s", key)
	}
	i, ok := v.Int()
	if !ok {
		return 0, fmt.Errorf("metadata %s is a %s, want an integer", key, v.Type)
	}
	return i, nil
}

// float32Decimal is the shortest decimal that rounds to the same float32 as
// x: GGUF stores float32 metadata (1e-6 becomes 9.99999997e-07), the
// Hugging Face config the decimal it came from.
func float32Decimal(x float64) float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	d, _ := strconv.ParseFloat(strconv.FormatFloat(float64(float32(x)), 'g', -1, 32), 64)
	return d
}

// configJSON builds the gemma3n_text config from the metadata, as
// llama.cpp's converter or Ollama's (which names a few keys differently)
// writes it. Settings neither writes take transformers' Gemma3nTextConfig
// defaults (altup_coef_clip 120, altup_correct_scale true,
// gelu_pytorch_tanh) and llama.cpp's (rope theta 10000 for sliding layers).
func (s *GGUFStore) configJSON(nLayers int) ([]byte, error) {
	g := s.G
	req := func(key string) (int64, error) { return g.metaInt("gemma3n." + key) }
	cfg := map[string]any{"model_type": "gemma3n_text", "num_hidden_layers": nLayers}
	for key, field := range map[string]string{
		"embedding_length":                 "hidden_size",
		"embedding_length_per_layer_input": "hidden_size_per_layer_input",
		"attention.head_count":             "num_attention_heads",
		"attention.head_count_kv":          "num_key_value_heads",
		"attention.sliding_window":         "sliding_window",
		"context_length":                   "max_position_embeddings",
	} {
		v, err := req(key)
		if err != nil {
			return nil, err
		}
		cfg[field] = v
	}
	// llama.cpp writes attention.key_length, Ollama's converter head_dim.
	hd, err := req("attention.key_length")
	if err != nil {
		if hd, err = req("head_dim"); err != nil {
			return nil, errors.New("missing metadata gemma3n.attention.key_length (or gemma3n.head_dim)")
		}
	}
	cfg["head_dim"] = hd
	shared, err := req("attention.shared_kv_layers")
	if err != nil {
		return nil, err
	}
	cfg["num_kv_shared_layers"] = shared
	for key, field := range map[string]string{"altup.active_idx": "altup_active_idx", "altup.num_inputs": "altup_num_inputs"} {
		if v, err := req(key); err == nil {
			cfg[field] = v
		}
	}
	floatKey := func(key string, def float64) (float64, error) {
		v, ok := g.KV["gemma3n."+key]
		if !ok {
			return def, nil
		}
		f, ok := v.Float()
		if !ok {
			return 0, fmt.Errorf("metadata gemma3n.%s is a %s, want a number", key, v.Type)
		}
		return float32Decimal(f), nil
	}
	eps, err := floatKey("attention.layer_norm_rms_epsilon", 1e-6)
	if err != nil {
		return nil, err
	}
	cfg["rms_norm_eps"] = eps
	if cfg["final_logit_softcapping"], err = floatKey("final_logit_softcapping", 0); err != nil {
		return nil, err
	}
	full, err := floatKey("rope.freq_base", 1e6)
	if err != nil {
		return nil, err
	}
	// llama.cpp: rope.freq_base_swa (else its fixed 10000); Ollama: rope.freq_base_local.
	local, err := floatKey("rope.freq_base_swa", 0)
	if err != nil {
		return nil, err
	}
	if local == 0 {
		if local, err = floatKey("rope.freq_base_local", 10000); err != nil {
			return nil, err
		}
	}
	cfg["rope_parameters"] = map[string]any{
		"full_attention":    map[string]any{"rope_theta": full, "rope_type": "default"},
		"sliding_attention": map[string]any{"rope_theta": local, "rope_type": "default"},
	}

	ff, ok := g.KV["gemma3n.feed_forward_length"]
	if !ok {
		return nil, errors.New("missing metadata gemma3n.feed_forward_length")
	}
	// Arrays are held to the layer count before they are decoded (a hostile
	// file's could take gigabytes as int64s).
	one, isInt := ff.Int()
	list, isInts := []int64(nil), false
	if !isInt && ff.Len() == nLayers {
		list, isInts = ff.Ints()
	}
	switch {
	case isInt:
		cfg["intermediate_size"] = one
	case isInts:
		cfg["intermediate_size"] = list
	default:
		return nil, fmt.Errorf("metadata gemma3n.feed_forward_length is not one integer or %d of them", nLayers)
	}
	if v, ok := g.KV["gemma3n.attention.sliding_window_pattern"]; ok {
		if v.Len() != nLayers {
			return nil, fmt.Errorf("metadata gemma3n.attention.sliding_window_pattern has %d values, not %d bools", v.Len(), nLayers)
		}
		pat, ok := v.Ints()
		if !ok {
			return nil, fmt.Errorf("metadata gemma3n.attention.sliding_window_pattern is not %d bools", nLayers)
		}
		types := make([]string, nLayers)
		for i, sliding := range pat {
			types[i] = map[bool]string{true: "sliding_attention", false: "full_attention"}[sliding != 0]
		}
		cfg["layer_types"] = types
	}
	if v, ok := g.KV["gemma3n.activation_sparsity_scale"]; ok {
		if v.Len() != nLayers {
			return nil, fmt.Errorf("metadata gemma3n.activation_sparsity_scale has %d values, not %d numbers", v.Len(), nLayers)
		}
		zs, ok := v.Floats()
		if !ok {
			return nil, fmt.Errorf("metadata gemma3n.activation_sparsity_scale is not %d numbers", nLayers)
		}
		ps := make([]float64, nLayers)
		for i, z := range zs {
			// the converter stored Φ⁻¹(p); p = Φ(z), 0 for z = −∞
			if math.IsNaN(z) {
				return nil, fmt.Errorf("metadata gemma3n.activation_sparsity_scale[%d] is NaN", i)
			}
			ps[i] = float32Decimal(0.5 * math.Erfc(-z/math.Sqrt2))
		}
		cfg["activation_sparsity_pattern"] = ps
	}
	cfg["altup_coef_clip"] = 120.0
	cfg["altup_correct_scale"] = true
	cfg["hidden_activation"] = "gelu_pytorch_tanh"

	emb := s.views[GGUFPrefix+"embed_tokens.weight"]
	if len(emb.shape) != 2 {
		return nil, fmt.Errorf("token_embd.weight has shape %v, want 2 dimensions", emb.shape)
	}
	cfg["vocab_size"] = emb.shape[0]
	cfg["vocab_size_per_layer_input"] = s.vocabPLE
	if l, ok := s.views[GGUFPrefix+"layers.0.laurel.linear_left.weight"]; ok && len(l.shape) == 2 {
		cfg["laurel_rank"] = l.shape[0]
	}
	for key, field := range map[string]string{"bos_token_id": "bos_token_id", "padding_token_id": "pad_token_id"} {
		if v, err := g.metaInt("tokenizer.ggml." + key); err == nil {
			cfg[field] = v
		}
	}
	var eos []int64
	for _, key := range []string{"eos_token_id", "eot_token_id"} {
		if v, err := g.metaInt("tokenizer.ggml." + key); err == nil && !slices.Contains(eos, v) {
			eos = append(eos, v)
		}
	}
	if len(eos) > 0 {
		cfg["eos_token_id"] = eos
	}
	return json.MarshalIndent(cfg, "", " ")
}
