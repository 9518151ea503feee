package gemma4

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// baseConfig is a fixture's config.json as a JSON object.
func baseConfig(t *testing.T, fixture string) map[string]any {
	t.Helper()
	js, err := os.ReadFile(filepath.Join(fixtureDir(t, fixture), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func parseMap(t *testing.T, m map[string]any) (*Config, error) {
	t.Helper()
	js, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return ParseConfig(js)
}

// TestParseConfigFixtures: the two fixtures' configs, resolved per layer as
// their meta.json "layers" describe them (transformers' modules).
func TestParseConfigFixtures(t *testing.T) {
	type layer struct {
		Layer   int    `json:"layer"`
		Type    string `json:"type"`
		HeadDim int    `json:"head_dim"`
		KVHeads int    `json:"kv_heads"`
		Shared  bool   `json:"kv_shared"`
		Source  *int   `json:"kv_source_layer"`
		MLP     int    `json:"mlp_intermediate"`
		VIsK    bool   `json:"v_is_k"`
		QHeads  int    `json:"q_heads"`
		Window  *int   `json:"sliding_window"`
		Experts []int  `json:"experts"`
	}
	for _, name := range []string{"gemma4-synthetic-tiny", "gemma4-synthetic-tiny-moe"} {
		t.Run(name, func(t *testing.T) {
			c, err := parseMap(t, baseConfig(t, name))
			if err != nil {
				t.Fatal(err)
			}
			mj, err := os.ReadFile(filepath.Join(fixtureDir(t, name), "meta.json"))
			if err != nil {
				t.Fatal(err)
			}
			var meta struct{ Layers []layer }
			if err := json.Unmarshal(mj, &meta); err != nil {
				t.Fatal(err)
			}
			if len(meta.Layers) != c.Layers {
				t.Fatalf("%d layers, meta.json describes %d", c.Layers, len(meta.Layers))
			}
			for _, ly := range meta.Layers {
				l := ly.Layer
				src := l
				if ly.Source != nil {
					src = *ly.Source
				}
				got := []any{c.LayerTypes[l].String(), c.LayerHeadDim(l), c.LayerKVHeads(l), c.KVShared(l), c.KVSource(l), c.LayerIntermediate(l), c.VIsK(l), c.Heads}
				want := []any{ly.Type, ly.HeadDim, ly.KVHeads, ly.Shared, src, ly.MLP, ly.VIsK, ly.QHeads}
				if !slices.Equal(got, want) {
					t.Errorf("layer %d: (type, head_dim, kv_heads, shared, source, mlp, v_is_k, q_heads) = %v, transformers %v", l, got, want)
				}
				if (ly.Window != nil) != (c.LayerTypes[l] == Sliding) || (ly.Window != nil && *ly.Window != c.SlidingWindow) {
					t.Errorf("layer %d: window %v, config %d", l, ly.Window, c.SlidingWindow)
				}
				if ly.Experts != nil && !slices.Equal(ly.Experts, []int{c.Experts, 2 * c.MoEIntermediate, c.Hidden}) {
					t.Errorf("layer %d: experts %v", l, ly.Experts)
				}
			}
			if c.SoftCap != 1 || c.Eps != 1e-6 || c.Rope[Full].Type != "proportional" || c.Rope[Full].PartialRotaryFactor != 0.25 ||
				c.Rope[Full].Theta != 1e6 || c.Rope[Sliding].Theta != 1e4 || c.BOSID != 2 || c.EOSID != 1 {
				t.Errorf("config %+v", c)
			}
		})
	}
}

// TestParseConfigForms: the other spellings of the same config.
func TestParseConfigForms(t *testing.T) {
	ref, err := parseMap(t, baseConfig(t, "gemma4-synthetic-tiny-moe"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		mutate func(m map[string]any) map[string]any
	}{
		{"per_layer_config instead of global_head_dim", func(m map[string]any) map[string]any {
			delete(m, "global_head_dim")
			delete(m, "num_global_key_value_heads")
			m["per_layer_config"] = map[string]any{
				"2": map[string]any{"head_dim": 32, "num_key_value_heads": 1},
				"5": map[string]any{"head_dim": 32, "num_key_value_heads": 1},
			}
			return m
		}},
		{"both, agreeing", func(m map[string]any) map[string]any {
			m["per_layer_config"] = map[string]any{"2": map[string]any{"head_dim": 32, "num_key_value_heads": 1}}
			return m
		}},
		{"gemma4 with text_config", func(m map[string]any) map[string]any {
			return map[string]any{"model_type": "gemma4", "text_config": m, "vision_config": map[string]any{"hidden_size": 768}}
		}},
		{"last layer forced to full", func(m map[string]any) map[string]any {
			lt := m["layer_types"].([]any)
			lt[5] = "sliding_attention"
			return m
		}},
		{"eos as a list", func(m map[string]any) map[string]any {
			m["eos_token_id"] = []any{1, 106}
			return m
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseMap(t, tc.mutate(baseConfig(t, "gemma4-synthetic-tiny-moe")))
			if err != nil {
				t.Fatal(err)
			}
			a, _ := json.Marshal(c)
			b, _ := json.Marshal(ref)
			if string(a) != string(b) {
				t.Errorf("got  %s\nwant %s", a, b)
			}
		})
	}
	t.Run("defaults", func(t *testing.T) {
		m := baseConfig(t, "gemma4-synthetic-tiny")
		for _, k := range []string{"layer_types", "rope_parameters", "rms_norm_eps", "final_logit_softcapping"} {
			delete(m, k)
		}
		m["num_hidden_layers"] = 14
		m["num_kv_shared_layers"] = 0
		c, err := parseMap(t, m)
		if err != nil {
			t.Fatal(err)
		}
		var full []int
		for l, ty := range c.LayerTypes {
			if ty == Full {
				full = append(full, l)
			}
		}
		if !slices.Equal(full, []int{5, 11, 13}) || c.Rope[Full].PartialRotaryFactor != 0.25 || c.Rope[Sliding].Theta != 1e4 ||
			c.Eps != 1e-6 || c.SoftCap != 0 {
			t.Errorf("full layers %v, rope %+v, eps %v, soft-cap %v", full, c.Rope, c.Eps, c.SoftCap)
		}
	})
}

// TestParseConfigRefuses: bad configs, each refused with an error naming the field.
func TestParseConfigRefuses(t *testing.T) {
	set := func(k string, v any) func(map[string]any) {
		return func(m map[string]any) { m[k] = v }
	}
	del := func(k string) func(map[string]any) {
		return func(m map[string]any) { delete(m, k) }
	}
	cases := []struct {
		base   string // "" tiny, "moe"
		mutate func(map[string]any)
		field  string
	}{
		{"", set("model_type", "gemma3n_text"), "model_type"},
		{"", del("hidden_size"), "hidden_size"},
		{"", set("hidden_size", 0), "hidden_size"},
		{"", set("hidden_size", 1<<30), "hidden_size"},
		{"", set("vocab_size", 1<<40), "vocab_size"},
		{"", set("vocab_size", -1), "vocab_size"},
		{"", set("num_hidden_layers", 100000), "num_hidden_layers"},
		{"", set("intermediate_size", 1<<31), "intermediate_size"},
		{"", set("num_key_value_heads", 3), "num_key_value_heads"},
		{"", set("num_key_value_heads", 0), "num_key_value_heads"},
		{"", set("head_dim", 33), "head_dim"},
		{"", set("head_dim", 1<<20), "head_dim"},
		{"", set("global_head_dim", 63), "global_head_dim"},
		{"", set("global_head_dim", 1<<20), "global_head_dim"},
		{"", del("global_head_dim"), "global_head_dim"},
		{"", set("layer_types", []any{"sliding_attention"}), "layer_types"},
		{"", set("layer_types", []any{"sliding_attention", "local", "full_attention", "sliding_attention", "sliding_attention", "full_attention"}), "layer_types"},
		{"", set("sliding_window", 0), "sliding_window"},
		{"", del("sliding_window"), "sliding_window"},
		{"", set("sliding_window", 1<<30), "sliding_window"},
		{"", set("rope_parameters", map[string]any{"full_attention": map[string]any{"rope_type": "proportional", "rope_theta": 1e6}}), "rope_parameters.sliding_attention"},
		{"", set("rope_parameters", map[string]any{"sliding_attention": map[string]any{"rope_type": "yarn", "rope_theta": 1e4}, "full_attention": map[string]any{"rope_theta": 1e6}}), "rope_parameters.sliding_attention.rope_type"},
		{"", set("rope_parameters", map[string]any{"sliding_attention": map[string]any{"rope_theta": -1.0}, "full_attention": map[string]any{"rope_theta": 1e6}}), "rope_parameters.sliding_attention.rope_theta"},
		{"", set("rope_parameters", map[string]any{"sliding_attention": map[string]any{"rope_theta": 1e4}, "full_attention": map[string]any{"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 1.5}}), "rope_parameters.full_attention.partial_rotary_factor"},
		{"", set("rope_parameters", map[string]any{"sliding_attention": map[string]any{"rope_theta": 1e4, "partial_rotary_factor": 0.5}, "full_attention": map[string]any{"rope_theta": 1e6}}), "rope_parameters.sliding_attention.partial_rotary_factor"},
		{"", set("rope_parameters", 5), "rope_parameters"},
		{"", set("hidden_size_per_layer_input", -1), "hidden_size_per_layer_input"},
		{"", set("hidden_size_per_layer_input", 1<<20), "hidden_size_per_layer_input"},
		{"", set("vocab_size_per_layer_input", 256), "vocab_size_per_layer_input"},
		{"", del("vocab_size_per_layer_input"), "vocab_size_per_layer_input"},
		{"", set("num_kv_shared_layers", 6), "num_kv_shared_layers"},
		{"", set("num_kv_shared_layers", -1), "num_kv_shared_layers"},
		{"", set("num_kv_shared_layers", 4), "num_kv_shared_layers"}, // layers 2-5 shared: no earlier full layer
		{"", set("final_logit_softcapping", 0), "final_logit_softcapping"},
		{"", set("final_logit_softcapping", -30), "final_logit_softcapping"},
		{"", set("rms_norm_eps", 0), "rms_norm_eps"},
		{"", set("rms_norm_eps", 2), "rms_norm_eps"},
		{"", set("hidden_activation", "silu"), "hidden_activation"},
		{"", set("tie_word_embeddings", false), "tie_word_embeddings"},
		{"", set("attention_bias", true), "attention_bias"},
		{"", set("use_bidirectional_attention", "all"), "use_bidirectional_attention"},
		{"", set("eos_token_id", 4096), "eos_token_id"},
		{"", set("eos_token_id", "x"), "eos_token_id"},
		{"", set("bos_token_id", -2), "bos_token_id"},
		{"", set("per_layer_config", map[string]any{"0": map[string]any{"head_dim": 64}}), "per_layer_config"},
		{"", set("per_layer_config", map[string]any{"9": map[string]any{"head_dim": 64}}), "per_layer_config"},
		{"", set("per_layer_config", map[string]any{"2": map[string]any{"head_dim": 48}}), "per_layer_config"},
		{"", set("per_layer_config", map[string]any{"2": map[string]any{"sliding_window": 4}}), "per_layer_config"},
		{"", set("per_layer_config", map[string]any{"2": map[string]any{"num_key_value_heads": 2}}), "per_layer_config"},
		{"moe", del("num_experts"), "num_experts"},
		{"moe", set("num_experts", 100000), "num_experts"},
		{"moe", set("top_k_experts", 9), "top_k_experts"},
		{"moe", set("top_k_experts", 0), "top_k_experts"},
		{"moe", set("moe_intermediate_size", nil), "moe_intermediate_size"},
		{"moe", set("moe_intermediate_size", 1<<30), "moe_intermediate_size"},
		{"moe", set("num_global_key_value_heads", 3), "num_global_key_value_heads"},
		{"moe", set("num_global_key_value_heads", 0), "num_global_key_value_heads"},
		{"moe", func(m map[string]any) { m["model_type"] = "gemma4"; m["text_config"] = nil }, "text_config"},
	}
	for _, tc := range cases {
		base := "gemma4-synthetic-tiny"
		if tc.base == "moe" {
			base = "gemma4-synthetic-tiny-moe"
		}
		m := baseConfig(t, base)
		tc.mutate(m)
		_, err := parseMap(t, m)
		switch {
		case err == nil:
			t.Errorf("%s (%s): accepted", tc.field, base)
		case !strings.Contains(err.Error(), tc.field):
			t.Errorf("%s (%s): the error does not name it: %v", tc.field, base, err)
		default:
			t.Logf("%s: %v", tc.field, err)
		}
	}
	if _, err := ParseConfig([]byte("{")); err == nil {
		t.Error("broken JSON accepted")
	}
	if _, err := ParseConfig(make([]byte, maxJSONConfig+1)); err == nil {
		t.Error("a huge config.json accepted")
	}
}
