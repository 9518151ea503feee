// Package gguf reads a Gemma 4 text decoder from a GGUF file of llama.cpp's
// gemma4 architecture (convert_hf_to_gguf.py's Gemma4Model): a
// weights.Store that serves the file's tensors under their Hugging Face
// names (model.*), dequantised to float32, and the Hugging Face config.json
// rebuilt from the file's gemma4.* metadata, so that gemma4.ParseConfig and
// gemma4.Load read a GGUF as they read a checkpoint folder.
//
// What the converter does, and so what this package undoes, is written
// down in docs/gemma4.md, section "GGUF": tensor names only (no norm
// weight is shifted, no tensor is permuted), the router's two scales
// renamed to .scale suffixes and layer_scalar given .weight,
// rope_freqs.weight generated (the full layers' partial rotation, read
// back into the config), the vision and audio towers left to a separate
// mmproj file, which OpenMMProj reads (mmproj.go).
package gguf

import (
	"fmt"
	"strconv"
	"strings"
)

// Prefix is the name prefix the store serves Hugging Face names under
// (Gemma4ForCausalLM's).
const Prefix = "model."

// globalNames maps the converter's names of the tensors outside the blocks
// to Hugging Face names (without Prefix).
var globalNames = map[string]string{
	"token_embd.weight":           "embed_tokens.weight",
	"output_norm.weight":          "norm.weight",
	"per_layer_token_embd.weight": "embed_tokens_per_layer.weight",
	"per_layer_model_proj.weight": "per_layer_model_projection.weight",
	"per_layer_proj_norm.weight":  "per_layer_projection_norm.weight",
}

// blockNames maps a block tensor's converter name (after "blk.N.") to its
// Hugging Face name (after "layers.N."). The .scale names are the
// converter's renames of router.scale and router.per_expert_scale;
// layer_output_scale.weight is layer_scalar with ".weight" added.
var blockNames = map[string]string{
	"attn_norm.weight":           "input_layernorm.weight",
	"attn_q.weight":              "self_attn.q_proj.weight",
	"attn_q_norm.weight":         "self_attn.q_norm.weight",
	"attn_k.weight":              "self_attn.k_proj.weight",
	"attn_k_norm.weight":         "self_attn.k_norm.weight",
	"attn_v.weight":              "self_attn.v_proj.weight",
	"attn_output.weight":         "self_attn.o_proj.weight",
	"post_attention_norm.weight": "post_attention_layernorm.weight",
	"ffn_norm.weight":            "pre_feedforward_layernorm.weight",
	"ffn_gate.weight":            "mlp.gate_proj.weight",
	"ffn_up.weight":              "mlp.up_proj.weight",
	"ffn_down.weight":            "mlp.down_proj.weight",
	"post_ffw_norm.weight":       "post_feedforward_layernorm.weight",
	"ffn_gate_inp.weight":        "router.proj.weight",
	"ffn_gate_inp.scale":         "router.scale",
	"ffn_down_exps.scale":        "router.per_expert_scale",
	"ffn_gate_up_exps.weight":    "experts.gate_up_proj",
	"ffn_down_exps.weight":       "experts.down_proj",
	"pre_ffw_norm_2.weight":      "pre_feedforward_layernorm_2.weight",
	"post_ffw_norm_1.weight":     "post_feedforward_layernorm_1.weight",
	"post_ffw_norm_2.weight":     "post_feedforward_layernorm_2.weight",
	"layer_output_scale.weight":  "layer_scalar",
	"inp_gate.weight":            "per_layer_input_gate.weight",
	"proj.weight":                "per_layer_projection.weight",
	"post_norm.weight":           "post_per_layer_input_norm.weight",
}

// RopeFreqs is the tensor the converter generates for the full layers'
// proportional RoPE: per frequency pair 1 (rotated) or 1e30 (not rotated).
const RopeFreqs = "rope_freqs.weight"

// hfBlock is the inverse of blockNames.
var hfBlock = func() map[string]string {
	m := make(map[string]string, len(blockNames))
	for g, h := range blockNames {
		m[h] = g
	}
	return m
}()

// hfGlobal is the inverse of globalNames.
var hfGlobal = func() map[string]string {
	m := make(map[string]string, len(globalNames))
	for g, h := range globalNames {
		m[h] = g
	}
	return m
}()

// HFName maps a converter tensor name to the Hugging Face name it is served
// under (with Prefix); ok is false for a name that has none (rope_freqs,
// an unknown or malformed name).
func HFName(gguf string) (string, bool) {
	if h, ok := globalNames[gguf]; ok {
		return Prefix + h, true
	}
	i, key, ok := blockOf(gguf)
	if !ok {
		return "", false
	}
	h, ok := blockNames[key]
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%slayers.%d.%s", Prefix, i, h), true
}

// GGUFName maps a Hugging Face name (with or without Prefix, or under
// model.language_model.) to the converter's; ok is false for a tensor the
// converter does not write for the text decoder.
func GGUFName(hf string) (string, bool) {
	hf = strings.TrimPrefix(hf, "model.language_model.")
	hf = strings.TrimPrefix(hf, Prefix)
	if g, ok := hfGlobal[hf]; ok {
		return g, true
	}
	rest, ok := strings.CutPrefix(hf, "layers.")
	if !ok {
		return "", false
	}
	i, key, ok := blockOf("blk." + rest)
	if !ok {
		return "", false
	}
	g, ok := hfBlock[key]
	if !ok {
		return "", false
	}
	return fmt.Sprintf("blk.%d.%s", i, g), true
}

// blockOf splits "blk.N.key" into N and key; ok is false for other names.
func blockOf(name string) (int, string, bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return 0, "", false
	}
	num, key, _ := strings.Cut(rest, ".")
	i, err := strconv.Atoi(num)
	if err != nil || i < 0 || strconv.Itoa(i) != num {
		return 0, "", false
	}
	return i, key, true
}
