package models_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma4"
	"verdict/engine/model"
	"verdict/engine/models"
)

// prefillLogits runs ids through m in one batch and returns every
// position's logits.
func prefillLogits(t *testing.T, m model.Model, ids []int32) []float32 {
	t.Helper()
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	c := m.NewCache()
	defer c.Free()
	var b model.Batch
	b.Add(c, ids, len(ids))
	h, err := x.Forward(&b)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(ids)*m.Config().Vocab)
	if err := x.Logits(out, h); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOpenGemma4Weights: the loader opens a Gemma 4 folder with its
// default options as q4 (group 64), and with f32 or another group on
// request; each gives the logits of a decoder built directly with those
// weights, bit for bit, and a q4 load reports its packing. Bad weights or
// group sizes are refused by name.
func TestOpenGemma4Weights(t *testing.T) {
	for _, name := range []string{"gemma4-synthetic-tiny.tar.gz", "gemma4-synthetic-tiny-moe.tar.gz"} {
		dir := testmodel.Dir(t, name)
		fx, err := gemma4.OpenFixture(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer fx.Close()
		ids := make([]int32, len(fx.Meta.IDs))
		for i, id := range fx.Meta.IDs {
			ids[i] = int32(id)
		}
		for _, c := range []struct {
			opt     models.Options
			weights model.Weights
			group   int
		}{
			{models.Options{}, model.WeightsQ4, gemma4.DefaultGroup},
			{models.Options{Weights: model.WeightsF32}, model.WeightsF32, 0},
			{models.Options{Weights: model.WeightsQ4, Group: 32}, model.WeightsQ4, 32},
		} {
			var stages []string
			c.opt.Progress = func(stage string, done, total int64) {
				if len(stages) == 0 || stages[len(stages)-1] != stage {
					stages = append(stages, stage)
				}
			}
			m, err := models.OpenWith(dir, c.opt)
			if err != nil {
				t.Fatalf("%s %+v: %v", name, c.opt, err)
			}
			if m.Weights() != c.weights || m.Group() != c.group {
				t.Errorf("%s %+v: %s weights, group %d; want %s, group %d", name, c.opt, m.Weights(), m.Group(), c.weights, c.group)
			}
			packing := slices.Contains(stages, models.StagePacking)
			if packing != (c.weights == model.WeightsQ4) || stages[len(stages)-1] != models.StageTokenizer {
				t.Errorf("%s %+v: progress stages %q", name, c.opt, stages)
			}
			ref, err := fx.Load()
			if err != nil {
				t.Fatal(err)
			}
			d, err := gemma4.NewDecoder(ref, gemma4.Options{Weights: c.weights, Group: c.group, KVPositions: 2048})
			if err != nil {
				t.Fatal(err)
			}
			got, want := prefillLogits(t, m, ids), prefillLogits(t, d, ids)
			if !slices.Equal(got, want) {
				t.Errorf("%s %+v: the loader's logits differ from a %s decoder's", name, c.opt, c.weights)
			}
			d.Close()
			m.Close()
		}
		for _, c := range []struct {
			opt  models.Options
			want string
		}{
			{models.Options{Weights: "int8"}, `weights "int8"`},
			{models.Options{Weights: model.WeightsQ4, Group: 48}, "group size 48"},
		} {
			if m, err := models.OpenWith(dir, c.opt); err == nil {
				m.Close()
				t.Errorf("%s %+v: opened", name, c.opt)
			} else if !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s %+v: %v, want it to name %q", name, c.opt, err, c.want)
			}
		}
	}
}

// TestOpenGemma4: a folder whose config.json says gemma4_text opens as a
// Gemma 4 decoder, whose greedy tokens through the interface with f32
// weights are the fixture's; a tokenizer of a larger vocabulary than the
// model's is not paired with it.
func TestOpenGemma4(t *testing.T) {
	dir := testmodel.Dir(t, "gemma4-synthetic-tiny.tar.gz")
	fx, err := gemma4.OpenFixture(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fx.Close()

	m, err := models.OpenWith(dir, models.Options{Weights: model.WeightsF32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if f := models.FamilyOf(m.Model); f != models.FamilyGemma4 {
		t.Fatalf("the loader opened a %T (family %q), want a Gemma 4 decoder", m.Model, f)
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
