package gguf

import (
	"fmt"
	"strconv"
	"strings"

	"verdict/engine/gemma4"
)

// The names llama.cpp's converter (Gemma4VisionAudioModel, through gguf-py's
// MODEL_ARCH.MMPROJ tensor map) gives the Gemma 4 towers in an mmproj file,
// and what it does to the values (docs/gemma4.md, "GGUF"); this file maps
// them back to Hugging Face names.

// mmFix is what the converter changed in a tensor's values, undone on read.
type mmFix int

const (
	fixNone      mmFix = iota
	fixPatch           // [H, 3, p, p] (channel, row, column) back to [H, 3·p²] (row, column, channel)
	fixSoftplus        // softplus(per_dim_scale) back to per_dim_scale
	fixDepthwise       // [H, K] back to [H, 1, K] (a shape only)
)

// mmName is a converter name's Hugging Face name, tower and change.
type mmName struct {
	hf    string
	audio bool
	fix   mmFix
	block int // -1 outside the blocks
}

// The clipped linears' four bounds keep their suffix; the weight gains
// .linear (Gemma4ClippableLinear's inner nn.Linear).
var clipSuffixes = map[string]string{
	"weight":     "linear.weight",
	"input_max":  "input_max",
	"input_min":  "input_min",
	"output_max": "output_max",
	"output_min": "output_min",
}

var mmVisionGlobal = map[string]mmName{
	"v.patch_embd.weight":        {hf: gemma4.VisionPrefix + "patch_embedder.input_proj.weight", fix: fixPatch},
	"v.position_embd.weight":     {hf: gemma4.VisionPrefix + "patch_embedder.position_embedding_table"},
	"v.std_bias":                 {hf: gemma4.VisionPrefix + "std_bias"},
	"v.std_scale":                {hf: gemma4.VisionPrefix + "std_scale"},
	"mm.input_projection.weight": {hf: gemma4.EmbedVisionPrefix + "embedding_projection.weight"},
}

// mmVisionBlock maps "v.blk.N.<key>" to "encoder.layers.N.<value>".
var mmVisionBlock = map[string]string{
	"ln1.weight":            "input_layernorm.weight",
	"ln2.weight":            "pre_feedforward_layernorm.weight",
	"attn_post_norm.weight": "post_attention_layernorm.weight",
	"ffn_post_norm.weight":  "post_feedforward_layernorm.weight",
	"attn_q_norm.weight":    "self_attn.q_norm.weight",
	"attn_k_norm.weight":    "self_attn.k_norm.weight",
}

// mmVisionLinear maps "v.blk.N.<key>.<suffix>" to a clipped linear.
var mmVisionLinear = map[string]string{
	"attn_q":   "self_attn.q_proj",
	"attn_k":   "self_attn.k_proj",
	"attn_v":   "self_attn.v_proj",
	"attn_out": "self_attn.o_proj",
	"ffn_gate": "mlp.gate_proj",
	"ffn_up":   "mlp.up_proj",
	"ffn_down": "mlp.down_proj",
}

var mmAudioGlobal = map[string]mmName{
	"a.conv1d.0.weight":            {hf: gemma4.AudioPrefix + "subsample_conv_projection.layer0.conv.weight", audio: true},
	"a.conv1d.0.norm.weight":       {hf: gemma4.AudioPrefix + "subsample_conv_projection.layer0.norm.weight", audio: true},
	"a.conv1d.1.weight":            {hf: gemma4.AudioPrefix + "subsample_conv_projection.layer1.conv.weight", audio: true},
	"a.conv1d.1.norm.weight":       {hf: gemma4.AudioPrefix + "subsample_conv_projection.layer1.norm.weight", audio: true},
	"a.input_projection.weight":    {hf: gemma4.AudioPrefix + "subsample_conv_projection.input_proj_linear.weight", audio: true},
	"a.pre_encode.out.weight":      {hf: gemma4.AudioPrefix + "output_proj.weight", audio: true},
	"a.pre_encode.out.bias":        {hf: gemma4.AudioPrefix + "output_proj.bias", audio: true},
	"mm.a.input_projection.weight": {hf: gemma4.EmbedAudioPrefix + "embedding_projection.weight", audio: true},
}

