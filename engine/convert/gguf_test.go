package convert

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma3n"
	"verdict/engine/gemma3n/gguf"
	"verdict/engine/models"
	"verdict/engine/weights"
	"verdict/engine/weights/ggufwrite"
)

// writeGGUFFile writes from as a GGUF file of type typ (WriteGGUF) and
// returns its path.
func writeGGUFFile(t *testing.T, from, typ string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), from+"-"+typ+".gguf")
	if _, err := WriteGGUF(from, p, typ, ""); err != nil {
		t.Fatalf("WriteGGUF %s %s: %v", from, typ, err)
	}
	return p
}

// WriteCheckpoint writes the decoder's parameters and no buffer, and the
// result opens as a checkpoint of the same configuration.
func TestWriteCheckpoint(t *testing.T) {
	tiny := testmodel.Dir(t, "gemma3n-synthetic-tiny.tar.gz")
	ck := filepath.Join(t.TempDir(), "ck")
	n, size, err := WriteCheckpoint(tiny, ck, "f32")
	if err != nil || n == 0 || size == 0 {
		t.Fatalf("%d tensors, %d bytes: %v", n, size, err)
	}
	st, err := weights.Open(ck)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, _, ok := st.Info("model.language_model.rotary_emb.full_attention_inv_freq"); ok {
		t.Error("the checkpoint holds a buffer")
	}
	if len(st.Names()) != n {
		t.Errorf("%d tensors in the checkpoint, %d written", len(st.Names()), n)
	}
	if _, _, err := WriteCheckpoint(tiny, ck, "f16"); err == nil || !strings.Contains(err.Error(), `dtype "f16"`) {
		t.Errorf("dtype f16: %v", err)
	}
}

// showValue renders a metadata value for comparison.
func showValue(v weights.GGUFValue) string {
	s := fmt.Sprintf("%s/%s/%d:", v.Type, v.Elem, v.Len())
	if x, ok := v.Str(); ok {
		return s + x
	}
	if x, ok := v.Strings(); ok {
		return s + strings.Join(x, "\x00")
	}
	if x, ok := v.Floats(); ok && v.Len() > 0 {
		return s + fmt.Sprint(x)
	}
	if x, ok := v.Ints(); ok && v.Len() > 0 {
		return s + fmt.Sprint(x)
	}
	if x, ok := v.Bool(); ok {
		return s + fmt.Sprint(x)
	}
	if x, ok := v.Int(); ok {
		return s + fmt.Sprint(x)
	}
	if x, ok := v.Float(); ok {
		return s + fmt.Sprint(x)
	}
	return s + "?"
}

// WriteGGUF of synthetic-micro holds what llama.cpp's own tools wrote
// from the same preset (testdata/gguf-llamacpp): the same tensors in the
// same order with the same dims and types, the same metadata keys in the
// same order with the same types and values, but for the differences on
// purpose: general.name (the preset's name), and the vocabulary (the
// fixture's is a trained 64-piece SentencePiece model padded to 320, ours a
// byte vocabulary of the same size). The converter's BF16 and Q8_0 files
// are matched as they are; for the quantised types, llama-quantize's key
// order (general.quantization_version and file_type last) is matched
// against its Q6_K file.
func TestWriteGGUFMatchesLlamaCpp(t *testing.T) {
	dir := testmodel.Dir(t, "gguf-llamacpp/micro.tar.gz")
	onPurpose := map[string]bool{"general.name": true, "tokenizer.ggml.tokens": true, "tokenizer.ggml.scores": true, "tokenizer.ggml.token_type": true}
	for _, tc := range []struct {
		typ, ref string
		tensors  bool // compare the tensor list too
	}{
		{"bf16", "micro-convert-BF16.gguf", true},
		{"q8_0", "micro-convert-Q8_0.gguf", true},
		{"q4_0", "micro-quantize-pure-Q6_K.gguf", false},
		{"q4_k", "micro-quantize-pure-Q6_K.gguf", false},
	} {
		want, err := weights.OpenGGUFFile(filepath.Join(dir, tc.ref))
		if err != nil {
			t.Fatal(err)
		}
		got, err := weights.OpenGGUFFile(writeGGUFFile(t, "synthetic-micro", tc.typ))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Keys, want.Keys) {
			t.Errorf("%s: keys\n%v\nwant (%s)\n%v", tc.typ, got.Keys, tc.ref, want.Keys)
		}
		for _, k := range want.Keys {
			g, w := showValue(got.KV[k]), showValue(want.KV[k])
			switch {
			case k == "general.file_type" && !tc.tensors:
				if g == w {
					t.Errorf("%s: general.file_type %s is the Q6_K file's", tc.typ, g)
				}
			case onPurpose[k]:
				if got.KV[k].Type != want.KV[k].Type || got.KV[k].Elem != want.KV[k].Elem || got.KV[k].Len() != want.KV[k].Len() {
					t.Errorf("%s: %s is %s, want the type and length of %s", tc.typ, k, g[:min(len(g), 40)], w[:min(len(w), 40)])
				}
			case g != w:
				t.Errorf("%s: %s = %.80s, want %.80s", tc.typ, k, g, w)
			}
		}
		if tc.tensors {
			var gs, ws []string
			for _, x := range got.Tensors {
				gs = append(gs, fmt.Sprint(x.Name, x.Dims, x.Type))
			}
			for _, x := range want.Tensors {
				ws = append(ws, fmt.Sprint(x.Name, x.Dims, x.Type))
			}
			if !slices.Equal(gs, ws) {
				t.Errorf("%s: tensors\n%v\nwant (%s)\n%v", tc.typ, gs, tc.ref, ws)
			}
		}
		got.Close()
		want.Close()
	}
}

