package models_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma3n"
	"verdict/engine/gemma3n/gguf"
	"verdict/engine/models"
	"verdict/engine/weights"
	"verdict/engine/weights/ggufwrite"
)

// writeGGUF lays the text decoder of the model folder dir out as the
// converter would and writes it to path.
func writeGGUF(t *testing.T, dir, path string, opt gguf.LayoutOptions) {
	t.Helper()
	st, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	js, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := gemma3n.ParseConfig(js)
	if err != nil {
		t.Fatal(err)
	}
	kvs, ts, err := gguf.Layout(st, "model.language_model.", cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ggufwrite.Write(f, ggufwrite.Options{}, kvs, ts); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// allLogits runs ids through m and returns the logits of every position.
func allLogits(t *testing.T, m *models.Model, ids []int32) []float32 {
	t.Helper()
	h, err := m.Forward(nil, ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	lg, err := m.Logits(h, len(ids))
	if err != nil {
		t.Fatal(err)
	}
	return lg
}

func maxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

func openF32(t *testing.T, spec string) *models.Model {
	t.Helper()
	m, err := models.OpenWith(spec, models.Options{Weights: gemma3n.WeightsF32, CacheDir: "off"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// gemmaCfg is the Gemma 3n config a GGUF file's metadata gave the decoder
// (the loader's own, behind the model interface).
func gemmaCfg(m *models.Model) gemma3n.Config { return m.Model.(*gemma3n.Model).Cfg }

// The tiny fixture written as a GGUF gives the safetensors path's logits:
// bit for bit in F32, within a measured bound per quantisation (about 1.5x
// what the test measured with ggufwrite's simple quantisers; the log prints
// the measurement). Its rows are 64 wide: Q4_K and Q6_K are exercised by
// TestGGUFMidLogits.
func TestGGUFTinyLogits(t *testing.T) {
	dir := testmodel.Dir(t, "gemma3n-synthetic-tiny.tar.gz")
	withBuffers := openF32(t, dir)
	// A Hugging Face checkpoint holds no buffers (RoPE inverse frequencies,
	// embedding scales): the reference is the fixture without them, as the
	// converter sees a checkpoint.
	if err := os.Remove(filepath.Join(dir, "buffers.safetensors")); err != nil {
		t.Fatal(err)
	}
	ref := openF32(t, dir)
	// 262143 is the last per-layer embedding row (the converter pads after it).
	ids := []int32{2, 105, 2364, 107, 6190, 262143, 1, 9999}
	want := allLogits(t, ref, ids)
	t.Logf("reference logits: max |logit| %.3g", maxAbsDiff(want, make([]float32, len(want))))
	t.Logf("the fixture's buffers move the logits by %.3g", maxAbsDiff(want, allLogits(t, withBuffers, ids)))
	for _, tc := range []struct {
		typ   weights.GGMLType
		bound float64
	}{
		{weights.GGMLF32, 0},
		{weights.GGMLF16, 2e-3},
		{weights.GGMLBF16, 2e-2},
		{weights.GGMLQ8_0, 3e-2},
		{weights.GGMLQ4_0, 0.65},
	} {
		t.Run(tc.typ.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tiny-"+tc.typ.String()+".gguf")
			writeGGUF(t, dir, path, gguf.LayoutOptions{Type: tc.typ, PadPLE: true})
			m := openF32(t, path)
			if gemmaCfg(m).VocabSizePerLayer != 262144 || gemmaCfg(m).VocabSize != 262400 {
				t.Fatalf("vocab %d, per layer %d: want 262400 and the padding dropped (262144)", gemmaCfg(m).VocabSize, gemmaCfg(m).VocabSizePerLayer)
			}
			got := allLogits(t, m, ids)
			d := maxAbsDiff(want, got)
			t.Logf("%s: max |logit error| %.3g over %d logits (bound %.3g)", tc.typ, d, len(got), tc.bound)
			if d > tc.bound {
				t.Errorf("%s: max |logit error| %g over the bound %g", tc.typ, d, tc.bound)
			}
		})
	}
}

// midModel writes a synthetic Gemma 3n whose rows are 256 wide (so that
// Q4_K and Q6_K apply to its matrices) as a recipe folder.
func midModel(t *testing.T) string {
	t.Helper()
	const D, P, L, I, V, VP, H, KV, HD, R = 256, 64, 4, 512, 1024, 768, 2, 1, 128, 8
	text := map[string]any{
		"model_type": "gemma3n_text", "vocab_size": V, "vocab_size_per_layer_input": VP, "hidden_size": D,
		"hidden_size_per_layer_input": P, "intermediate_size": I, "num_hidden_layers": L,
		"num_attention_heads": H, "num_key_value_heads": KV, "head_dim": HD, "num_kv_shared_layers": 1,
		"layer_types":                 []string{"sliding_attention", "sliding_attention", "full_attention", "full_attention"},
		"activation_sparsity_pattern": []float64{0.95, 0, 0, 0}, "sliding_window": 8, "rms_norm_eps": 1e-6,
		"final_logit_softcapping": 30.0, "laurel_rank": R, "altup_num_inputs": 4, "altup_active_idx": 0,
		"altup_coef_clip": 120.0, "altup_correct_scale": true, "hidden_activation": "gelu_pytorch_tanh",
		"max_position_embeddings": 4096, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
		"rope_parameters": map[string]any{
			"full_attention":    map[string]any{"rope_theta": 1e6, "rope_type": "default"},
			"sliding_attention": map[string]any{"rope_theta": 2e4, "rope_type": "default"}, // not llama.cpp's default
		},
	}
	cfg, _ := json.Marshal(map[string]any{"model_type": "gemma3n", "text_config": text})
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
	recipe, _ := json.Marshal(map[string]any{"tensors": ts})
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
	os.WriteFile(filepath.Join(dir, "recipe.json"), recipe, 0o644)
	return dir
}

// A model 256 wide exercises the k-quants: each GGUF type's logits against
// the recipe's, and the per-layer table unpadded (VP < V, no padding) is
// served whole.
func TestGGUFMidLogits(t *testing.T) {
	dir := midModel(t)
	ref := openF32(t, dir)
	if keep := os.Getenv("VERDICT_GGUF_KEEP"); keep != "" { // the reference too
		os.MkdirAll(filepath.Join(keep, "ref"), 0o755)
		for _, f := range []string{"config.json", "recipe.json"} {
			b, _ := os.ReadFile(filepath.Join(dir, f))
			os.WriteFile(filepath.Join(keep, "ref", f), b, 0o644)
		}
	}
	ids := []int32{2, 105, 7, 300, 767, 1000, 1, 42, 42, 5}
	want := allLogits(t, ref, ids)
	t.Logf("reference logits: max |logit| %.3g", maxAbsDiff(want, make([]float32, len(want))))
	for _, tc := range []struct {
		typ   weights.GGMLType
		bound float64
	}{
		{weights.GGMLF32, 0},
		{weights.GGMLF16, 3.5e-3},
		{weights.GGMLBF16, 2.7e-2},
		{weights.GGMLQ8_0, 7e-2},
		{weights.GGMLQ4_0, 0.75},
		{weights.GGMLQ4_K, 0.66},
		{weights.GGMLQ6_K, 0.45},
	} {
		t.Run(tc.typ.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "mid.gguf")
			if keep := os.Getenv("VERDICT_GGUF_KEEP"); keep != "" { // for reading them with other tools
				path = filepath.Join(keep, "mid-"+tc.typ.String()+".gguf")
			}
			writeGGUF(t, dir, path, gguf.LayoutOptions{Type: tc.typ})
			m := openF32(t, path)
			if gemmaCfg(m).VocabSizePerLayer != 768 {
				t.Fatalf("per-layer vocab %d, want 768", gemmaCfg(m).VocabSizePerLayer)
			}
			gs, err := weights.OpenGGUF(path)
			if err != nil {
				t.Fatal(err)
			}
			_, dt, _ := gs.Info("model.language_model.layers.0.mlp.gate_proj.weight")
			gs.Close()
			if dt != tc.typ.String() {
				t.Fatalf("gate_proj is stored as %s, want %s", dt, tc.typ)
			}
			got := allLogits(t, m, ids)
			d := maxAbsDiff(want, got)
			t.Logf("%s: max |logit error| %.3g over %d logits (bound %.3g)", tc.typ, d, len(got), tc.bound)
			if d > tc.bound {
				t.Errorf("%s: max |logit error| %g over the bound %g", tc.typ, d, tc.bound)
			}
		})
	}
}

// Ollama's converter names a few metadata keys differently (head_dim,
// rope.freq_base_local, one feed_forward_length) and does not pad the
// per-layer table: its files read the same.
func TestGGUFOllamaMetadata(t *testing.T) {
	dir := midModel(t)
	ref := openF32(t, dir)
	path := filepath.Join(t.TempDir(), "ollama.gguf")
	writeGGUF(t, dir, path, gguf.LayoutOptions{Type: weights.GGMLF32, Ollama: true})
	m := openF32(t, path)
	ids := []int32{2, 105, 7, 300, 767, 1000, 1, 42, 42, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	if d := maxAbsDiff(allLogits(t, ref, ids), allLogits(t, m, ids)); d != 0 {
		t.Errorf("logits differ by %g", d)
	}
	if gemmaCfg(m).RopeTheta["sliding_attention"] != 2e4 || gemmaCfg(m).HeadDim != 128 {
		t.Errorf("sliding theta %g, head_dim %d: want 20000 and 128", gemmaCfg(m).RopeTheta["sliding_attention"], gemmaCfg(m).HeadDim)
	}
}

// q4 packing reads a GGUF's rows like a checkpoint's: an F32 GGUF packs to
// the same weights, so its logits equal the safetensors path's q4 logits.
func TestGGUFQ4PackSame(t *testing.T) {
	dir := midModel(t)
	path := filepath.Join(t.TempDir(), "mid.gguf")
	writeGGUF(t, dir, path, gguf.LayoutOptions{Type: weights.GGMLF32})
	open := func(spec string) *models.Model {
		m, err := models.OpenWith(spec, models.Options{Weights: gemma3n.WeightsQ4, CacheDir: "off"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	ids := []int32{2, 105, 7, 300}
	want, got := allLogits(t, open(dir), ids), allLogits(t, open(path), ids)
	if d := maxAbsDiff(want, got); d != 0 {
		t.Errorf("q4 logits of the F32 GGUF differ from the checkpoint's by %g", d)
	}
}

// A model path may be the .gguf file or a folder holding one; the errors
// name what is wrong.
func TestGGUFPaths(t *testing.T) {
	dir := midModel(t)
	folder := t.TempDir()
	path := filepath.Join(folder, "mid-Q8_0.gguf")
	writeGGUF(t, dir, path, gguf.LayoutOptions{Type: weights.GGMLQ8_0})
	for _, spec := range []string{path, folder} {
		m := openF32(t, spec)
		if m.Name != "mid-Q8_0" {
			t.Errorf("Open(%s).Name = %q, want mid-Q8_0", spec, m.Name)
		}
	}

	two := t.TempDir()
	data, _ := os.ReadFile(path)
	os.WriteFile(filepath.Join(two, "a.gguf"), data, 0o644)
	os.WriteFile(filepath.Join(two, "b.gguf"), data, 0o644)
	proj := t.TempDir()
	os.WriteFile(filepath.Join(proj, "mmproj-model-f16.gguf"), data, 0o644)
	notGGUF := filepath.Join(t.TempDir(), "model.gguf")
	os.WriteFile(notGGUF, []byte("not a gguf file at all, just text"), 0o644)
	truncated := filepath.Join(t.TempDir(), "cut.gguf")
	os.WriteFile(truncated, data[:len(data)/2], 0o644)
	for _, tc := range []struct{ spec, want string }{
		{two, "holds 2 GGUF files"},
		{proj, "only the multimodal projector"},
		{notGGUF, "not a GGUF file"},
		{truncated, "beyond the"},
	} {
		_, err := models.OpenWith(tc.spec, models.Options{Weights: gemma3n.WeightsF32, CacheDir: "off"})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%s) = %v, want an error containing %q", tc.spec, err, tc.want)
		}
	}
}

// Without a tokenizer.json anywhere the error says that the GGUF's own
// vocabulary is not read and where to put one.
func TestGGUFTokenizerHint(t *testing.T) {
	dir := midModel(t)
	path := filepath.Join(t.TempDir(), "m.gguf")
	writeGGUF(t, dir, path, gguf.LayoutOptions{Type: weights.GGMLF16})
	t.Setenv("VERDICT_TOKENIZER", filepath.Join(t.TempDir(), "none.json"))
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	t.Chdir(t.TempDir())
	m := openF32(t, path)
	if _, err := m.Tokenizer(); err == nil || !strings.Contains(err.Error(), "tokenizer.json beside m.gguf") {
		t.Errorf("Tokenizer() = %v, want the GGUF hint", err)
	}
}

// The tokenizer found for a GGUF must be the file's own vocabulary: the
// Gemma tokenizer passes on a GGUF listing its tokens, and is refused, by
// name of the token that differs, on one whose vocabulary differs.
func TestGGUFVocabCheck(t *testing.T) {
	tok := testmodel.Tokenizer(t)
	dir := testmodel.Dir(t, "gemma3n-synthetic-tiny.tar.gz")
	tokens := make([]string, 262400)
	for i := range tokens {
		tokens[i] = tok.TokenText(int32(i))
		if tokens[i] == "" {
			tokens[i] = fmt.Sprintf("[PAD%d]", i)
		}
	}
	for _, tc := range []struct {
		name   string
		change int // id whose token is replaced, -1 for none
	}{{"same", -1}, {"other", 2}} {
		toks := tokens
		if tc.change >= 0 {
			toks = append([]string(nil), tokens...)
			toks[tc.change] = "<something else>"
		}
		path := filepath.Join(t.TempDir(), "m.gguf")
		writeGGUF(t, dir, path, gguf.LayoutOptions{Type: weights.GGMLQ8_0, PadPLE: true, Tokens: toks})
		m := openF32(t, path)
		_, err := m.Tokenizer()
		switch {
		case tc.change < 0 && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.change >= 0 && (err == nil || !strings.Contains(err.Error(), `token 2 is "<bos>" there, "<something else>" in the GGUF`)):
			t.Errorf("%s: Tokenizer() = %v, want the mismatch named", tc.name, err)
		}
	}
}
