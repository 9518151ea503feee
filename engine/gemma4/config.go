// Package gemma4 is the Gemma 4 text decoder on the CPU: its config, its
// weights and a float32 forward pass with a KV cache that reproduces
// transformers 5.17's Gemma4ForCausalLM (eager attention, eager experts) as
// build/fixtures/GEMMA4.md describes it: sliding and full attention layers
// with their own head widths, KV-head counts and RoPE (proportional on full
// layers), per-layer inputs (PLE), KV sharing, V = K on full layers
// (attention_k_eq_v), the double-wide MLP, the mixture of experts,
// layer_scalar and the final logit soft-cap.
//
// Model is the reference: plain Go loops, exact against the references in
// testdata/gemma4-synthetic-*.tar.gz. Decoder puts the same weights behind
// the engine's model interface (engine/model): the forward pass as the
// backend's operations on a stream (verdict/native), ragged batches of any
// sequences, keys and values in a paged pool (engine/kvpool), the heads and
// host-driven decode loops; engine/models opens it from a folder.
package gemma4

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// LayerType is an attention layer's kind.
type LayerType int

const (
	// Sliding layers attend to at most SlidingWindow keys (their own included).
	Sliding LayerType = iota
	// Full layers attend to every earlier key.
	Full
)

func (t LayerType) String() string {
	if t == Full {
		return "full_attention"
	}
	return "sliding_attention"
}

// Rope is one layer type's rotary embedding.
type Rope struct {
	// Type is "default" (every frequency pair rotates) or "proportional"
	// (only the first PartialRotaryFactor·d/2 pairs rotate; the rest have
	// frequency 0).
	Type  string
	Theta float64
	// PartialRotaryFactor is 1 for "default".
	PartialRotaryFactor float64
	// Factor divides the frequencies (rope_parameters' "factor"; 1 when absent).
	Factor float64
}

// Config is a Gemma4TextConfig, resolved per layer type.
type Config struct {
	Vocab        int // vocab_size
	Hidden       int // hidden_size D
	Intermediate int // intermediate_size I (the dense MLP; the shared expert in MoE models)
	Layers       int // num_hidden_layers L
	Heads        int // num_attention_heads, every layer

	KVHeads       int // num_key_value_heads: sliding layers, and full layers unless overridden
	HeadDim       int // head_dim: sliding layers
	GlobalHeadDim int // global_head_dim: full layers
	GlobalKVHeads int // full layers' KV heads (num_global_key_value_heads with attention_k_eq_v, else KVHeads)

	LayerTypes    []LayerType
	SlidingWindow int
	Rope          [2]Rope // by LayerType

	PerLayerInput      int // hidden_size_per_layer_input P; 0 turns PLE off
	VocabPerLayerInput int // vocab_size_per_layer_input

	KVSharedLayers int  // num_kv_shared_layers
	DoubleWideMLP  bool // use_double_wide_mlp
	KEqV           bool // attention_k_eq_v: full layers have no v_proj, V is the raw K projection

	MoE             bool // enable_moe_block
	Experts         int  // num_experts E
	TopK            int  // top_k_experts K
	MoEIntermediate int  // moe_intermediate_size I_e

	SoftCap float64 // final_logit_softcapping; 0 = none
	Eps     float64 // rms_norm_eps

	// MaxPositions is max_position_embeddings: the most positions a
	// sequence may hold (0: not given; MaxPositions bounds it).
	MaxPositions int

	PadID, EOSID, BOSID int
}

// Bounds on sizes: far above the released models (vocab 262144, D 5376,
// 60 layers, 128 experts), far below what would make allocations absurd.
const (
	MaxLayers     = 512
	MaxHidden     = 65536
	MaxHeads      = 1024
	MaxHeadDim    = 4096
	MaxVocab      = 1 << 21
	MaxFFN        = 1 << 20
	MaxExperts    = 4096
	MaxWindow     = 1 << 24
	maxJSONConfig = 4 << 20
)

