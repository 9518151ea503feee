// Package gguf is Gemma 3n's side of GGUF writing: the mapping of a Hugging
// Face Gemma 3n text decoder (its config and tensor names) onto llama.cpp's
// gemma3n GGUF — metadata keys, tensor names, shapes and the types
// llama.cpp's tools give them. Layout lays a decoder out in memory for
// tests; LlamaCpp lays it out for ggufwrite.WriteStream with the exact
// metadata, names, shapes and types of llama.cpp's converter and quantiser
// (verdict verify-gguf -write-gguf, through engine/convert);
// LlamaCppDifferences names where a config departs from what llama.cpp's
// gemma3n code fixes. The container and the encoders are engine/weights/
// ggufwrite's, which knows no model.
package gguf

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"verdict/engine/gemma3n"
	"verdict/engine/weights"
	"verdict/engine/weights/ggufwrite"
)

// The converter's names, from the Hugging Face side: llama.cpp's
// gguf-py/gguf/constants.py names for gemma3n and tensor_mapping.py's
// sources.
var globalNames = map[string]string{
	"embed_tokens.weight":               "token_embd.weight",
	"norm.weight":                       "output_norm.weight",
	"embed_tokens_per_layer.weight":     "per_layer_token_embd.weight",
	"per_layer_model_projection.weight": "per_layer_model_proj.weight",
	"per_layer_projection_norm.weight":  "per_layer_proj_norm.weight",
}

