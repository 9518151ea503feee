package models_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma4"
	gemma4gguf "verdict/engine/gemma4/gguf"
	"verdict/engine/model"
	"verdict/engine/models"
)

// gemma4GGUF unpacks testdata/gguf-llamacpp's tarball and returns the path
// of file in it (made by build/fixtures/make_gemma4_gguf.py with
// llama.cpp's gguf-py from the safetensors fixture of the same name).
func gemma4GGUF(t *testing.T, tarball, file string) string {
	t.Helper()
	return filepath.Join(testmodel.Dir(t, "gguf-llamacpp/"+tarball), file)
}

// greedyTokens decodes n tokens greedily after ids through the interface.
func greedyTokens(t *testing.T, m model.Model, ids []int, n int) []int {
	t.Helper()
	x, err := m.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	c := m.NewCache()
	defer c.Free()
	next := make([]int32, len(ids))
	for i, id := range ids {
		next[i] = int32(id)
	}
	var out []int
	for len(out) < n {
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
		out = append(out, int(tok[0]))
		next = tok
	}
	return out
}

// TestOpenGemma4GGUF: OpenWith opens a gemma4 GGUF file as Gemma 4; with
// f32 weights the F32 file gives the safetensors folder's logits bit for
// bit and the fixture's greedy tokens (dense and MoE); by default (q4) it
// gives a q4 decoder built directly over the file's tensors, bit for bit;
// Gemma 3's tokenizer (262144 tokens) is not paired with the 512-token
// model.
func TestOpenGemma4GGUF(t *testing.T) {
	for _, c := range []struct{ fixture, tarball, f32, q8 string }{
		{"gemma4-synthetic-tiny.tar.gz", "gemma4-tiny.tar.gz", "gemma4-synthetic-tiny-F32.gguf", "gemma4-synthetic-tiny-Q8_0.gguf"},
		{"gemma4-synthetic-tiny-moe.tar.gz", "gemma4-tiny-moe-F32.tar.gz", "gemma4-synthetic-tiny-moe-F32.gguf", ""},
	} {
		dir := testmodel.Dir(t, c.fixture)
		fx, err := gemma4.OpenFixture(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer fx.Close()
		ids := make([]int32, len(fx.Meta.IDs))
		for i, id := range fx.Meta.IDs {
			ids[i] = int32(id)
		}
		f32 := models.Options{Weights: model.WeightsF32}
		m, err := models.OpenWith(gemma4GGUF(t, c.tarball, c.f32), f32)
		if err != nil {
			t.Fatalf("%s: %v", c.f32, err)
		}
		ref, err := models.OpenWith(dir, f32)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := m.Config(), ref.Config(); got.Vocab != want.Vocab || got.Layers != want.Layers || got.Hidden != want.Hidden {
			t.Errorf("%s: Config %+v, the folder's %+v", c.f32, got, want)
		}
		if m.Name != strings.TrimSuffix(c.f32, ".gguf") || m.Weights() != model.WeightsF32 {
			t.Errorf("%s: name %q, weights %s", c.f32, m.Name, m.Weights())
		}
		if got, want := prefillLogits(t, m, ids), prefillLogits(t, ref, ids); !slices.Equal(got, want) {
			t.Errorf("%s: logits differ from the safetensors folder's", c.f32)
		}
		if got := greedyTokens(t, m, fx.Meta.IDs, len(fx.Meta.Greedy8)); !slices.Equal(got, fx.Meta.Greedy8) {
			t.Errorf("%s: greedy tokens %v, the fixture's %v", c.f32, got, fx.Meta.Greedy8)
		}
		if os.Getenv("VERDICT_TOKENIZER") != "" {
			if m.Tok != nil || m.TokErr == nil || !strings.Contains(m.TokErr.Error(), "not this model's") {
				t.Errorf("%s: tokenizer %v, error %v: want Gemma 3's refused", c.f32, m.Tok != nil, m.TokErr)
			}
		}
		m.Close()
		ref.Close()

		if c.q8 == "" {
			continue
		}
		path := gemma4GGUF(t, c.tarball, c.q8)
		m, err = models.OpenWith(path, models.Options{})
		if err != nil {
			t.Fatalf("%s: %v", c.q8, err)
		}
		if m.Weights() != model.WeightsQ4 {
			t.Errorf("%s: default weights %s, want q4", c.q8, m.Weights())
		}
		s, err := gemma4gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := gemma4.ParseConfig(s.ConfigJSON())
		if err != nil {
			t.Fatal(err)
		}
		r, err := gemma4.Load(cfg, s)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		d, err := gemma4.NewDecoder(r, gemma4.Options{Weights: model.WeightsQ4, Group: gemma4.DefaultGroup, KVPositions: 2048})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := prefillLogits(t, m, ids), prefillLogits(t, d, ids); !slices.Equal(got, want) {
			t.Errorf("%s: the loader's q4 logits differ from a q4 decoder's over the file's tensors", c.q8)
		}
		d.Close()
		m.Close()
	}
}

// TestOpenGemma4GGUFRefuses: a gemma4 GGUF that lies about its block
// count, or is cut short, is refused by OpenWith with an error naming the
// key or the file's problem.
func TestOpenGemma4GGUFRefuses(t *testing.T) {
	data, err := os.ReadFile(gemma4GGUF(t, "gemma4-tiny.tar.gz", "gemma4-synthetic-tiny-Q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("gemma4.block_count")
	at := bytes.Index(data, key)
	if at < 0 || binary.LittleEndian.Uint32(data[at+len(key):]) != 4 { // a uint32 value follows
		t.Fatalf("no uint32 gemma4.block_count in the file")
	}
	lying := slices.Clone(data)
	binary.LittleEndian.PutUint32(lying[at+len(key)+4:], 1<<30)
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"lying.gguf", lying, "gemma4.block_count is 1073741824, outside 1 to 512"},
		{"cut.gguf", data[:len(data)/2], "cut.gguf"},
	} {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, c.data, 0o644); err != nil {
			t.Fatal(err)
		}
		if m, err := models.OpenWith(p, models.Options{Weights: model.WeightsF32}); err == nil {
			m.Close()
			t.Errorf("%s opens", c.name)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to name %q", c.name, err, c.want)
		}
	}
}