// rawConfig is config.json as written by transformers (text config fields).
type rawConfig struct {
	ModelType          string                    `json:"model_type"`
	TextConfig         json.RawMessage           `json:"text_config"`
	Vocab              *int                      `json:"vocab_size"`
	Hidden             *int                      `json:"hidden_size"`
	Intermediate       *int                      `json:"intermediate_size"`
	Layers             *int                      `json:"num_hidden_layers"`
	Heads              *int                      `json:"num_attention_heads"`
	KVHeads            *int                      `json:"num_key_value_heads"`
	HeadDim            *int                      `json:"head_dim"`
	GlobalHeadDim      *int                      `json:"global_head_dim"`
	GlobalKVHeads      *int                      `json:"num_global_key_value_heads"`
	PerLayerConfig     map[string]map[string]any `json:"per_layer_config"`
	LayerTypes         []string                  `json:"layer_types"`
	SlidingWindow      *int                      `json:"sliding_window"`
	RopeParameters     map[string]map[string]any `json:"rope_parameters"`
	PerLayerInput      *int                      `json:"hidden_size_per_layer_input"`
	VocabPerLayerInput *int                      `json:"vocab_size_per_layer_input"`
	KVSharedLayers     *int                      `json:"num_kv_shared_layers"`
	DoubleWideMLP      *bool                     `json:"use_double_wide_mlp"`
	KEqV               *bool                     `json:"attention_k_eq_v"`
	MoE                *bool                     `json:"enable_moe_block"`
	Experts            *int                      `json:"num_experts"`
	TopK               *int                      `json:"top_k_experts"`
	MoEIntermediate    *int                      `json:"moe_intermediate_size"`
	SoftCap            *float64                  `json:"final_logit_softcapping"`
	MaxPositions       *int                      `json:"max_position_embeddings"`
	Activation         *string                   `json:"hidden_activation"`
	Eps                *float64                  `json:"rms_norm_eps"`
	Tie                *bool                     `json:"tie_word_embeddings"`
	AttentionBias      *bool                     `json:"attention_bias"`
	Bidirectional      *string                   `json:"use_bidirectional_attention"`
	PadID              *int                      `json:"pad_token_id"`
	EOSID              json.RawMessage           `json:"eos_token_id"`
	BOSID              *int                      `json:"bos_token_id"`
}

// ParseConfig reads a Hugging Face config.json: a gemma4_text config, or a
// gemma4 one whose text_config is read. Every field the decoder uses is
// checked; an error names the field.
func ParseConfig(data []byte) (*Config, error) {
	if len(data) > maxJSONConfig {
		return nil, fmt.Errorf("gemma4: config.json is %d bytes (at most %d)", len(data), maxJSONConfig)
	}
	var r rawConfig
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("gemma4: config.json: %w", err)
	}
	switch r.ModelType {
	case "gemma4_text":
	case "gemma4":
		if len(r.TextConfig) == 0 || string(r.TextConfig) == "null" {
			return nil, errors.New("gemma4: config.json: model_type gemma4 without text_config")
		}
		var t rawConfig
		if err := json.Unmarshal(r.TextConfig, &t); err != nil {
			return nil, fmt.Errorf("gemma4: config.json: text_config: %w", err)
		}
		if t.ModelType != "" && t.ModelType != "gemma4_text" {
			return nil, fmt.Errorf("gemma4: config.json: text_config.model_type %q, want gemma4_text", t.ModelType)
		}
		r = t
	default:
		return nil, fmt.Errorf("gemma4: config.json: model_type %q, want gemma4_text or gemma4", r.ModelType)
	}
	return r.resolve()
}

func field(name string, format string, a ...any) error {
	return fmt.Errorf("gemma4: config.json: %s: %s", name, fmt.Sprintf(format, a...))
}

