package gguf

import (
	"strings"
	"testing"

	"verdict/engine/gemma3n"
	"verdict/engine/weights"
)

// The types llama.cpp's tools give each kind of tensor.
func TestTensorType(t *testing.T) {
	F32, F16, BF16, Q8, Q40, Q4K, Q6K := weights.GGMLF32, weights.GGMLF16, weights.GGMLBF16, weights.GGMLQ8_0, weights.GGMLQ4_0, weights.GGMLQ4_K, weights.GGMLQ6_K
	for _, tc := range []struct {
		ft, name string
		dims     []int
		want     weights.GGMLType
	}{
		{"f16", "blk.0.attn_norm.weight", []int{2048}, F32},
		{"f16", "blk.0.altup_correct_coef.weight", []int{4, 4}, F32},
		{"bf16", "blk.0.altup_predict_coef.weight", []int{4, 16}, F32},
		{"bf16", "blk.0.altup_router.weight", []int{2048, 4}, BF16},
		{"f32", "blk.0.ffn_up.weight", []int{2048, 8192}, F32},
		{"q8_0", "blk.0.laurel_r.weight", []int{4, 64}, F16}, // rows of 4: the converter's fallback
		{"q8_0", "blk.0.laurel_l.weight", []int{64, 4}, Q8},
		{"q4_0", "blk.0.ffn_up.weight", []int{2048, 8192}, Q40},
		{"q4_0", "token_embd.weight", []int{2048, 262400}, Q6K},
		{"q4_0", "per_layer_token_embd.weight", []int{7680, 262400}, Q6K},
		{"q4_0", "token_embd.weight", []int{64, 320}, Q8},
		{"q4_0", "blk.0.laurel_l.weight", []int{2048, 64}, F16},
		{"q4_0", "blk.0.altup_router.weight", []int{2048, 4}, F16},
		{"q4_0", "per_layer_model_proj.weight", []int{2048, 7680}, F16},
		{"q4_0", "altup_proj.weight", []int{2048, 2048, 3}, F16},
		{"q4_0", "blk.0.inp_gate.weight", []int{2048, 256}, Q40},
		{"q4_k", "blk.0.ffn_down.weight", []int{8192, 2048}, Q4K},
		{"q4_k", "blk.0.attn_q.weight", []int{64, 256}, Q8}, // rows of 64
		{"q4_k", "blk.0.attn_q.weight", []int{48, 256}, F16},
	} {
		if got := tensorType(tc.ft, tc.name, tc.dims); got != tc.want {
			t.Errorf("%s %s %v: %s, want %s", tc.ft, tc.name, tc.dims, got, tc.want)
		}
	}
}

// E2B's and E4B's shapes are what llama.cpp fixes; each departure is named.
func TestLlamaCppDifferences(t *testing.T) {
	base := func(layers, shared int) gemma3n.Config {
		c := gemma3n.Config{NumLayers: layers, NumKVSharedLayers: shared, LaurelRank: 64, PerLayerSize: 256, AltUpNumInputs: 4}
		for i := range layers {
			c.LayerTypes = append(c.LayerTypes, map[bool]string{true: "full_attention", false: "sliding_attention"}[i%5 == 4])
			c.ActivationSparsity = append(c.ActivationSparsity, map[bool]float64{true: 0.95, false: 0}[i < 10])
		}
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  func() gemma3n.Config
		want string
	}{
		{"E2B", func() gemma3n.Config { return base(30, 10) }, ""},
		{"E4B", func() gemma3n.Config { return base(35, 15) }, ""},
		{"21 layers", func() gemma3n.Config { return base(21, 1) }, ""},
		{"8 unshared", func() gemma3n.Config {
			c := base(8, 0)
			c.ActivationSparsity = []float64{.95, .95, .95, .95, .95, .95, .95, .95}
			return c
		}, ""},
		{"rank", func() gemma3n.Config { c := base(30, 10); c.LaurelRank = 8; return c }, "Laurel rank 8"},
		{"per-layer", func() gemma3n.Config { c := base(30, 10); c.PerLayerSize = 64; return c }, "per-layer input 64"},
		{"types", func() gemma3n.Config { c := base(30, 10); c.LayerTypes[1] = "full_attention"; return c }, "layer 1 is full_attention"},
		{"sharing", func() gemma3n.Config { return base(30, 5) }, "KV shared from layer 25"},
		{"sparsity", func() gemma3n.Config { c := base(30, 10); c.ActivationSparsity[12] = 0.95; return c }, "layer 12 has activation sparsity 0.95"},
	} {
		d := strings.Join(LlamaCppDifferences(tc.cfg()), "; ")
		if tc.want == "" && d != "" || !strings.Contains(d, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, d, tc.want)
		}
	}
}