// mmAudioBlock maps "a.blk.N.<key>" to "layers.N.<value>". gguf-py's map
// crosses the light convolution's two norms: its pre-norm is conv_norm, its
// inner norm norm_conv (clip.cpp loads them crossed back).
var mmAudioBlock = map[string]mmName{
	"ffn_norm.weight":        {hf: "feed_forward1.pre_layer_norm.weight"},
	"ffn_post_norm.weight":   {hf: "feed_forward1.post_layer_norm.weight"},
	"ffn_norm_1.weight":      {hf: "feed_forward2.pre_layer_norm.weight"},
	"ffn_post_norm_1.weight": {hf: "feed_forward2.post_layer_norm.weight"},
	"attn_pre_norm.weight":   {hf: "norm_pre_attn.weight"},
	"attn_post_norm.weight":  {hf: "norm_post_attn.weight"},
	"ln2.weight":             {hf: "norm_out.weight"},
	"attn_k_rel.weight":      {hf: "self_attn.relative_k_proj.weight"},
	"per_dim_scale.weight":   {hf: "self_attn.per_dim_scale", fix: fixSoftplus},
	"conv_norm.weight":       {hf: "lconv1d.pre_layer_norm.weight"},
	"norm_conv.weight":       {hf: "lconv1d.conv_norm.weight"},
	"conv_dw.weight":         {hf: "lconv1d.depthwise_conv1d.weight", fix: fixDepthwise},
}

var mmAudioLinear = map[string]string{
	"ffn_up":     "feed_forward1.ffw_layer_1",
	"ffn_down":   "feed_forward1.ffw_layer_2",
	"ffn_up_1":   "feed_forward2.ffw_layer_1",
	"ffn_down_1": "feed_forward2.ffw_layer_2",
	"attn_q":     "self_attn.q_proj",
	"attn_k":     "self_attn.k_proj",
	"attn_v":     "self_attn.v_proj",
	"attn_out":   "self_attn.post",
	"conv_pw1":   "lconv1d.linear_start",
	"conv_pw2":   "lconv1d.linear_end",
}

// mmUnsupported names converter tensors Verdict's towers have no weight
// for: served, they would be silently left out of the computation.
var mmUnsupported = map[string]string{
	"out_scale.weight":       "a vision layer_scalar, which Verdict's vision tower does not apply",
	"per_dim_k_scale.weight": "an audio per_dim_key_scale, which Verdict's audio tower does not apply",
}

// MMProjHFName maps an mmproj tensor name to the Hugging Face name the store
// serves it under; ok is false for a name with none.
func MMProjHFName(name string) (string, bool) {
	n, ok := mmLookup(name)
	return n.hf, ok
}

func mmLookup(name string) (mmName, bool) {
	if n, ok := mmVisionGlobal[name]; ok {
		n.block = -1
		return n, true
	}
	if n, ok := mmAudioGlobal[name]; ok {
		n.block = -1
		return n, true
	}
	for _, tw := range []struct {
		prefix, hf string
		audio      bool
	}{{"v.blk.", gemma4.VisionPrefix + "encoder.layers.", false}, {"a.blk.", gemma4.AudioPrefix + "layers.", true}} {
		rest, ok := strings.CutPrefix(name, tw.prefix)
		if !ok {
			continue
		}
		num, key, _ := strings.Cut(rest, ".")
		i, err := strconv.Atoi(num)
		if err != nil || i < 0 || strconv.Itoa(i) != num {
			return mmName{}, false
		}
		at := func(s string) string { return fmt.Sprintf("%s%d.%s", tw.hf, i, s) }
		if !tw.audio {
			if h, ok := mmVisionBlock[key]; ok {
				return mmName{hf: at(h), block: i}, true
			}
		} else if n, ok := mmAudioBlock[key]; ok {
			n.hf, n.audio, n.block = at(n.hf), true, i
			return n, true
		}
		lin, suffix, _ := strings.Cut(key, ".")
		s, ok := clipSuffixes[suffix]
		if !ok {
			return mmName{}, false
		}
		table := mmVisionLinear
		if tw.audio {
			table = mmAudioLinear
		}
		h, ok := table[lin]
		if !ok {
			return mmName{}, false
		}
		return mmName{hf: at(h + "." + s), audio: tw.audio, block: i}, true
	}
	return mmName{}, false
}
