// Package vision is Gemma 3n's image path as Hugging Face transformers
// computes it: the image processor (Preprocess: stretch to 768×768 with
// antialiased bilinear resampling, rescale to [0, 1]), the MobileNetV5-300M
// encoder (timm's mobilenetv5_300m_enc with its multi-scale fusion adapter)
// and the vision embedder (embed_vision) that maps the 256 soft tokens of an
// image into the text decoder's embedding space.
//
// Activations are kept channels-last ([pixels, channels]) so that every 1×1
// convolution is a matrix product over pixels; the heavy kernels are the C
// ones of package native.
package vision

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Architecture is the one encoder this package implements.
const Architecture = "mobilenetv5_300m_enc"

// Bounds on the sizes a config may ask for.
const (
	maxVocab      = 1 << 22
	maxTextHidden = 1 << 16
)

// ImageSize is the side of the square input the processor produces.
const ImageSize = 768

// Config is what the vision path needs from a Gemma 3n config.json.
type Config struct {
	Architecture string  // vision_config.architecture
	HiddenSize   int     // vision_config.hidden_size: channels of the encoder output (2048)
	RMSNormEps   float64 // vision_config.rms_norm_eps (embedder norms)
	VocabOffset  int     // vision_config.vocab_offset: first hard-token id (262144)
	VocabSize    int     // vision_config.vocab_size: hard-token rows (128)
	TextHidden   int     // text_config.hidden_size (0: taken from the projection's shape)
	SoftTokens   int     // vision_soft_tokens_per_image (256)
}

