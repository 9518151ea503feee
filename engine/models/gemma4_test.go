package models_test

import (
	"os"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma4"
	"verdict/engine/model"
	"verdict/engine/models"
)

// TestOpenGemma4: a folder whose config.json says gemma4_text opens as a
// Gemma 4 decoder (f32), whose greedy tokens through the interface are the
// fixture's; q4 is refused with a message saying what to do; a tokenizer
// of a larger vocabulary than the model's is not paired with it.
func TestOpenGemma4(t *testing.T) {
	dir := testmodel.Dir(t, "gemma4-synthetic-tiny.tar.gz")
	fx, err := gemma4.OpenFixture(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fx.Close()

	if _, err := models.OpenWith(dir, models.Options{}); err == nil || !strings.Contains(err.Error(), "q4 weights are not supported yet") ||
		!strings.Contains(err.Error(), "--weights f32") {
		t.Errorf("opening Gemma 4 with q4 weights: %v, want a refusal naming f32", err)
	}

	m, err := models.OpenWith(dir, models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, ok := m.Model.(*gemma4.Decoder); !ok {
		t.Fatalf("the loader opened a %T, want a *gemma4.Decoder", m.Model)
	}
	if c := m.Config(); c.Vocab != fx.Cfg.Vocab || c.Layers != fx.Cfg.Layers || c.Hidden != fx.Cfg.Hidden {
		t.Errorf("Config %+v, the fixture's config says vocab %d, %d layers, hidden %d", c, fx.Cfg.Vocab, fx.Cfg.Layers, fx.Cfg.Hidden)
	}
	if m.Weights() != model.WeightsF32 {
		t.Errorf("Weights %q", m.Weights())
	}

	// Greedy decoding through the interface gives the fixture's tokens.
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	c := m.NewCache()
	defer c.Free()
	next := make([]int32, len(fx.Meta.IDs))
	for i, id := range fx.Meta.IDs {
		next[i] = int32(id)
	}
	var got []int
	for len(got) < len(fx.Meta.Greedy8) {
		var b model.Batch
		b.Add(c, next, 1)
		h, err := x.Forward(&b)
		if err != nil {
			t.Fatal(err)
		}
		tok := []int32{0}
		if err := x.Greedy(tok, h); err != nil {
			t.Fatal(err)
		}
		got = append(got, int(tok[0]))
		next = tok
	}
	for i := range got {
		if got[i] != fx.Meta.Greedy8[i] {
			t.Fatalf("greedy tokens %v, the fixture's %v", got, fx.Meta.Greedy8)
		}
	}

	// No tokenizer.json in the folder: $VERDICT_TOKENIZER's (Gemma 3's,
	// 262144 tokens) is not this 512-token model's.
	if os.Getenv("VERDICT_TOKENIZER") != "" {
		if m.Tok != nil || m.TokErr == nil || !strings.Contains(m.TokErr.Error(), "not this model's") {
			t.Errorf("tokenizer %v, error %v: want it refused", m.Tok != nil, m.TokErr)
		}
		if _, err := m.Tokenizer(); err == nil {
			t.Error("Tokenizer() gives a tokenizer of another vocabulary")
		}
	}
}

// TestOpenGemma4Refuses: a bad Gemma 4 config is refused naming the field.
func TestOpenGemma4Refuses(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"model_type": "gemma4_text", "vocab_size": 0}`
	if err := os.WriteFile(dir+"/config.json", []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/model.safetensors", []byte("\x02\x00\x00\x00\x00\x00\x00\x00{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := models.OpenWith(dir, models.Options{Weights: model.WeightsF32})
	if err == nil || !strings.Contains(err.Error(), "vocab_size") {
		t.Errorf("a config of vocab_size 0: %v, want an error naming vocab_size", err)
	}
}
