package audio

import (
	"encoding/json"
	"fmt"
	"math"

	"verdict/engine/weights"
)

// Config is the audio tower's configuration: transformers' Gemma3nAudioConfig
// (the "audio_config" of a Gemma 3n config.json) plus the two settings of the
// enclosing model that the audio path uses.
type Config struct {
	HiddenSize     int     `json:"hidden_size"`     // D, 1536
	InputFeatSize  int     `json:"input_feat_size"` // mel bins, 128
	RMSNormEps     float64 `json:"rms_norm_eps"`
	VocabSize      int     `json:"vocab_size"`   // embed_audio rows, 128
	VocabOffset    int     `json:"vocab_offset"` // first audio token id, 262272
	GradClip       float64 `json:"gradient_clipping"`
	ChunkSize      int     `json:"conf_attention_chunk_size"`
	ContextLeft    int     `json:"conf_attention_context_left"`
	ContextRight   int     `json:"conf_attention_context_right"`
	LogitCap       float64 `json:"conf_attention_logit_cap"`
	NumHeads       int     `json:"conf_num_attention_heads"`
	NumLayers      int     `json:"conf_num_hidden_layers"`
	ConvKernel     int     `json:"conf_conv_kernel_size"`
	Reduction      int     `json:"conf_reduction_factor"`
	ResidualWeight float64 `json:"conf_residual_weight"`
	SSCPChannels   []int   `json:"sscp_conv_channel_size"`
	SSCPNormEps    float64 `json:"sscp_conv_group_norm_eps"`
	SSCPKernels    [][]int `json:"sscp_conv_kernel_size"`
	SSCPStrides    [][]int `json:"sscp_conv_stride_size"`

	// SoftTokens is the number of audio placeholders per clip in a prompt
	// (audio_soft_tokens_per_image, 188).
	SoftTokens int `json:"-"`
	// TextVocabSize is the text vocabulary size; id TextVocabSize-1 (262399)
	// is the audio padding token.
	TextVocabSize int `json:"-"`
}

// DefaultConfig is transformers' Gemma3nAudioConfig with its defaults (the
// E2B and E4B audio tower).
func DefaultConfig() Config {
	return Config{
		HiddenSize: 1536, InputFeatSize: 128, RMSNormEps: 1e-6, VocabSize: 128, VocabOffset: 262272,
		GradClip: 1e10, ChunkSize: 12, ContextLeft: 13, ContextRight: 0, LogitCap: 50,
		NumHeads: 8, NumLayers: 12, ConvKernel: 5, Reduction: 4, ResidualWeight: 0.5,
		SSCPChannels: []int{128, 32}, SSCPNormEps: 1e-3,
		SSCPKernels: [][]int{{3, 3}, {3, 3}}, SSCPStrides: [][]int{{2, 2}, {2, 2}},
		SoftTokens: 188, TextVocabSize: 262400,
	}
}