// ParseConfig reads a conditional-generation config.json (vision settings
// under "vision_config", the text width under "text_config") or a bare
// vision config (model_type "gemma3n_vision").
func ParseConfig(data []byte) (Config, error) {
	type vcfg struct {
		ModelType    string   `json:"model_type"`
		Architecture string   `json:"architecture"`
		HiddenSize   int      `json:"hidden_size"`
		RMSNormEps   *float64 `json:"rms_norm_eps"`
		VocabOffset  *int     `json:"vocab_offset"`
		VocabSize    *int     `json:"vocab_size"`
	}
	var top struct {
		ModelType    string          `json:"model_type"`
		VisionConfig json.RawMessage `json:"vision_config"`
		TextConfig   struct {
			HiddenSize int `json:"hidden_size"`
		} `json:"text_config"`
		SoftTokens int `json:"vision_soft_tokens_per_image"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return Config{}, fmt.Errorf("vision: config.json: %w", err)
	}
	raw := top.VisionConfig
	if len(raw) == 0 || string(raw) == "null" {
		if top.ModelType != "gemma3n_vision" {
			return Config{}, fmt.Errorf("vision: config.json has no vision_config (model_type %q)", top.ModelType)
		}
		raw = data
	}
	var v vcfg
	if err := json.Unmarshal(raw, &v); err != nil {
		return Config{}, fmt.Errorf("vision: vision_config: %w", err)
	}
	c := Config{
		Architecture: v.Architecture, HiddenSize: v.HiddenSize, RMSNormEps: 1e-6,
		VocabOffset: 262144, VocabSize: 128, TextHidden: top.TextConfig.HiddenSize, SoftTokens: top.SoftTokens,
	}
	if v.RMSNormEps != nil {
		c.RMSNormEps = *v.RMSNormEps
	}
	if v.VocabOffset != nil {
		c.VocabOffset = *v.VocabOffset
	}
	if v.VocabSize != nil {
		c.VocabSize = *v.VocabSize
	}
	if c.Architecture == "" {
		c.Architecture = Architecture
	}
	if c.HiddenSize == 0 {
		c.HiddenSize = 2048
	}
	if c.SoftTokens == 0 {
		c.SoftTokens = 256
	}
	switch {
	case c.Architecture != Architecture:
		return c, fmt.Errorf("vision: architecture %q is not supported (only %s)", c.Architecture, Architecture)
	case c.HiddenSize != 2048:
		return c, fmt.Errorf("vision: hidden_size %d, %s has 2048", c.HiddenSize, Architecture)
	case c.SoftTokens != 256:
		return c, fmt.Errorf("vision: vision_soft_tokens_per_image %d, %s gives 256", c.SoftTokens, Architecture)
	case c.VocabSize <= 0 || c.VocabOffset < 0 || c.VocabSize > maxVocab || c.VocabOffset > maxVocab:
		return c, fmt.Errorf("vision: bad hard-token range: vocab_offset %d, vocab_size %d (each from 0 to %d, size positive)", c.VocabOffset, c.VocabSize, maxVocab)
	case !(c.RMSNormEps > 0) || math.IsInf(c.RMSNormEps, 0):
		return c, fmt.Errorf("vision: rms_norm_eps must be positive, got %g", c.RMSNormEps)
	case c.TextHidden < 0 || c.TextHidden > maxTextHidden:
		return c, fmt.Errorf("vision: text_config.hidden_size %d is outside [0, %d]", c.TextHidden, maxTextHidden)
	}
	return c, nil
}

// The encoder's blocks, stage by stage, in timm's block-string notation
// (timm/models/mobilenetv5.py, mobilenetv5_300m_enc): er = EdgeResidual,
// uir = UniversalInvertedResidual, mqa = MobileAttention with
// MultiQueryAttention2d; r repeats, k kernel (uir: middle depthwise kernel,
// mqa: k/v down-conv kernel), a start depthwise kernel, s stride, e
// expansion, c output channels, h heads, v k/v stride, d key = value dim.
var arch300m = [][]string{
	{"er_r1_k3_s2_e4_c128", "er_r2_k3_s1_e4_c128"},
	{"uir_r1_a3_k5_s2_e6_c256", "uir_r1_a5_k0_s1_e4_c256", "uir_r1_a3_k0_s1_e4_c256",
		"uir_r1_a5_k0_s1_e4_c256", "uir_r1_a3_k0_s1_e4_c256"},
	{"uir_r1_a5_k5_s2_e6_c640", "uir_r7_a5_k0_s1_e4_c640", "uir_r1_a0_k0_s1_e1_c640",
		"mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640", "mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640",
		"mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640", "mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640",
		"mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640", "mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640",
		"mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640", "mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640",
		"mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640", "mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640",
		"mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640", "mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640",
		"mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640", "mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640"},
	{"uir_r1_a5_k5_s2_e6_c1280", "mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280",
		"mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280", "mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280",
		"mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280", "mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280",
		"mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280", "mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280",
		"mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280", "mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280",
		"mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280", "mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280",
		"mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280", "mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280",
		"mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280", "mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280",
		"mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280", "mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280",
		"mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280", "mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280"},
}

const stemChannels = 64

type blockKind int

const (
	kindER blockKind = iota
	kindUIR
	kindMQA
)

func (k blockKind) String() string {
	return [...]string{"er", "uir", "mqa"}[k]
}

// blockSpec is one decoded block string.
type blockSpec struct {
	kind     blockKind
	k        int // er: expansion kernel; uir: middle dw kernel (0: none); mqa: k/v down-conv kernel
	start    int // uir: start dw kernel (0: none)
	stride   int
	exp      int // er/uir expansion ratio
	out      int
	heads    int // mqa
	kvStride int // mqa
	dim      int // mqa key = value dim
}

func parseBlock(s string) (spec blockSpec, repeat int, err error) {
	parts := strings.Split(s, "_")
	switch parts[0] {
	case "er":
		spec.kind = kindER
	case "uir":
		spec.kind = kindUIR
	case "mqa":
		spec.kind = kindMQA
	default:
		return spec, 0, fmt.Errorf("block %q: unknown type", s)
	}
	spec.stride, spec.kvStride, repeat = 1, 1, 1
	for _, p := range parts[1:] {
		if len(p) < 2 {
			return spec, 0, fmt.Errorf("block %q: bad option %q", s, p)
		}
		v, err := strconv.Atoi(p[1:])
		if err != nil {
			return spec, 0, fmt.Errorf("block %q: bad option %q", s, p)
		}
		switch p[0] {
		case 'r':
			repeat = v
		case 'k':
			spec.k = v
		case 'a':
			spec.start = v
		case 's':
			spec.stride = v
		case 'e':
			spec.exp = v
		case 'c':
			spec.out = v
		case 'h':
			spec.heads = v
		case 'v':
			spec.kvStride = v
		case 'd':
			spec.dim = v
		default:
			return spec, 0, fmt.Errorf("block %q: unknown option %q", s, p)
		}
	}
	return spec, repeat, nil
}

// stages expands the architecture into per-stage block lists.
func stages() [][]blockSpec {
	out := make([][]blockSpec, len(arch300m))
	for i, st := range arch300m {
		for _, s := range st {
			spec, n, err := parseBlock(s)
			if err != nil {
				panic("vision: " + err.Error())
			}
			for range n {
				out[i] = append(out[i], spec)
			}
		}
	}
	return out
}