// The full-size synthetic shapes lay out as llama.cpp's gemma3n loader
// wants them (nothing generated: the layout only): every tensor it loads
// with its dims, the big matrices in the file type, the token embeddings
// in Q6_K, and nothing of the shape that llama.cpp's code fixes otherwise.
func TestWriteGGUFLayoutFullSize(t *testing.T) {
	for _, tc := range []struct {
		spec            string
		layers, ff, kvs int
	}{
		{"synthetic-e2b", 30, 8192, 20},
		{"synthetic-e4b", 35, 16384, 20},
	} {
		js, recipe, ok := models.Synthetic(tc.spec)
		if !ok {
			t.Fatal(tc.spec)
		}
		st, err := weights.NewRecipeStore(recipe, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg, _, err := gemma3n.ParseConfig(js)
		if err != nil {
			t.Fatal(err)
		}
		if d := gguf.LlamaCppDifferences(cfg); len(d) != 0 {
			t.Errorf("%s: %v", tc.spec, d)
		}
		vocab, _ := ggufwrite.ByteVocab(cfg.VocabSize, cfg.PAD, 1, cfg.BOS)
		kvs, ts, err := gguf.LlamaCpp(st, "model.language_model.", js, gguf.LlamaCppOptions{Type: "q4_0", Name: tc.spec, Vocab: vocab})
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]ggufwrite.Source{}
		for _, s := range ts {
			byName[s.Name] = s
		}
		if len(byName) != len(ts) || len(ts) != 7+24*tc.layers {
			t.Errorf("%s: %d tensors (%d names), want %d", tc.spec, len(ts), len(byName), 7+24*tc.layers)
		}
		P := 256 * tc.layers
		for name, want := range map[string]struct {
			dims []int
			typ  weights.GGMLType
		}{
			"token_embd.weight":                              {[]int{2048, 262400}, weights.GGMLQ6_K},
			"per_layer_token_embd.weight":                    {[]int{P, 262400}, weights.GGMLQ6_K},
			"per_layer_model_proj.weight":                    {[]int{2048, P}, weights.GGMLF16},
			"altup_proj.weight":                              {[]int{2048, 2048, 3}, weights.GGMLF16},
			"blk.0.ffn_gate.weight":                          {[]int{2048, tc.ff}, weights.GGMLQ4_0},
			"blk.0.ffn_down.weight":                          {[]int{tc.ff, 2048}, weights.GGMLQ4_0},
			"blk.0.attn_q.weight":                            {[]int{2048, 2048}, weights.GGMLQ4_0},
			"blk.0.attn_k.weight":                            {[]int{2048, 512}, weights.GGMLQ4_0},
			"blk.0.laurel_l.weight":                          {[]int{2048, 64}, weights.GGMLF16},
			"blk.0.altup_predict_coef.weight":                {[]int{4, 16}, weights.GGMLF32},
			fmt.Sprintf("blk.%d.attn_v.weight", tc.layers-1): {[]int{2048, 512}, weights.GGMLQ4_0},
		} {
			s, ok := byName[name]
			if !ok || !slices.Equal(s.Dims, want.dims) || s.Type != want.typ {
				t.Errorf("%s: %s %v %s, want %v %s", tc.spec, name, s.Dims, s.Type, want.dims, want.typ)
			}
		}
		for _, kv := range kvs {
			switch kv.Key {
			case "gemma3n.block_count":
				if kv.Value != uint32(tc.layers) {
					t.Errorf("%s: block_count %v", tc.spec, kv.Value)
				}
			case "gemma3n.feed_forward_length":
				if ff, ok := kv.Value.([]int32); !ok || len(ff) != tc.layers || ff[0] != int32(tc.ff) {
					t.Errorf("%s: feed_forward_length %v, want %d × %d (the config gives one per layer)", tc.spec, kv.Value, tc.layers, tc.ff)
				}
			case "gemma3n.attention.shared_kv_layers":
				if kv.Value != uint32(tc.layers-tc.kvs) {
					t.Errorf("%s: shared_kv_layers %v", tc.spec, kv.Value)
				}
			}
		}
		st.Close()
	}
}
