package convert

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"verdict/engine/gemma3n"
	"verdict/engine/weights"
)

// WriteCheckpoint writes the text decoder of the model folder or preset
// from as a Gemma3nForConditionalGeneration checkpoint without towers
// (model.language_model.* names, no buffers: what save_pretrained writes)
// in dir, its tensors in dtype (f32 or bf16), the checkpoint llama.cpp's
// converter takes. It returns the tensors written and their bytes.
func WriteCheckpoint(from, dir, dtype string) (tensors, bytes int, err error) {
	if dtype != "f32" && dtype != "bf16" {
		return 0, 0, fmt.Errorf("dtype %q: want f32 or bf16", dtype)
	}
	var (
		js []byte
		st weights.Store
	)
	if m, ok := synthModels[from]; ok {
		var recipe []byte
		js, recipe = m.files()
		st, err = weights.NewRecipeStore(recipe, nil)
	} else if js, err = os.ReadFile(filepath.Join(from, "config.json")); err == nil {
		st, err = weights.Open(from)
	}
	if err != nil {
		return 0, 0, err
	}
	defer st.Close()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return 0, 0, fmt.Errorf("%s/config.json: %w", from, err)
	}
	cfg, _, err := gemma3n.ParseConfig(js)
	if err != nil {
		return 0, 0, err
	}
	// Gemma3nForConditionalGeneration: the form Google publishes, which
	// every llama.cpp version with gemma3n converts.
	out := map[string]any{}
	if _, ok := top["text_config"]; ok {
		if err := json.Unmarshal(js, &out); err != nil {
			return 0, 0, err
		}
	} else {
		text := map[string]any{}
		if err := json.Unmarshal(js, &text); err != nil {
			return 0, 0, err
		}
		out["text_config"] = text
	}
	if tc, ok := out["text_config"].(map[string]any); ok {
		// transformers 4.x names too, which older converters read
		tc["rope_theta"] = cfg.RopeTheta["full_attention"]
		tc["rope_local_base_freq"] = cfg.RopeTheta["sliding_attention"]
	}
	out["model_type"] = "gemma3n"
	out["architectures"] = []string{"Gemma3nForConditionalGeneration"}
	out["torch_dtype"] = map[string]string{"f32": "float32", "bf16": "bfloat16"}[dtype]
	prefix := "model.language_model."
	if _, _, ok := st.Info(prefix + "embed_tokens.weight"); !ok {
		prefix = "model."
	}
	var names []string
	for _, n := range st.Names() {
		rest, ok := strings.CutPrefix(n, prefix)
		if !ok || strings.Contains(rest, "rotary_emb.") || strings.HasSuffix(rest, "embed_scale") ||
			strings.HasSuffix(rest, "_input_scale") || strings.HasSuffix(rest, "projection_scale") {
			continue // buffers: a checkpoint does not hold them
		}
		names = append(names, n)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	size := map[string]int{"f32": 4, "bf16": 2}[dtype]
	off := 0
	for _, n := range names {
		shape, _, _ := st.Info(n)
		cnt := 1
		for _, d := range shape {
			cnt *= d
		}
		hdr["model.language_model."+strings.TrimPrefix(n, prefix)] = map[string]any{"dtype": strings.ToUpper(dtype), "shape": shape, "data_offsets": []int{off, off + cnt*size}}
		off += cnt * size
	}
	hj, err := json.Marshal(hdr)
	if err != nil {
		return 0, 0, err
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return 0, 0, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	binary.Write(w, binary.LittleEndian, uint64(len(hj)))
	w.Write(hj)
	var buf []byte
	for _, n := range names { // in the order of the offsets
		x, err := st.Float32(n)
		if err != nil {
			f.Close()
			return 0, 0, err
		}
		buf = buf[:0]
		for _, v := range x {
			b := math.Float32bits(v)
			if dtype == "bf16" { // round to nearest even, as PyTorch does
				buf = binary.LittleEndian.AppendUint16(buf, uint16((b+0x7fff+(b>>16&1))>>16))
			} else {
				buf = binary.LittleEndian.AppendUint32(buf, b)
			}
		}
		w.Write(buf)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, 0, err
	}
	if err := f.Close(); err != nil {
		return 0, 0, err
	}
	cj, _ := json.MarshalIndent(out, "", " ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644); err != nil {
		return 0, 0, err
	}
	return len(names), off, nil
}

// synthModel is the shape of a synthetic Gemma 3n text decoder written by
// -write-checkpoint: vocabulary (and per-layer vocabulary), hidden size,
// per-layer input size, layers, MLP width, heads, KV heads, head size,
// Laurel rank, the layer types and how many trailing layers share KV.
type synthModel struct {
	V, VP, D, P, L, I, H, KV, HD, R int
	types                           []string
	shared                          int
	sparsity                        []float64
}

// synthModels are the presets (Presets).
var synthModels = map[string]synthModel{
	// synthetic-deep: small, but of the shape llama.cpp's gemma3n code
	// fixes (gguf.LlamaCppDifferences): Laurel rank 64, per-layer
	// input 256, a full-attention layer every fifth, KV shared from layer
	// 20 (21 layers), sparsity on layers 0-9; a 35 MB float32 checkpoint.
	"synthetic-deep": deepModel(),
	// synthetic-wide: Gemma's vocabulary, rows of 256 in most matrices (so
	// that llama-quantize applies Q4_K and Q6_K to them, which it cannot on
	// the tiny fixture's rows of 64).
	"synthetic-wide": {V: 262400, VP: 262144, D: 256, P: 64, L: 4, I: 512, H: 2, KV: 1, HD: 128, R: 8,
		types:  []string{"sliding_attention", "sliding_attention", "sliding_attention", "full_attention"},
		shared: 1, sparsity: []float64{0.95, 0, 0, 0}},
	// synthetic-small: every quantisable matrix has rows of 256 (as in E2B,
	// so llama-quantize's k-quant mixes apply with no fallback), a small
	// vocabulary with a per-layer vocabulary below it (the converter pads
	// that table with zero rows, as for Gemma's 262,144 of 262,400), KV
	// sharing and activation sparsity: an 11 MB float32 checkpoint.
	"synthetic-small": {V: 320, VP: 256, D: 256, P: 256, L: 3, I: 256, H: 1, KV: 1, HD: 256, R: 8,
		types:  []string{"sliding_attention", "full_attention", "sliding_attention"},
		shared: 1, sparsity: []float64{0.95, 0, 0}},
	// synthetic-micro: hidden size 64 (rows of 256 only in the attention
	// output, MLP down, per-layer projection and per-layer embedding
	// matrices), two layers sharing KV: GGUF files of a few hundred kB.
	"synthetic-micro": {V: 320, VP: 256, D: 64, P: 256, L: 2, I: 256, H: 1, KV: 1, HD: 256, R: 4,
		types:  []string{"sliding_attention", "sliding_attention"},
		shared: 1, sparsity: []float64{0.95, 0}},
}

func deepModel() synthModel {
	m := synthModel{V: 320, VP: 256, D: 128, P: 256, L: 21, I: 256, H: 2, KV: 1, HD: 128, R: 64, shared: 1}
	for i := range m.L {
		m.types = append(m.types, map[bool]string{true: "full_attention", false: "sliding_attention"}[i%5 == 4])
		m.sparsity = append(m.sparsity, map[bool]float64{true: 0.95, false: 0}[i < 10])
	}
	return m
}

// config.json and recipe.json of the synthetic model m.
func (m synthModel) files() (cfgJSON, recipe []byte) {
	V, VP, D, P, L, I, H, KV, HD, R := m.V, m.VP, m.D, m.P, m.L, m.I, m.H, m.KV, m.HD, m.R
	text := map[string]any{
		"model_type": "gemma3n_text", "vocab_size": V, "vocab_size_per_layer_input": VP, "hidden_size": D,
		"hidden_size_per_layer_input": P, "intermediate_size": I, "num_hidden_layers": L,
		"num_attention_heads": H, "num_key_value_heads": KV, "head_dim": HD, "num_kv_shared_layers": m.shared,
		"layer_types": m.types, "activation_sparsity_pattern": m.sparsity, "sliding_window": 16, "rms_norm_eps": 1e-6,
		"final_logit_softcapping": 30.0, "laurel_rank": R, "altup_num_inputs": 4, "altup_active_idx": 0,
		"altup_coef_clip": 120.0, "altup_correct_scale": true, "hidden_activation": "gelu_pytorch_tanh",
		"max_position_embeddings": 4096, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
		"rope_parameters": map[string]any{
			"full_attention":    map[string]any{"rope_theta": 1e6, "rope_type": "default"},
			"sliding_attention": map[string]any{"rope_theta": 1e4, "rope_type": "default"},
		},
	}
	cfgJSON, _ = json.Marshal(map[string]any{"model_type": "gemma3n", "text_config": text})
	var ts []map[string]any
	add := func(name string, norm bool, shape ...int) {
		scale, offset := 0.28/math.Sqrt(float64(shape[len(shape)-1])), 0.0
		if norm {
			scale, offset = 0.1, 1
		}
		ts = append(ts, map[string]any{"name": "model.language_model." + name, "shape": shape,
			"seed": fmt.Sprintf("%016x", 0x9e3779b97f4a7c15*uint64(len(ts)+1)), "offset": offset, "scale": scale})
	}
	add("embed_tokens.weight", false, V, D)
	add("embed_tokens_per_layer.weight", false, VP, L*P)
	add("per_layer_model_projection.weight", false, L*P, D)
	add("per_layer_projection_norm.weight", true, P)
	add("norm.weight", true, D)
	for i := 0; i < 3; i++ {
		add(fmt.Sprintf("altup_projections.%d.weight", i), false, D, D)
		add(fmt.Sprintf("altup_unembed_projections.%d.weight", i), false, D, D)
	}
	for i := 0; i < L; i++ {
		n := func(s string) string { return fmt.Sprintf("layers.%d.%s", i, s) }
		add(n("self_attn.q_proj.weight"), false, H*HD, D)
		add(n("self_attn.k_proj.weight"), false, KV*HD, D)
		add(n("self_attn.v_proj.weight"), false, KV*HD, D)
		add(n("self_attn.o_proj.weight"), false, D, H*HD)
		add(n("self_attn.q_norm.weight"), true, HD)
		add(n("self_attn.k_norm.weight"), true, HD)
		for _, s := range []string{"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm", "altup.router_norm", "laurel.post_laurel_norm", "post_per_layer_input_norm"} {
			add(n(s+".weight"), true, D)
		}
		add(n("mlp.gate_proj.weight"), false, I, D)
		add(n("mlp.up_proj.weight"), false, I, D)
		add(n("mlp.down_proj.weight"), false, D, I)
		add(n("altup.correct_output_scale"), false, D)
		add(n("altup.correction_coefs.weight"), false, 4, 4)
		add(n("altup.prediction_coefs.weight"), false, 16, 4)
		add(n("altup.modality_router.weight"), false, 4, D)
		add(n("laurel.linear_left.weight"), false, R, D)
		add(n("laurel.linear_right.weight"), false, D, R)
		add(n("per_layer_input_gate.weight"), false, P, D)
		add(n("per_layer_projection.weight"), false, D, P)
	}
	recipe, _ = json.Marshal(map[string]any{"tensors": ts})
	return cfgJSON, recipe
}

// Presets are the names of the small synthetic presets WriteGGUF and
// WriteCheckpoint take as from, sorted: synthetic-deep (llama.cpp's fixed
// gemma3n shape, small), synthetic-micro, synthetic-small and
// synthetic-wide (Gemma's vocabulary).
func Presets() []string { return slices.Sorted(maps.Keys(synthModels)) }