// ParseConfig reads a Hugging Face config.json: a Gemma 3n conditional-
// generation config (audio settings under "audio_config") or a bare audio
// config. Fields it lacks keep DefaultConfig's values.
func ParseConfig(data []byte) (Config, error) {
	var top struct {
		ModelType   string          `json:"model_type"`
		AudioConfig json.RawMessage `json:"audio_config"`
		SoftTokens  *int            `json:"audio_soft_tokens_per_image"`
		TextConfig  *struct {
			VocabSize *int `json:"vocab_size"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return Config{}, fmt.Errorf("audio: config.json: %w", err)
	}
	c := DefaultConfig()
	body := data
	if len(top.AudioConfig) > 0 && string(top.AudioConfig) != "null" {
		body = top.AudioConfig
	} else if top.ModelType != "gemma3n_audio" {
		return Config{}, fmt.Errorf("audio: config.json has no audio_config (model_type %q)", top.ModelType)
	}
	if err := weights.CheckJSONFields(body, listFields); err != nil {
		return Config{}, fmt.Errorf("audio: audio_config: %w", err)
	}
	if err := json.Unmarshal(body, &c); err != nil {
		return Config{}, fmt.Errorf("audio: audio_config: %w", err)
	}
	if top.SoftTokens != nil {
		c.SoftTokens = *top.SoftTokens
	}
	if top.TextConfig != nil && top.TextConfig.VocabSize != nil {
		c.TextVocabSize = *top.TextConfig.VocabSize
	}
	return c, c.validate()
}

// listFields are the subsampling's lists (two convolutions' channels,
// kernels and strides), bounded in bytes of JSON before they are decoded: 4
// MB of empty lists would make encoding/json allocate about 300 MB.
var listFields = map[string]int{"sscp_conv_channel_size": 1 << 10, "sscp_conv_kernel_size": 1 << 10, "sscp_conv_stride_size": 1 << 10}

// Bounds on the sizes a config may ask for, checked before any sizes an
// allocation; the loader then holds them to the checkpoint's tensors.
const (
	maxLayers  = 1024
	maxWidth   = 1 << 16 // hidden size, channels, heads, attention context
	maxKernel  = 1024    // convolution kernels and strides, reduction
	maxVocab   = 1 << 22
	maxSoftTok = 1 << 16
)

func (c Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("audio: config: "+format, args...)
	}
	for _, f := range []struct {
		name      string
		v, lo, hi int
	}{
		{"hidden_size", c.HiddenSize, 1, maxWidth},
		{"conf_num_attention_heads", c.NumHeads, 1, maxWidth},
		{"conf_num_hidden_layers", c.NumLayers, 0, maxLayers},
		{"conf_attention_chunk_size", c.ChunkSize, 1, maxWidth},
		{"conf_attention_context_left", c.ContextLeft, 0, maxWidth},
		{"conf_attention_context_right", c.ContextRight, 0, maxWidth},
		{"conf_conv_kernel_size", c.ConvKernel, 1, maxKernel},
		{"conf_reduction_factor", c.Reduction, 1, maxKernel},
		{"vocab_size", c.VocabSize, 1, maxVocab},
		{"vocab_offset", c.VocabOffset, 0, maxVocab},
		{"text_config.vocab_size", c.TextVocabSize, 1, 2 * maxVocab},
		{"audio_soft_tokens_per_image", c.SoftTokens, 1, maxSoftTok},
	} {
		if f.v < f.lo || f.v > f.hi {
			return bad("%s %d is outside [%d, %d]", f.name, f.v, f.lo, f.hi)
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"rms_norm_eps", c.RMSNormEps}, {"sscp_conv_group_norm_eps", c.SSCPNormEps}, {"gradient_clipping", c.GradClip}} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			return bad("%s must be positive, got %g", f.name, f.v)
		}
	}
	if math.IsNaN(c.ResidualWeight) || math.IsInf(c.ResidualWeight, 0) || math.IsInf(c.LogitCap, 0) {
		return bad("conf_residual_weight %g and conf_attention_logit_cap %g must be finite", c.ResidualWeight, c.LogitCap)
	}
	switch {
	case c.HiddenSize <= 0 || c.NumHeads <= 0 || c.HiddenSize%c.NumHeads != 0:
		return bad("hidden_size %d is not a positive multiple of conf_num_attention_heads %d", c.HiddenSize, c.NumHeads)
	case c.HiddenSize%2 != 0:
		return bad("hidden_size %d is odd", c.HiddenSize)
	case c.InputFeatSize != NumMelBins:
		return bad("input_feat_size %d, the feature extractor gives %d", c.InputFeatSize, NumMelBins)
	case c.NumLayers < 0:
		return bad("conf_num_hidden_layers %d", c.NumLayers)
	case c.ContextLeft < 0 || c.ContextRight < 0:
		return bad("attention context %d/%d", c.ContextLeft, c.ContextRight)
	case c.LogitCap <= 0:
		return bad("conf_attention_logit_cap %g", c.LogitCap)
	case c.ConvKernel <= 0:
		return bad("conf_conv_kernel_size %d", c.ConvKernel)
	case c.Reduction <= 0:
		return bad("conf_reduction_factor %d", c.Reduction)
	case len(c.SSCPChannels) != 2 || len(c.SSCPKernels) != 2 || len(c.SSCPStrides) != 2:
		return bad("the subsampling needs 2 convolutions (channels %v, kernels %v, strides %v)", c.SSCPChannels, c.SSCPKernels, c.SSCPStrides)
	case c.VocabSize <= 0 || c.TextVocabSize <= c.VocabOffset || c.TextVocabSize-1 >= c.VocabOffset+c.VocabSize:
		return bad("audio vocabulary [%d, %d) does not hold the padding id %d", c.VocabOffset, c.VocabOffset+c.VocabSize, c.TextVocabSize-1)
	case c.SoftTokens <= 0:
		return bad("audio_soft_tokens_per_image %d", c.SoftTokens)
	}
	for i := 0; i < 2; i++ {
		if c.SSCPChannels[i] <= 0 || c.SSCPChannels[i] > maxWidth || len(c.SSCPKernels[i]) != 2 || len(c.SSCPStrides[i]) != 2 ||
			!inRange(c.SSCPKernels[i], 1, maxKernel) || !inRange(c.SSCPStrides[i], 1, maxKernel) {
			return bad("subsampling convolution %d: channels %d, kernel %v, stride %v", i, c.SSCPChannels[i], c.SSCPKernels[i], c.SSCPStrides[i])
		}
	}
	return nil
}

func inRange(v []int, lo, hi int) bool {
	for _, x := range v {
		if x < lo || x > hi {
			return false
		}
	}
	return true
}

// HeadDim is the attention head size (192).
func (c Config) HeadDim() int { return c.HiddenSize / c.NumHeads }

// sscpOut returns the time and frequency size after subsampling convolution
// i for an input of t frames and f bins: time is padded (0, kernel−1),
// frequency (1, 1).
func (c Config) sscpOut(i, t, f int) (int, int) {
	kt, kf := c.SSCPKernels[i][0], c.SSCPKernels[i][1]
	st, sf := c.SSCPStrides[i][0], c.SSCPStrides[i][1]
	return (t+kt-1-kt)/st + 1, (f+2-kf)/sf + 1
}

// NumTokens is the number of encoder outputs (soft tokens before padding)
// for t feature frames.
func (c Config) NumTokens(t int) int {
	if t <= 0 {
		return 0
	}
	t1, f1 := c.sscpOut(0, t, c.InputFeatSize)
	t2, _ := c.sscpOut(1, t1, f1)
	return (t2 + c.Reduction - 1) / c.Reduction
}