var blockNames = [][2]string{
	{"self_attn.q_proj.weight", "attn_q.weight"},
	{"self_attn.k_proj.weight", "attn_k.weight"},
	{"self_attn.v_proj.weight", "attn_v.weight"},
	{"self_attn.o_proj.weight", "attn_output.weight"},
	{"self_attn.q_norm.weight", "attn_q_norm.weight"},
	{"self_attn.k_norm.weight", "attn_k_norm.weight"},
	{"input_layernorm.weight", "attn_norm.weight"},
	{"post_attention_layernorm.weight", "post_attention_norm.weight"},
	{"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
	{"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
	{"mlp.gate_proj.weight", "ffn_gate.weight"},
	{"mlp.up_proj.weight", "ffn_up.weight"},
	{"mlp.down_proj.weight", "ffn_down.weight"},
	{"altup.correction_coefs.weight", "altup_correct_coef.weight"},
	{"altup.correct_output_scale", "altup_correct_scale.weight"}, // the converter appends .weight to *_scale
	{"altup.prediction_coefs.weight", "altup_predict_coef.weight"},
	{"altup.modality_router.weight", "altup_router.weight"},
	{"altup.router_norm.weight", "altup_router_norm.weight"},
	{"laurel.linear_left.weight", "laurel_l.weight"},
	{"laurel.linear_right.weight", "laurel_r.weight"},
	{"laurel.post_laurel_norm.weight", "laurel_post_norm.weight"},
	{"per_layer_input_gate.weight", "inp_gate.weight"},
	{"per_layer_projection.weight", "proj.weight"},
	{"post_per_layer_input_norm.weight", "post_norm.weight"},
}

// LayoutOptions choose how Layout lays a model out.
type LayoutOptions struct {
	// Type is the type of 2-D tensors whose rows are whole blocks of it;
	// others fall back to Q8_0 (rows of 32) or F16, as llama-quantize
	// does. 1-D tensors stay F32.
	Type weights.GGMLType
	// PadPLE pads the per-layer embedding table with zero rows up to
	// vocab_size, as the current converter does.
	PadPLE bool
	// Ollama writes the metadata as Ollama's converter does: head_dim for
	// attention.key_length, rope.freq_base_local for rope.freq_base_swa,
	// one feed_forward_length.
	Ollama bool
	// Tokens, when set, is written as tokenizer.ggml.tokens.
	Tokens []string
}

// Layout lays out the text decoder of store (Hugging Face names under
// prefix, configuration cfg) as convert_hf_to_gguf.py writes a gemma3n
// GGUF, in memory (for tests; write it with ggufwrite.Write): its metadata
// and tensors.
func Layout(store weights.Store, prefix string, cfg gemma3n.Config, opt LayoutOptions) ([]ggufwrite.KV, []ggufwrite.Tensor, error) {
	L := cfg.NumLayers
	ff := make([]int32, L)
	for i, n := range cfg.IntermediateSize {
		ff[i] = int32(n)
	}
	pattern := make([]bool, L)
	for i, t := range cfg.LayerTypes {
		pattern[i] = t == "sliding_attention"
	}
	sparsity := make([]float32, L)
	for i := range sparsity {
		p := 0.0
		if len(cfg.ActivationSparsity) > 0 {
			p = cfg.ActivationSparsity[i]
		}
		// torch.distributions.Normal(0, 1).icdf(p) in float32; −∞ for 0
		sparsity[i] = float32(math.Sqrt2 * math.Erfinv(2*float64(float32(p))-1))
	}
	eos := int32(1)
	if len(cfg.EOS) > 0 {
		eos = int32(cfg.EOS[0])
	}
	kvs := []ggufwrite.KV{
		{Key: "general.architecture", Value: "gemma3n"},
		{Key: "general.name", Value: "synthetic gemma3n"},
		{Key: "gemma3n.context_length", Value: uint32(cfg.MaxPositionEmbeddings)},
		{Key: "gemma3n.embedding_length", Value: uint32(cfg.HiddenSize)},
		{Key: "gemma3n.block_count", Value: uint32(L)},
		{Key: "gemma3n.feed_forward_length", Value: ff},
		{Key: "gemma3n.attention.head_count", Value: uint32(cfg.NumHeads)},
		{Key: "gemma3n.attention.head_count_kv", Value: uint32(cfg.NumKVHeads)},
		{Key: "gemma3n.attention.layer_norm_rms_epsilon", Value: float32(cfg.RMSNormEps)},
		{Key: "gemma3n.attention.key_length", Value: uint32(cfg.HeadDim)},
		{Key: "gemma3n.attention.value_length", Value: uint32(cfg.HeadDim)},
		{Key: "gemma3n.rope.freq_base", Value: float32(cfg.RopeTheta["full_attention"])},
		{Key: "gemma3n.final_logit_softcapping", Value: float32(cfg.FinalLogitSoftcap)},
		{Key: "gemma3n.attention.sliding_window", Value: uint32(cfg.SlidingWindow)},
		{Key: "gemma3n.altup.active_idx", Value: uint32(cfg.AltUpActiveIdx)},
		{Key: "gemma3n.altup.num_inputs", Value: uint32(cfg.AltUpNumInputs)},
		{Key: "gemma3n.embedding_length_per_layer_input", Value: uint32(cfg.PerLayerSize)},
		{Key: "gemma3n.attention.shared_kv_layers", Value: uint32(cfg.NumKVSharedLayers)},
		{Key: "gemma3n.activation_sparsity_scale", Value: sparsity},
		{Key: "gemma3n.attention.sliding_window_pattern", Value: pattern},
		{Key: "tokenizer.ggml.model", Value: "llama"},
		{Key: "tokenizer.ggml.bos_token_id", Value: uint32(cfg.BOS)},
		{Key: "tokenizer.ggml.eos_token_id", Value: uint32(eos)},
		{Key: "tokenizer.ggml.padding_token_id", Value: uint32(cfg.PAD)},
	}
	if opt.Tokens != nil {
		kvs = append(kvs, ggufwrite.KV{Key: "tokenizer.ggml.tokens", Value: opt.Tokens})
	}
	if th := cfg.RopeTheta["sliding_attention"]; opt.Ollama {
		for i, kv := range kvs {
			switch kv.Key {
			case "gemma3n.attention.key_length":
				kvs[i].Key = "gemma3n.head_dim"
			case "gemma3n.feed_forward_length":
				kvs[i].Value = uint32(ff[0])
			}
		}
		kvs = append(kvs, ggufwrite.KV{Key: "gemma3n.rope.freq_base_local", Value: float32(th)}, ggufwrite.KV{Key: "gemma3n.altup.correct_scale", Value: cfg.AltUpCorrectScale})
	} else if th != 10000 {
		kvs = append(kvs, ggufwrite.KV{Key: "gemma3n.rope.freq_base_swa", Value: float32(th)})
	}

	var tensors []ggufwrite.Tensor
	add := func(gname string, shape []int, x []float32) error {
		dims := slices.Clone(shape)
		slices.Reverse(dims)
		t := weights.GGMLF32
		if len(dims) > 1 {
			t = pick(opt.Type, dims[0])
		}
		data, err := ggufwrite.Encode(t, x)
		if err != nil {
			return fmt.Errorf("%s: %w", gname, err)
		}
		tensors = append(tensors, ggufwrite.Tensor{Name: gname, Dims: dims, Type: t, Data: data})
		return nil
	}
	read := func(name string) ([]int, []float32, error) {
		shape, _, ok := store.Info(prefix + name)
		if !ok {
			return nil, nil, fmt.Errorf("ggufwrite: missing %s%s", prefix, name)
		}
		x, err := store.Float32(prefix + name)
		if err != nil {
			return nil, nil, err
		}
		return shape, slices.Clone(x), nil
	}
	for _, hf := range []string{"embed_tokens.weight", "embed_tokens_per_layer.weight", "per_layer_model_projection.weight", "per_layer_projection_norm.weight", "norm.weight"} {
		shape, x, err := read(hf)
		if err != nil {
			return nil, nil, err
		}
		if hf == "embed_tokens_per_layer.weight" && opt.PadPLE && shape[0] < cfg.VocabSize {
			x = append(x, make([]float32, (cfg.VocabSize-shape[0])*shape[1])...)
			shape = []int{cfg.VocabSize, shape[1]}
		}
		if err := add(globalNames[hf], shape, x); err != nil {
			return nil, nil, err
		}
	}
	for hf, g := range map[string]string{"altup_projections": "altup_proj.weight", "altup_unembed_projections": "altup_unembd_proj.weight"} {
		var stacked []float32
		var shape []int
		for i := 0; i < 3; i++ {
			s, x, err := read(fmt.Sprintf("%s.%d.weight", hf, i))
			if err != nil {
				return nil, nil, err
			}
			shape, stacked = s, append(stacked, x...)
		}
		if err := add(g, append([]int{3}, shape...), stacked); err != nil {
			return nil, nil, err
		}
	}
	for i := 0; i < L; i++ {
		for _, p := range blockNames {
			name := fmt.Sprintf("layers.%d.%s", i, p[0])
			kv := strings.HasPrefix(p[0], "self_attn.k_") || strings.HasPrefix(p[0], "self_attn.v_")
			if _, _, ok := store.Info(prefix + name); !ok && kv && cfg.KVSource(i) != i {
				continue // a shared layer's unused k and v may be left out
			}
			shape, x, err := read(name)
			if err != nil {
				return nil, nil, err
			}
			if err := add(fmt.Sprintf("blk.%d.%s", i, p[1]), shape, x); err != nil {
				return nil, nil, err
			}
		}
	}
	return kvs, tensors, nil
}

// pick is the type of a 2-D tensor with rows of ne0 values.
func pick(want weights.GGMLType, ne0 int) weights.GGMLType {
	block := map[weights.GGMLType]int{weights.GGMLQ8_0: 32, weights.GGMLQ4_0: 32, weights.GGMLQ4_K: 256, weights.GGMLQ6_K: 256}[want]
	switch {
	case block == 0:
		return want
	case ne0%block == 0:
		return want
	case ne0%32 == 0:
		return weights.GGMLQ8_0
	}
	return weights.GGMLF16
}
