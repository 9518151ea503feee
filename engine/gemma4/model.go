package gemma4

import (
	"fmt"
	"slices"

	"verdict/engine/weights"
)

// Layer holds one decoder layer's weights (row-major, nn.Linear's [out, in]).
type Layer struct {
	InputNorm, PostAttnNorm    []float32 // [D]
	Q                          []float32 // [H·d, D]
	QNorm                      []float32 // [d]
	K, V                       []float32 // [H_kv·d, D]; nil on KV-shared layers, V nil when V = K
	KNorm                      []float32 // [d]; nil on KV-shared layers
	O                          []float32 // [D, H·d]
	PreFFNorm, PostFFNorm      []float32 // [D]
	Gate, Up                   []float32 // [I', D]
	Down                       []float32 // [D, I']
	PLEGate                    []float32 // [P, D] (PLE only)
	PLEProj                    []float32 // [D, P]
	PLENorm                    []float32 // [D]
	RouterProj                 []float32 // [E, D] (MoE only)
	RouterScale                []float32 // [D]
	PerExpertScale             []float32 // [E]
	ExpertGateUp               []float32 // [E, 2·I_e, D]
	ExpertDown                 []float32 // [E, D, I_e]
	PostFFNorm1, PostFFNorm2   []float32 // [D]
	PreFFNorm2                 []float32 // [D]
	Scalar                     float32   // layer_scalar
	intermediate, headDim, kvH int
}

// Model is a loaded Gemma 4 text decoder. Its weights are copies: the store
// may be closed once Load returns.
type Model struct {
	Cfg      *Config
	Embed    []float32 // [V, D], also the LM head
	EmbedPL  []float32 // [V_pl, L·P] (PLE only)
	PLProj   []float32 // [L·P, D]
	PLNorm   []float32 // [P]
	Norm     []float32 // [D]
	Layers   []Layer
	rope     [2]ropeTable
	embScale float32 // float32(√D)
	pleScale float32 // float32(√P)
}

// Load reads the decoder's tensors from st, under model.X
// (Gemma4ForCausalLM) or model.language_model.X (Gemma4ForConditionalGeneration),
// checking every shape. Tensors the decoder does not use (a tied lm_head,
// KV-shared layers' k/v projections, towers) are ignored. Every weight is
// copied into Go memory, the per-layer table included: the plain-Go
// reference's way. Open builds a Decoder from a store without keeping
// these copies.
func Load(cfg *Config, st weights.Store) (*Model, error) {
	ld, err := newLoader(cfg, st, true)
	if err != nil {
		return nil, err
	}
	m := &Model{Cfg: cfg}
	ld.top(m, true)
	m.Layers = make([]Layer, cfg.Layers)
	for l := range m.Layers {
		ld.layer(l, &m.Layers[l])
	}
	if ld.err != nil {
		return nil, ld.err
	}
	m.setDerived()
	return m, nil
}

// setDerived computes what the Model derives from its config: the rotary
// tables and the embedding scales.
func (m *Model) setDerived() {
	c := m.Cfg
	for _, t := range []LayerType{Sliding, Full} {
		d := c.HeadDim
		if t == Full {
			d = c.GlobalHeadDim
		}
		m.rope[t] = newRopeTable(c.Rope[t], d)
	}
	m.embScale = float32(sqrt64(float64(c.Hidden)))
	m.pleScale = float32(sqrt64(float64(c.PerLayerInput)))
}

// loader reads the decoder's tensors from a store, one group at a time,
// checking each shape against the config. The first error stops it (err).
type loader struct {
	cfg    *Config
	st     weights.Store
	prefix string          // "model." or "model.language_model."
	copy   bool            // clone what the store returns (it may be the store's own memory)
	dry    bool            // check names and shapes only: every tensor present reads as an empty slice
	skip   map[string]bool // names (under the prefix) read as an empty slice after their shape check: packed ones a cache file holds
	err    error
}

// newLoader finds the prefix the store's decoder tensors sit under; copy
// says whether the tensors read are cloned out of the store.
func newLoader(cfg *Config, st weights.Store, copy bool) (*loader, error) {
	prefix := "model."
	if _, _, ok := st.Info("model.embed_tokens.weight"); !ok {
		if _, _, ok := st.Info("model.language_model.embed_tokens.weight"); ok {
			prefix = "model.language_model."
		} else {
			return nil, fmt.Errorf("gemma4: the store has neither model.embed_tokens.weight nor model.language_model.embed_tokens.weight: %w", weights.ErrNotFound)
		}
	}
	return &loader{cfg: cfg, st: st, prefix: prefix, copy: copy}, nil
}

