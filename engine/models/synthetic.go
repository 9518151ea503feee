package models

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
)

// Synthetic full-size shapes: "synthetic-e2b" and "synthetic-e4b" open a
// text decoder of Gemma 3n E2B's or E4B's shape with random weights, for
// benchmarks on machines without the real checkpoints.
var syntheticShapes = map[string]struct {
	layers, inter, shared int
}{
	"synthetic-e2b": {30, 8192, 10},
	"synthetic-e4b": {35, 16384, 15},
}

// syntheticBaseSeed seeds the synthetic shapes' weights.
const syntheticBaseSeed = 0x5eed00e0

// synthetic returns the config and recipe of a synthetic shape.
func synthetic(spec string) (cfgJSON, recipe []byte, ok bool) {
	s, ok := syntheticShapes[spec]
	if !ok {
		return nil, nil, false
	}
	const D, P, V, VP, heads, kv, hd, rank = 2048, 256, 262400, 262144, 8, 2, 256, 64
	var types []string
	var sparsity []float64
	for i := 0; i < s.layers; i++ {
		types = append(types, map[bool]string{true: "full_attention", false: "sliding_attention"}[(i+1)%5 == 0])
		sparsity = append(sparsity, map[bool]float64{true: 0.95, false: 0}[i < 10])
	}
	inter := make([]int, s.layers)
	for i := range inter {
		inter[i] = s.inter
	}
	text := map[string]any{
		"model_type": "gemma3n_text", "vocab_size": V, "vocab_size_per_layer_input": VP, "hidden_size": D,
		"hidden_size_per_layer_input": P, "intermediate_size": inter, "num_hidden_layers": s.layers,
		"num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd, "num_kv_shared_layers": s.shared,
		"layer_types": types, "activation_sparsity_pattern": sparsity, "sliding_window": 512, "rms_norm_eps": 1e-6,
		"final_logit_softcapping": 30.0, "laurel_rank": rank, "altup_num_inputs": 4, "altup_active_idx": 0,
		"altup_coef_clip": 120.0, "altup_correct_scale": true, "hidden_activation": "gelu_pytorch_tanh",
		"max_position_embeddings": 32768, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
		"rope_parameters": map[string]any{
			"full_attention":    map[string]any{"rope_theta": 1e6, "rope_type": "default"},
			"sliding_attention": map[string]any{"rope_theta": 1e4, "rope_type": "default"},
		},
	}
	cfgJSON, _ = json.Marshal(map[string]any{"model_type": "gemma3n", "text_config": text})

	type entry struct {
		Name   string  `json:"name"`
		Shape  []int   `json:"shape"`
		Seed   string  `json:"seed"`
		Offset float64 `json:"offset"`
		Scale  float64 `json:"scale"`
	}
	var ts []entry
	add := func(name string, offset, scale float64, shape ...int) {
		name = "model.language_model." + name
		h := fnv.New64a()
		h.Write([]byte(name))
		ts = append(ts, entry{name, shape, fmt.Sprintf("%016x", h.Sum64()^syntheticBaseSeed), offset, scale})
	}
	const w = 0.0346 // uniform with standard deviation 0.02
	matrix := func(name string, rows, cols int) { add(name, 0, w, rows, cols) }
	norm := func(name string, n int) { add(name, 1, 0.1, n) }
	matrix("embed_tokens.weight", V, D)
	matrix("embed_tokens_per_layer.weight", VP, s.layers*P)
	matrix("per_layer_model_projection.weight", s.layers*P, D)
	norm("per_layer_projection_norm.weight", P)
	for i := 0; i < 3; i++ {
		matrix(fmt.Sprintf("altup_projections.%d.weight", i), D, D)
		matrix(fmt.Sprintf("altup_unembed_projections.%d.weight", i), D, D)
	}
	norm("norm.weight", D)
	for i := 0; i < s.layers; i++ {
		l := func(n string) string { return fmt.Sprintf("layers.%d.%s", i, n) }
		matrix(l("self_attn.q_proj.weight"), heads*hd, D)
		matrix(l("self_attn.k_proj.weight"), kv*hd, D)
		matrix(l("self_attn.v_proj.weight"), kv*hd, D)
		matrix(l("self_attn.o_proj.weight"), D, heads*hd)
		norm(l("self_attn.q_norm.weight"), hd)
		norm(l("self_attn.k_norm.weight"), hd)
		for _, n := range []string{"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
			"post_feedforward_layernorm", "post_per_layer_input_norm", "altup.router_norm", "laurel.post_laurel_norm"} {
			norm(l(n+".weight"), D)
		}
		matrix(l("mlp.gate_proj.weight"), s.inter, D)
		matrix(l("mlp.up_proj.weight"), s.inter, D)
		matrix(l("mlp.down_proj.weight"), D, s.inter)
		add(l("altup.correct_output_scale"), 0, 0.05, D)
		add(l("altup.correction_coefs.weight"), 0, 0.0283, 4, 4)
		matrix(l("altup.prediction_coefs.weight"), 16, 4)
		matrix(l("altup.modality_router.weight"), 4, D)
		matrix(l("laurel.linear_left.weight"), rank, D)
		matrix(l("laurel.linear_right.weight"), D, rank)
		matrix(l("per_layer_input_gate.weight"), P, D)
		matrix(l("per_layer_projection.weight"), D, P)
	}
	recipe, _ = json.Marshal(map[string]any{"prng": map[string]any{"kind": "splitmix64", "base_seed": fmt.Sprintf("%x", syntheticBaseSeed)}, "tensors": ts})
	return cfgJSON, recipe, true
}

// Synthetic returns the config.json and recipe.json of a synthetic
// full-size shape ("synthetic-e2b", "synthetic-e4b"); ok is false for any
// other name.
func Synthetic(spec string) (cfgJSON, recipe []byte, ok bool) { return synthetic(spec) }

// SyntheticNames lists the synthetic full-size shapes Open accepts.
func SyntheticNames() string {
	var ns []string
	for n := range syntheticShapes {
		ns = append(ns, n)
	}
	return strings.Join(ns, ", ")
}
