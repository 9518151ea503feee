// Package gemma3n is the Gemma 3n text decoder as Hugging Face transformers
// computes it (float32, with its KV cache): configuration, weights bound by
// their checkpoint names, the forward pass and the KV cache.
package gemma3n

import (
	"encoding/json"
	"fmt"
	"math"

	"verdict/engine/model"
	"verdict/engine/weights"
)

// Config is the text decoder's configuration (transformers' Gemma3nTextConfig).
type Config struct {
	VocabSize             int       `json:"vocab_size"`
	VocabSizePerLayer     int       `json:"vocab_size_per_layer_input"`
	HiddenSize            int       `json:"hidden_size"`
	PerLayerSize          int       `json:"hidden_size_per_layer_input"`
	IntermediateSize      []int     `json:"-"`
	NumLayers             int       `json:"num_hidden_layers"`
	NumHeads              int       `json:"num_attention_heads"`
	NumKVHeads            int       `json:"num_key_value_heads"`
	HeadDim               int       `json:"head_dim"`
	NumKVSharedLayers     int       `json:"num_kv_shared_layers"`
	LayerTypes            []string  `json:"layer_types"`
	SlidingWindow         int       `json:"sliding_window"`
	RMSNormEps            float64   `json:"rms_norm_eps"`
	FinalLogitSoftcap     float64   `json:"final_logit_softcapping"`
	ActivationSparsity    []float64 `json:"activation_sparsity_pattern"`
	LaurelRank            int       `json:"laurel_rank"`
	AltUpNumInputs        int       `json:"altup_num_inputs"`
	AltUpActiveIdx        int       `json:"altup_active_idx"`
	AltUpCoefClip         float64   `json:"altup_coef_clip"`
	AltUpCorrectScale     bool      `json:"altup_correct_scale"`
	HiddenActivation      string    `json:"hidden_activation"`
	MaxPositionEmbeddings int       `json:"max_position_embeddings"`
	BOS                   int       `json:"bos_token_id"`
	PAD                   int       `json:"pad_token_id"`
	EOS                   []int     `json:"-"`
	// RopeTheta maps a layer type to its RoPE base.
	RopeTheta map[string]float64 `json:"-"`
}

// Special token ids of a Gemma 3n conditional-generation config (zero when the
// config is text only): the engine's media tokens (model.Special).
type Special = model.Special