// check checks that tensor name (under the prefix) has shape and returns
// its full name ("" after an error).
func (ld *loader) check(name string, shape ...int) string {
	if ld.err != nil {
		return ""
	}
	full := ld.prefix + name
	got, _, ok := ld.st.Info(full)
	if !ok {
		ld.err = fmt.Errorf("gemma4: %s: %w", full, weights.ErrNotFound)
		return ""
	}
	if !slices.Equal(got, shape) {
		ld.err = fmt.Errorf("gemma4: %s: shape %v, the config says %v", full, got, shape)
		return ""
	}
	return full
}

// get reads tensor name (under the prefix) as float32, checking its shape.
func (ld *loader) get(name string, shape ...int) []float32 {
	full := ld.check(name, shape...)
	if full == "" {
		return nil
	}
	if ld.dry || ld.skip[name] {
		return []float32{}
	}
	v, err := ld.st.Float32(full)
	if err != nil {
		ld.err = fmt.Errorf("gemma4: %s: %w", full, err)
		return nil
	}
	n := 1
	for _, s := range shape {
		n *= s
	}
	if len(v) != n {
		ld.err = fmt.Errorf("gemma4: %s: the store gave %d values for shape %v", full, len(v), shape)
		return nil
	}
	if ld.copy {
		return slices.Clone(v)
	}
	return v
}

// top reads the weights outside the layers into m: the embedding, the
// final norm and the per-layer projection; the per-layer table too when
// table is set (else only its shape is checked).
func (ld *loader) top(m *Model, table bool) {
	c := ld.cfg
	D, P := c.Hidden, c.PerLayerInput
	m.Embed = ld.get("embed_tokens.weight", c.Vocab, D)
	m.Norm = ld.get("norm.weight", D)
	if P > 0 {
		if table {
			m.EmbedPL = ld.get(pleTensor, c.VocabPerLayerInput, c.Layers*P)
		} else {
			ld.check(pleTensor, c.VocabPerLayerInput, c.Layers*P)
		}
		m.PLProj = ld.get("per_layer_model_projection.weight", c.Layers*P, D)
		m.PLNorm = ld.get("per_layer_projection_norm.weight", P)
	}
}

// pleTensor is the per-layer embedding table's name under the prefix.
const pleTensor = "embed_tokens_per_layer.weight"

// layer reads decoder layer l's weights into ly.
func (ld *loader) layer(l int, ly *Layer) {
	c := ld.cfg
	D, P := c.Hidden, c.PerLayerInput
	get := ld.get
	p := fmt.Sprintf("layers.%d.", l)
	d, kv, H := c.LayerHeadDim(l), c.LayerKVHeads(l), c.Heads
	ly.headDim, ly.kvH, ly.intermediate = d, kv, c.LayerIntermediate(l)
	ly.InputNorm = get(p+"input_layernorm.weight", D)
	ly.PostAttnNorm = get(p+"post_attention_layernorm.weight", D)
	ly.Q = get(p+"self_attn.q_proj.weight", H*d, D)
	ly.QNorm = get(p+"self_attn.q_norm.weight", d)
	if !c.KVShared(l) {
		ly.K = get(p+"self_attn.k_proj.weight", kv*d, D)
		ly.KNorm = get(p+"self_attn.k_norm.weight", d)
		if !c.VIsK(l) {
			ly.V = get(p+"self_attn.v_proj.weight", kv*d, D)
		}
	}
	ly.O = get(p+"self_attn.o_proj.weight", D, H*d)
	ly.PreFFNorm = get(p+"pre_feedforward_layernorm.weight", D)
	ly.PostFFNorm = get(p+"post_feedforward_layernorm.weight", D)
	I := ly.intermediate
	ly.Gate = get(p+"mlp.gate_proj.weight", I, D)
	ly.Up = get(p+"mlp.up_proj.weight", I, D)
	ly.Down = get(p+"mlp.down_proj.weight", D, I)
	if P > 0 {
		ly.PLEGate = get(p+"per_layer_input_gate.weight", P, D)
		ly.PLEProj = get(p+"per_layer_projection.weight", D, P)
		ly.PLENorm = get(p+"post_per_layer_input_norm.weight", D)
	}
	if c.MoE {
		E, Ie := c.Experts, c.MoEIntermediate
		ly.RouterProj = get(p+"router.proj.weight", E, D)
		ly.RouterScale = get(p+"router.scale", D)
		ly.PerExpertScale = get(p+"router.per_expert_scale", E)
		ly.ExpertGateUp = get(p+"experts.gate_up_proj", E, 2*Ie, D)
		ly.ExpertDown = get(p+"experts.down_proj", E, D, Ie)
		ly.PostFFNorm1 = get(p+"post_feedforward_layernorm_1.weight", D)
		ly.PostFFNorm2 = get(p+"post_feedforward_layernorm_2.weight", D)
		ly.PreFFNorm2 = get(p+"pre_feedforward_layernorm_2.weight", D)
	}
	if s := get(p+"layer_scalar", 1); len(s) == 1 {
		ly.Scalar = s[0]
	}
}