// intIn reads a required int field in [lo, hi].
func intIn(name string, p *int, lo, hi int) (int, error) {
	if p == nil {
		return 0, field(name, "missing")
	}
	if *p < lo || *p > hi {
		return 0, field(name, "%d is outside [%d, %d]", *p, lo, hi)
	}
	return *p, nil
}

// optInt reads an optional int field (def when absent or null) in [lo, hi].
func optInt(name string, p *int, def, lo, hi int) (int, error) {
	if p == nil {
		return def, nil
	}
	return intIn(name, p, lo, hi)
}

func optBool(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

func (r *rawConfig) resolve() (*Config, error) {
	c := &Config{}
	var err error
	if c.Vocab, err = intIn("vocab_size", r.Vocab, 1, MaxVocab); err != nil {
		return nil, err
	}
	if c.Hidden, err = intIn("hidden_size", r.Hidden, 1, MaxHidden); err != nil {
		return nil, err
	}
	if c.Intermediate, err = intIn("intermediate_size", r.Intermediate, 1, MaxFFN); err != nil {
		return nil, err
	}
	if c.Layers, err = intIn("num_hidden_layers", r.Layers, 1, MaxLayers); err != nil {
		return nil, err
	}
	if c.Heads, err = intIn("num_attention_heads", r.Heads, 1, MaxHeads); err != nil {
		return nil, err
	}
	if c.KVHeads, err = intIn("num_key_value_heads", r.KVHeads, 1, MaxHeads); err != nil {
		return nil, err
	}
	if c.Heads%c.KVHeads != 0 {
		return nil, field("num_key_value_heads", "%d does not divide num_attention_heads %d", c.KVHeads, c.Heads)
	}
	if c.HeadDim, err = intIn("head_dim", r.HeadDim, 2, MaxHeadDim); err != nil {
		return nil, err
	}
	if c.HeadDim%2 != 0 {
		return nil, field("head_dim", "%d is odd (RoPE pairs dims j and j+d/2)", c.HeadDim)
	}
	c.KEqV = optBool(r.KEqV, false)

	// Layer types. As transformers does: absent, 5 sliding then 1 full; and
	// the last layer is forced to full whatever the config says.
	c.LayerTypes = make([]LayerType, c.Layers)
	if r.LayerTypes == nil {
		for i := range c.LayerTypes {
			if (i+1)%6 == 0 {
				c.LayerTypes[i] = Full
			}
		}
	} else {
		if len(r.LayerTypes) != c.Layers {
			return nil, field("layer_types", "%d entries for %d layers", len(r.LayerTypes), c.Layers)
		}
		for i, s := range r.LayerTypes {
			switch s {
			case "sliding_attention":
				c.LayerTypes[i] = Sliding
			case "full_attention":
				c.LayerTypes[i] = Full
			default:
				return nil, field("layer_types", "[%d] is %q, want sliding_attention or full_attention", i, s)
			}
		}
	}
	c.LayerTypes[c.Layers-1] = Full
	hasFull := false
	hasSliding := false
	for _, t := range c.LayerTypes {
		hasFull = hasFull || t == Full
		hasSliding = hasSliding || t == Sliding
	}

	// Full layers' head width and KV heads: global_head_dim /
	// num_global_key_value_heads, else per_layer_config (5.17's to_dict).
	plcHeadDim, plcKV, err := r.perLayerConfig(c)
	if err != nil {
		return nil, err
	}
	switch {
	case r.GlobalHeadDim != nil:
		if c.GlobalHeadDim, err = intIn("global_head_dim", r.GlobalHeadDim, 2, MaxHeadDim); err != nil {
			return nil, err
		}
		if plcHeadDim != 0 && plcHeadDim != c.GlobalHeadDim {
			return nil, field("per_layer_config", "head_dim %d disagrees with global_head_dim %d", plcHeadDim, c.GlobalHeadDim)
		}
	case plcHeadDim != 0:
		c.GlobalHeadDim = plcHeadDim
	case hasFull:
		return nil, field("global_head_dim", "missing (and no per_layer_config gives the full layers' head_dim)")
	default:
		c.GlobalHeadDim = c.HeadDim
	}
	if c.GlobalHeadDim%2 != 0 {
		return nil, field("global_head_dim", "%d is odd", c.GlobalHeadDim)
	}
	c.GlobalKVHeads = c.KVHeads
	if c.KEqV {
		switch {
		case r.GlobalKVHeads != nil:
			if c.GlobalKVHeads, err = intIn("num_global_key_value_heads", r.GlobalKVHeads, 1, MaxHeads); err != nil {
				return nil, err
			}
			if plcKV != 0 && plcKV != c.GlobalKVHeads {
				return nil, field("per_layer_config", "num_key_value_heads %d disagrees with num_global_key_value_heads %d", plcKV, c.GlobalKVHeads)
			}
		case plcKV != 0:
			c.GlobalKVHeads = plcKV
		}
		// HF: num_global_key_value_heads None keeps num_key_value_heads.
	} else if plcKV != 0 && plcKV != c.KVHeads {
		return nil, field("per_layer_config", "num_key_value_heads %d on full layers without attention_k_eq_v", plcKV)
	}
	if c.Heads%c.GlobalKVHeads != 0 {
		return nil, field("num_global_key_value_heads", "%d does not divide num_attention_heads %d", c.GlobalKVHeads, c.Heads)
	}

	if hasSliding {
		if c.SlidingWindow, err = intIn("sliding_window", r.SlidingWindow, 1, MaxWindow); err != nil {
			return nil, err
		}
	} else if c.SlidingWindow, err = optInt("sliding_window", r.SlidingWindow, 0, 1, MaxWindow); err != nil {
		return nil, err
	}

	if err := r.rope(c, hasSliding, hasFull); err != nil {
		return nil, err
	}

	if c.PerLayerInput, err = optInt("hidden_size_per_layer_input", r.PerLayerInput, 0, 0, MaxHidden); err != nil {
		return nil, err
	}
	if c.PerLayerInput > 0 {
		if c.VocabPerLayerInput, err = intIn("vocab_size_per_layer_input", r.VocabPerLayerInput, 1, MaxVocab); err != nil {
			return nil, err
		}
		if c.VocabPerLayerInput < c.Vocab {
			// Gemma 4 does not clamp ids: every token id must have a PLE row.
			return nil, field("vocab_size_per_layer_input", "%d is below vocab_size %d (ids are not clamped in Gemma 4)", c.VocabPerLayerInput, c.Vocab)
		}
		if int64(c.Layers)*int64(c.PerLayerInput) > MaxFFN {
			return nil, field("hidden_size_per_layer_input", "%d × %d layers is over %d", c.PerLayerInput, c.Layers, MaxFFN)
		}
	}

	if c.KVSharedLayers, err = optInt("num_kv_shared_layers", r.KVSharedLayers, 0, 0, c.Layers-1); err != nil {
		return nil, err
	}
	first := c.Layers - c.KVSharedLayers
	for l := first; l < c.Layers; l++ {
		if c.KVSource(l) < 0 {
			return nil, field("num_kv_shared_layers", "layer %d (%s) is KV-shared but no earlier unshared layer has its type", l, c.LayerTypes[l])
		}
	}
	c.DoubleWideMLP = optBool(r.DoubleWideMLP, false)
	if c.DoubleWideMLP && 2*c.Intermediate > MaxFFN {
		return nil, field("intermediate_size", "2 × %d (double-wide MLP) is over %d", c.Intermediate, MaxFFN)
	}

	c.MoE = optBool(r.MoE, false)
	if c.MoE {
		if c.Experts, err = intIn("num_experts", r.Experts, 1, MaxExperts); err != nil {
			return nil, err
		}
		if c.TopK, err = intIn("top_k_experts", r.TopK, 1, c.Experts); err != nil {
			return nil, err
		}
		if c.MoEIntermediate, err = intIn("moe_intermediate_size", r.MoEIntermediate, 1, MaxFFN); err != nil {
			return nil, err
		}
	}

	if r.SoftCap != nil {
		if !(*r.SoftCap > 0) || math.IsInf(*r.SoftCap, 0) {
			return nil, field("final_logit_softcapping", "%v, want null or a finite positive number", *r.SoftCap)
		}
		c.SoftCap = *r.SoftCap
	}
	if c.MaxPositions, err = optInt("max_position_embeddings", r.MaxPositions, 0, 1, MaxPositions); err != nil {
		return nil, err
	}
	c.Eps = 1e-6
	if r.Eps != nil {
		if !(*r.Eps > 0 && *r.Eps < 1) {
			return nil, field("rms_norm_eps", "%v, want in (0, 1)", *r.Eps)
		}
		c.Eps = *r.Eps
	}
	if r.Activation != nil && *r.Activation != "gelu_pytorch_tanh" {
		return nil, field("hidden_activation", "%q, only gelu_pytorch_tanh is implemented", *r.Activation)
	}
	if r.Tie != nil && !*r.Tie {
		return nil, field("tie_word_embeddings", "false: only the tied LM head is implemented")
	}
	if r.AttentionBias != nil && *r.AttentionBias {
		return nil, field("attention_bias", "true: Gemma 4 has no biases")
	}
	if r.Bidirectional != nil && *r.Bidirectional != "vision" {
		// "vision" concerns image tokens only (multimodal); a text decoder is causal either way.
		return nil, field("use_bidirectional_attention", "%q, only null or \"vision\" are known", *r.Bidirectional)
	}
	if c.PadID, err = optInt("pad_token_id", r.PadID, 0, 0, c.Vocab-1); err != nil {
		return nil, err
	}
	if c.BOSID, err = optInt("bos_token_id", r.BOSID, 2, 0, c.Vocab-1); err != nil {
		return nil, err
	}
	c.EOSID = 1
	if len(r.EOSID) > 0 && string(r.EOSID) != "null" {
		var one int
		var many []int
		switch {
		case json.Unmarshal(r.EOSID, &one) == nil:
		case json.Unmarshal(r.EOSID, &many) == nil && len(many) > 0:
			one = many[0]
		default:
			return nil, field("eos_token_id", "%s, want an id or a list of ids", r.EOSID)
		}
		if one < 0 || one >= c.Vocab {
			return nil, field("eos_token_id", "%d is outside [0, %d)", one, c.Vocab)
		}
		c.EOSID = one
	}
	return c, nil
}

// perLayerConfig reads per_layer_config ({"<layer>": {"head_dim": …,
// "num_key_value_heads": …}}) for the full layers; 0 where it says nothing.
// All full layers must agree, and only full layers may be overridden.
func (r *rawConfig) perLayerConfig(c *Config) (headDim, kvHeads int, err error) {
	for key, m := range r.PerLayerConfig {
		l, err := strconv.Atoi(key)
		if err != nil || l < 0 || l >= c.Layers {
			return 0, 0, field("per_layer_config", "key %q is not a layer index below %d", key, c.Layers)
		}
		for name, v := range m {
			f, ok := v.(float64)
			if !ok || f != math.Trunc(f) || f < 1 || f > MaxHeadDim {
				return 0, 0, field("per_layer_config", "[%s].%s = %v is not a size", key, name, v)
			}
			n := int(f)
			var dst *int
			switch name {
			case "head_dim":
				dst = &headDim
			case "num_key_value_heads":
				dst = &kvHeads
			default:
				return 0, 0, field("per_layer_config", "[%s].%s is not a field this decoder knows", key, name)
			}
			if c.LayerTypes[l] != Full {
				return 0, 0, field("per_layer_config", "[%s] overrides %s on a sliding layer", key, name)
			}
			if *dst != 0 && *dst != n {
				return 0, 0, field("per_layer_config", "full layers disagree on %s (%d, %d)", name, *dst, n)
			}
			*dst = n
		}
	}
	return headDim, kvHeads, nil
}

// defaultRope is transformers' rope_parameters when the config has none.
var defaultRope = map[string]map[string]any{
	"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
	"full_attention":    {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
}

func (r *rawConfig) rope(c *Config, hasSliding, hasFull bool) error {
	if r.RopeParameters == nil {
		r.RopeParameters = defaultRope
	}
	for _, t := range []LayerType{Sliding, Full} {
		name := "rope_parameters." + t.String()
		m, ok := r.RopeParameters[t.String()]
		if !ok {
			if (t == Sliding && hasSliding) || (t == Full && hasFull) {
				return field(name, "missing")
			}
			continue
		}
		rp := Rope{Type: "default", PartialRotaryFactor: 1, Factor: 1}
		if v, ok := m["rope_type"]; ok {
			s, _ := v.(string)
			if s != "default" && s != "proportional" {
				return field(name+".rope_type", "%v, want default or proportional", v)
			}
			rp.Type = s
		}
		num := func(key string, dst *float64, lo, hi float64, required bool) error {
			v, ok := m[key]
			if !ok || v == nil {
				if required {
					return field(name+"."+key, "missing")
				}
				return nil
			}
			f, ok := v.(float64)
			if !ok || !(f > lo && f <= hi) {
				return field(name+"."+key, "%v, want a number in (%g, %g]", v, lo, hi)
			}
			*dst = f
			return nil
		}
		if err := num("rope_theta", &rp.Theta, 1, 1e12, true); err != nil {
			return err
		}
		if err := num("partial_rotary_factor", &rp.PartialRotaryFactor, 0, 1, false); err != nil {
			return err
		}
		if err := num("factor", &rp.Factor, 0, 1e6, false); err != nil {
			return err
		}
		if rp.Type == "default" && rp.PartialRotaryFactor != 1 {
			return field(name+".partial_rotary_factor", "%v on a default rope (only proportional rotates part)", rp.PartialRotaryFactor)
		}
		if rp.Type == "default" && rp.Factor != 1 {
			return field(name+".factor", "%v on a default rope", rp.Factor)
		}
		c.Rope[t] = rp
	}
	return nil
}

// LayerHeadDim is layer l's head width.
func (c *Config) LayerHeadDim(l int) int {
	if c.LayerTypes[l] == Full {
		return c.GlobalHeadDim
	}
	return c.HeadDim
}

// LayerKVHeads is layer l's KV-head count.
func (c *Config) LayerKVHeads(l int) int {
	if c.LayerTypes[l] == Full {
		return c.GlobalKVHeads
	}
	return c.KVHeads
}

// FirstShared is the first KV-shared layer (Layers when none is).
func (c *Config) FirstShared() int { return c.Layers - c.KVSharedLayers }

// KVShared reports whether layer l reads another layer's K and V.
func (c *Config) KVShared(l int) bool { return l >= c.FirstShared() }

// KVSource is the layer whose K and V layer l uses: l itself when it is not
// shared, else the last layer before FirstShared of the same type (-1 when
// there is none).
func (c *Config) KVSource(l int) int {
	if !c.KVShared(l) {
		return l
	}
	for s := c.FirstShared() - 1; s >= 0; s-- {
		if c.LayerTypes[s] == c.LayerTypes[l] {
			return s
		}
	}
	return -1
}

// VIsK reports whether layer l has no v_proj (V = the raw K projection).
func (c *Config) VIsK(l int) bool { return c.KEqV && c.LayerTypes[l] == Full }

// LayerIntermediate is layer l's dense MLP width: 2I on KV-shared layers with
// the double-wide MLP.
func (c *Config) LayerIntermediate(l int) int {
	if c.DoubleWideMLP && c.KVSharedLayers > 0 && c.KVShared(l) {
		return 2 * c.Intermediate
	}
	return c.Intermediate
}