// ParseConfig reads a Hugging Face config.json: either a conditional-generation
// config (text settings under "text_config") or a text-only one.
func ParseConfig(data []byte) (Config, Special, error) {
	var top struct {
		ModelType  string          `json:"model_type"`
		TextConfig json.RawMessage `json:"text_config"`
		BOI        int             `json:"boi_token_id"`
		EOI        int             `json:"eoi_token_id"`
		Image      int             `json:"image_token_id"`
		BOA        int             `json:"boa_token_id"`
		EOA        int             `json:"eoa_token_id"`
		Audio      int             `json:"audio_token_id"`
		VisionN    int             `json:"vision_soft_tokens_per_image"`
		AudioN     int             `json:"audio_soft_tokens_per_image"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return Config{}, Special{}, fmt.Errorf("config.json: %w", err)
	}
	sp := Special{BOI: top.BOI, EOI: top.EOI, Image: top.Image, BOA: top.BOA, EOA: top.EOA, Audio: top.Audio, VisionTokens: top.VisionN, AudioTokens: top.AudioN}
	text := data
	if len(top.TextConfig) > 0 {
		text = top.TextConfig
	} else if top.ModelType != "gemma3n_text" {
		return Config{}, sp, fmt.Errorf("config.json: model_type %q is not gemma3n or gemma3n_text", top.ModelType)
	}
	c, err := parseText(text)
	if err != nil {
		return c, sp, err
	}
	return c, sp, validateSpecial(sp)
}

// Bounds on what a config may ask for, checked before anything is sized by
// it; LoadWith then holds every size to the checkpoint's tensors.
const (
	maxLayers     = 1024
	maxWidth      = 1 << 16 // hidden sizes, head dims, heads, ranks
	maxVocab      = 1 << 22
	maxSoftTokens = 1 << 16
)

// validate checks the multimodal token ids (they may lie past the text
// vocabulary: the vision and audio embedders hold them) and counts.
func validateSpecial(sp Special) error {
	for _, f := range []struct {
		name string
		id   int
	}{{"boi_token_id", sp.BOI}, {"eoi_token_id", sp.EOI}, {"image_token_id", sp.Image},
		{"boa_token_id", sp.BOA}, {"eoa_token_id", sp.EOA}, {"audio_token_id", sp.Audio}} {
		if f.id < 0 || f.id > maxVocab {
			return fmt.Errorf("config.json: %s %d is outside [0, %d]", f.name, f.id, maxVocab)
		}
	}
	for _, f := range []struct {
		name string
		n    int
	}{{"vision_soft_tokens_per_image", sp.VisionTokens}, {"audio_soft_tokens_per_image", sp.AudioTokens}} {
		if f.n < 0 || f.n > maxSoftTokens {
			return fmt.Errorf("config.json: %s %d is outside [0, %d]", f.name, f.n, maxSoftTokens)
		}
	}
	return nil
}

// Transformers' Gemma3nTextConfig defaults for the settings a config may
// leave out.
const (
	defaultRMSNormEps    = 1e-6
	defaultSlidingWindow = 512
	defaultMaxPositions  = 32768
)

// listFields are the settings that hold lists (per layer at most) or maps,
// bounded to maxListJSON bytes of JSON before they are decoded: 1024
// layers' entries, indented, take under 40 KB, while 4 MB of empty ones
// would make encoding/json allocate over 100 MB.
var listFields = map[string]int{
	"layer_types": maxListJSON, "activation_sparsity_pattern": maxListJSON, "intermediate_size": maxListJSON,
	"eos_token_id": maxListJSON, "rope_parameters": maxListJSON,
}

const maxListJSON = 64 << 10

func parseText(data []byte) (Config, error) {
	var c Config
	if err := weights.CheckJSONFields(data, listFields); err != nil {
		return c, fmt.Errorf("text_config: %w", err)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("text_config: %w", err)
	}
	var extra struct {
		Intermediate json.RawMessage `json:"intermediate_size"`
		EOS          json.RawMessage `json:"eos_token_id"`
		Rope         map[string]struct {
			Theta float64 `json:"rope_theta"`
			Type  string  `json:"rope_type"`
		} `json:"rope_parameters"`
		RopeTheta      float64  `json:"rope_theta"`
		RopeLocalTheta float64  `json:"rope_local_base_freq"`
		Eps            *float64 `json:"rms_norm_eps"`
		Window         *int     `json:"sliding_window"`
		MaxPositions   *int     `json:"max_position_embeddings"`
	}
	if err := json.Unmarshal(data, &extra); err != nil {
		return c, fmt.Errorf("text_config: %w", err)
	}
	if extra.Eps == nil {
		c.RMSNormEps = defaultRMSNormEps
	}
	if extra.Window == nil {
		c.SlidingWindow = defaultSlidingWindow
	}
	if extra.MaxPositions == nil {
		c.MaxPositionEmbeddings = defaultMaxPositions
	}
	// Sizes first: num_hidden_layers sizes the per-layer lists below.
	if err := c.validateSizes(); err != nil {
		return c, err
	}
	var one int
	if err := json.Unmarshal(extra.Intermediate, &one); err == nil {
		c.IntermediateSize = make([]int, c.NumLayers)
		for i := range c.IntermediateSize {
			c.IntermediateSize[i] = one
		}
	} else if err := json.Unmarshal(extra.Intermediate, &c.IntermediateSize); err != nil {
		return c, fmt.Errorf("text_config: intermediate_size: %w", err)
	}
	if err := json.Unmarshal(extra.EOS, &one); err == nil {
		c.EOS = []int{one}
	} else if len(extra.EOS) > 0 {
		if err := json.Unmarshal(extra.EOS, &c.EOS); err != nil {
			return c, fmt.Errorf("text_config: eos_token_id: %w", err)
		}
	}
	c.RopeTheta = map[string]float64{}
	for typ, p := range extra.Rope {
		if p.Type != "" && p.Type != "default" {
			return c, fmt.Errorf("text_config: rope_type %q for %s is not supported", p.Type, typ)
		}
		c.RopeTheta[typ] = p.Theta
	}
	if len(c.RopeTheta) == 0 { // transformers 4.x names
		c.RopeTheta["full_attention"] = extra.RopeTheta
		c.RopeTheta["sliding_attention"] = extra.RopeLocalTheta
	}
	if len(c.LayerTypes) == 0 {
		for i := 0; i < c.NumLayers; i++ {
			t := "sliding_attention"
			if (i+1)%5 == 0 {
				t = "full_attention"
			}
			c.LayerTypes = append(c.LayerTypes, t)
		}
	}
	if c.AltUpNumInputs == 0 {
		c.AltUpNumInputs = 4
	}
	return c, c.validate()
}

// validateSizes checks every size of the config against its domain and the
// package's bounds, before any of them sizes an allocation.
func (c Config) validateSizes() error {
	for _, f := range []struct {
		name   string
		v, max int
	}{
		{"num_hidden_layers", c.NumLayers, maxLayers},
		{"hidden_size", c.HiddenSize, maxWidth},
		{"hidden_size_per_layer_input", c.PerLayerSize, maxWidth},
		{"num_attention_heads", c.NumHeads, maxWidth},
		{"num_key_value_heads", c.NumKVHeads, maxWidth},
		{"head_dim", c.HeadDim, maxWidth},
		{"laurel_rank", c.LaurelRank, maxWidth},
		{"vocab_size", c.VocabSize, maxVocab},
		{"vocab_size_per_layer_input", c.VocabSizePerLayer, maxVocab},
		{"sliding_window", c.SlidingWindow, math.MaxInt32},
		{"max_position_embeddings", c.MaxPositionEmbeddings, math.MaxInt32},
	} {
		if f.v <= 0 {
			return fmt.Errorf("text_config: %s must be positive, got %d", f.name, f.v)
		}
		if f.v > f.max {
			return fmt.Errorf("text_config: %s %d is over the limit of %d", f.name, f.v, f.max)
		}
	}
	if c.VocabSizePerLayer > c.VocabSize {
		return fmt.Errorf("text_config: vocab_size_per_layer_input %d is larger than vocab_size %d", c.VocabSizePerLayer, c.VocabSize)
	}
	return nil
}

func (c Config) validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("text_config: "+f, a...) }
	if err := c.validateSizes(); err != nil {
		return err
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !(c.RMSNormEps > 0) || !finite(c.RMSNormEps):
		return bad("rms_norm_eps must be positive, got %g", c.RMSNormEps)
	case !(c.FinalLogitSoftcap >= 0) || !finite(c.FinalLogitSoftcap):
		return bad("final_logit_softcapping must be 0 (off) or positive, got %g", c.FinalLogitSoftcap)
	case !(c.AltUpCoefClip >= 0) || !finite(c.AltUpCoefClip):
		return bad("altup_coef_clip must be 0 (off) or positive, got %g", c.AltUpCoefClip)
	case c.BOS < 0 || c.BOS >= c.VocabSize:
		return bad("bos_token_id %d is outside the vocabulary [0, %d)", c.BOS, c.VocabSize)
	case c.PAD < 0 || c.PAD >= c.VocabSize:
		return bad("pad_token_id %d is outside the vocabulary [0, %d)", c.PAD, c.VocabSize)
	}
	for _, id := range c.EOS {
		if id < 0 || id >= c.VocabSize {
			return bad("eos_token_id %d is outside the vocabulary [0, %d)", id, c.VocabSize)
		}
	}
	for i, p := range c.ActivationSparsity {
		if !(p >= 0 && p < 1) {
			return bad("activation_sparsity_pattern[%d] is %g, want a value in [0, 1)", i, p)
		}
	}
	for i, n := range c.IntermediateSize {
		if n <= 0 || n > maxWidth*8 {
			return bad("intermediate_size[%d] is %d, want 1 to %d", i, n, maxWidth*8)
		}
	}
	switch {
	case c.HeadDim%2 != 0:
		return bad("hidden_size %d / head_dim %d invalid", c.HiddenSize, c.HeadDim)
	case c.NumHeads <= 0 || c.NumKVHeads <= 0 || c.NumHeads%c.NumKVHeads != 0:
		return bad("num_attention_heads %d must be a positive multiple of num_key_value_heads %d", c.NumHeads, c.NumKVHeads)
	case len(c.LayerTypes) != c.NumLayers:
		return bad("layer_types has %d entries for %d layers", len(c.LayerTypes), c.NumLayers)
	case len(c.IntermediateSize) != c.NumLayers:
		return bad("intermediate_size has %d entries for %d layers", len(c.IntermediateSize), c.NumLayers)
	case len(c.ActivationSparsity) != 0 && len(c.ActivationSparsity) != c.NumLayers:
		return bad("activation_sparsity_pattern has %d entries for %d layers", len(c.ActivationSparsity), c.NumLayers)
	case c.NumKVSharedLayers < 0 || c.NumKVSharedLayers >= c.NumLayers:
		return bad("num_kv_shared_layers %d out of range", c.NumKVSharedLayers)
	case c.AltUpNumInputs != 4:
		return bad("altup_num_inputs %d is not supported (only 4)", c.AltUpNumInputs)
	case c.AltUpActiveIdx != 0:
		return bad("altup_active_idx %d is not supported (only 0)", c.AltUpActiveIdx)
	case c.HiddenActivation != "gelu_pytorch_tanh":
		return bad("hidden_activation %q is not supported", c.HiddenActivation)
	case c.VocabSize <= 0 || c.VocabSizePerLayer <= 0 || c.PerLayerSize <= 0 || c.LaurelRank <= 0:
		return bad("vocab sizes, hidden_size_per_layer_input and laurel_rank must be positive")
	}
	for i, t := range c.LayerTypes {
		if t != "full_attention" && t != "sliding_attention" {
			return bad("layer %d has unknown type %q", i, t)
		}
		if th := c.RopeTheta[t]; !(th > 0) || math.IsInf(th, 0) {
			return bad("no positive rope_theta for %s layers (got %g)", t, th)
		}
	}
	return nil
}

// KVSource returns the layer whose keys and values layer i attends with: i
// itself, or for the last NumKVSharedLayers layers the last earlier layer of
// the same type before the first shared one.
func (c Config) KVSource(i int) int {
	first := c.NumLayers - c.NumKVSharedLayers
	if i < first || c.NumKVSharedLayers == 0 {
		return i
	}
	for j := first - 1; j >= 0; j-- {
		if c.LayerTypes[j] == c.LayerTypes[i] {
			return j
		}
	}
	return i
}

// sparsityZ is Φ⁻¹(p) as transformers computes it (float32).
func sparsityZ(p float64) float32 {
	p32 := float32(p)
	return float32(math.Sqrt2 * math.Erfinv(float64(2*p32-1)))
}

// Params counts the decoder's parameters (for display).
func (c Config) Params() int64 {
	d, p, l := int64(c.HiddenSize), int64(c.PerLayerSize), int64(c.NumLayers)
	n := int64(c.VocabSize)*d + int64(c.VocabSizePerLayer)*l*p + l*p*d + p + 6*d*d + d
	qd, kd := int64(c.NumHeads*c.HeadDim), int64(c.NumKVHeads*c.HeadDim)
	for i := 0; i < c.NumLayers; i++ {
		im := int64(c.IntermediateSize[i])
		n += d*qd + 2*d*kd + qd*d + 2*int64(c.HeadDim) + 3*d*im + 5*d
		n += d + 16 + 64 + 4*d + d + 2*int64(c.LaurelRank)*d + d + 2*p*d
	}
	return n
}
