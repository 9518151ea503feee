package weights

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tinyFiles are the parts of the tiny fixture the recipe tests read.
var tinyFiles = []string{"recipe.json", "buffers.safetensors"}

// knownValues come from testdata/recipe_values.py, an independent Python
// implementation of the recipe, run on the tiny fixture's recipe.json.
var knownValues = []struct {
	name string
	i    int
	bits uint32
}{
	{"model.language_model.embed_tokens.weight", 0, 0x3c51d3b2},
	{"model.language_model.embed_tokens.weight", 1, 0xbb09d3b1},
	{"model.language_model.embed_tokens.weight", 63, 0xbd08f16c},
	{"model.language_model.embed_tokens.weight", 64, 0x3cbd7457},
	{"model.language_model.embed_tokens.weight", 133, 0x3c69a506},
	{"model.language_model.embed_tokens.weight", 16793599, 0xbbb2241f},
	{"model.language_model.embed_tokens_per_layer.weight", 0, 0xbb459b50},
	{"model.language_model.embed_tokens_per_layer.weight", 12345, 0x3cd702ac},
	{"model.language_model.embed_tokens_per_layer.weight", 25165823, 0xbc3728c0},
	{"model.language_model.layers.0.self_attn.q_proj.weight", 0, 0xbd062905},
	{"model.language_model.layers.0.self_attn.q_proj.weight", 7, 0x3c2873c2},
	{"model.language_model.layers.0.self_attn.q_proj.weight", 100, 0x3cc7ee26},
	{"model.language_model.layers.3.input_layernorm.weight", 0, 0x3f6fa7f2},
	{"model.language_model.layers.3.input_layernorm.weight", 1, 0x3f69646b},
	{"model.language_model.layers.3.input_layernorm.weight", 63, 0x3f7227e1},
	{"model.vision_tower.timm_model.conv_stem.conv.weight", 0, 0xbcb2e704},
	{"model.vision_tower.timm_model.conv_stem.conv.weight", 1000, 0x3d0e57c2},
	{"model.vision_tower.timm_model.conv_stem.conv.weight", 1727, 0x3c0c1940},
}

func TestRecipeKnownValues(t *testing.T) {
	dir := fixture(t, "gemma3n-synthetic-tiny", tinyFiles...)
	s, err := OpenRecipe(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cache := map[string][]float32{}
	for _, c := range knownValues {
		all, ok := cache[c.name]
		if !ok {
			if all, err = s.Float32(c.name); err != nil {
				t.Fatal(err)
			}
			cache[c.name] = all
		}
		if got := math.Float32bits(all[c.i]); got != c.bits {
			t.Errorf("Float32(%s)[%d] = %#08x, want %#08x", c.name, c.i, got, c.bits)
		}
		// The same element through Rows, when the tensor has rows.
		shape, _, _ := s.Info(c.name)
		if len(shape) >= 2 {
			cols := len(all) / shape[0]
			row := make([]float32, cols)
			if err := s.Rows(c.name, c.i/cols, row); err != nil {
				t.Fatal(err)
			}
			if got := math.Float32bits(row[c.i%cols]); got != c.bits {
				t.Errorf("Rows(%s) element %d = %#08x, want %#08x", c.name, c.i, got, c.bits)
			}
		}
	}
}

func TestRecipeTiny(t *testing.T) {
	dir := fixture(t, "gemma3n-synthetic-tiny", tinyFiles...)
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*recipeStore); !ok {
		t.Fatalf("Open gave a %T", s)
	}
	names := s.Names()
	if len(names) != 754+32 || !slices.IsSorted(names) {
		t.Fatalf("%d names, sorted %v", len(names), slices.IsSorted(names))
	}

	// Every buffer is readable, F32, and the right size.
	bs, err := OpenSafetensors(filepath.Join(dir, buffersFile))
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	for _, name := range bs.Names() {
		shape, dtype, ok := s.Info(name)
		if !ok || dtype != "F32" {
			t.Errorf("Info(%s) = %v %q %v", name, shape, dtype, ok)
			continue
		}
		v, err := s.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := numel(shape)
		if len(v) != n {
			t.Errorf("%s: %d values for shape %v", name, len(v), shape)
		}
	}
	if v, err := s.Float32("model.language_model.embed_tokens.embed_scale"); err != nil || len(v) != 1 || v[0] != 8 {
		t.Errorf("embed_scale = %v, %v", v, err)
	}

	// Generated tensors: F32, right size; BF16 refused; missing names named.
	for _, name := range names {
		shape, dtype, ok := s.Info(name)
		if !ok || dtype != "F32" {
			t.Fatalf("Info(%s) = %v %q %v", name, shape, dtype, ok)
		}
	}
	if _, err := s.BF16("model.language_model.norm.weight"); err == nil || !strings.Contains(err.Error(), "not BF16") {
		t.Errorf("BF16 of a generated tensor: %v", err)
	}
	if _, err := s.Float32("model.language_model.nope"); err == nil || !strings.Contains(err.Error(), "model.language_model.nope") {
		t.Errorf("missing tensor: %v", err)
	}
	if err := s.Rows("model.language_model.norm.weight", 0, make([]float32, 64)); err == nil {
		t.Error("Rows of a 1-D tensor: no error")
	}
	if err := s.Rows("model.language_model.embed_tokens.weight", 262399, make([]float32, 128)); err == nil {
		t.Error("Rows past the end: no error")
	}
}

// TestRecipeRows checks Rows against slices of Float32 for every tensor of
// two or more dimensions, and across the parallel split of big requests.
func TestRecipeRows(t *testing.T) {
	dir := fixture(t, "gemma3n-synthetic-tiny", tinyFiles...)
	s, err := OpenRecipe(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, name := range s.Names() {
		shape, _, _ := s.Info(name)
		if len(shape) < 2 || shape[0] == 0 {
			continue
		}
		all, err := s.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		rows := shape[0]
		cols := len(all) / rows
		spans := [][2]int{{0, 1}, {rows - 1, rows}, {rows / 3, rows/3 + min(rows-rows/3, 5)}}
		if len(all) > 4*parallelGrain {
			spans = append(spans, [2]int{1, rows - 1}) // big enough to run in parallel
		}
		for _, sp := range spans {
			dst := make([]float32, (sp[1]-sp[0])*cols)
			if err := s.Rows(name, sp[0], dst); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(dst, all[sp[0]*cols:sp[1]*cols]) {
				t.Fatalf("%s: Rows [%d, %d) differs from Float32", name, sp[0], sp[1])
			}
		}
	}
}

// TestGenerateParallel checks that the parallel generator matches a plain
// serial run element for element.
func TestGenerateParallel(t *testing.T) {
	rt := &recipeTensor{shape: []int{1 << 20, 3}, numel: 3 << 20, seed: 0x0123456789abcdef, offset: 1, scale: 0.1}
	par := make([]float32, rt.numel-5)
	rt.generate(par, 5)
	ser := make([]float32, rt.numel-5)
	Generate(ser, rt.seed, rt.offset, rt.scale, 5)
	if !slices.Equal(par, ser) {
		t.Fatal("parallel generation differs from serial")
	}
}

// TestRecipeMatchesTransformers checks generated weights against data
// transformers computed from them: the first hidden state is the scaled
// token embedding, embed_tokens[ids] * embed_scale, exactly in float32.
func TestRecipeMatchesTransformers(t *testing.T) {
	dir := fixture(t, "gemma3n-synthetic-tiny", "recipe.json", "buffers.safetensors", "meta.json", "expected.safetensors")
	s, err := OpenRecipe(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var meta struct {
		IDs []int `json:"text_prompt_ids"`
	}
	js, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &meta); err != nil || len(meta.IDs) == 0 {
		t.Fatalf("meta.json: %v, %d ids", err, len(meta.IDs))
	}
	exp, err := OpenSafetensors(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	shape, _, _ := exp.Info("hidden_states")
	const hidden = 64
	if len(shape) != 4 || shape[2] != len(meta.IDs) || shape[3] != hidden {
		t.Fatalf("hidden_states shape %v", shape)
	}
	h0 := make([]float32, len(meta.IDs)*hidden)
	if err := exp.Rows("hidden_states", 0, h0); err != nil {
		t.Fatal(err)
	}
	scale, err := s.Float32("model.language_model.embed_tokens.embed_scale")
	if err != nil {
		t.Fatal(err)
	}
	row := make([]float32, hidden)
	for p, id := range meta.IDs {
		if err := s.Rows("model.language_model.embed_tokens.weight", id, row); err != nil {
			t.Fatal(err)
		}
		for j := range row {
			if got, want := row[j]*scale[0], h0[p*hidden+j]; got != want {
				t.Fatalf("position %d (id %d) dim %d: %v*%v = %v, transformers %v", p, id, j, row[j], scale[0], got, want)
			}
		}
	}
}

func TestNewRecipeStore(t *testing.T) {
	dir := fixture(t, "gemma3n-synthetic-tiny", tinyFiles...)
	js, _ := os.ReadFile(filepath.Join(dir, recipeFile))
	buf, _ := os.ReadFile(filepath.Join(dir, buffersFile))
	a, err := OpenRecipe(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := NewRecipeStore(js, buf)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !slices.Equal(a.Names(), b.Names()) {
		t.Fatal("names differ")
	}
	for _, name := range a.Names() {
		if strings.Contains(name, "embed_tokens") && strings.HasSuffix(name, ".weight") {
			continue // big; covered elsewhere
		}
		x, err1 := a.Float32(name)
		y, err2 := b.Float32(name)
		if err1 != nil || err2 != nil || !slices.Equal(x, y) {
			t.Fatalf("%s differs (%v, %v)", name, err1, err2)
		}
	}
	c, err := NewRecipeStore(js, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Names()) != 754 {
		t.Errorf("without buffers: %d names", len(c.Names()))
	}
	if _, err := c.Float32("model.language_model.embed_tokens.embed_scale"); err == nil {
		t.Error("buffer served without buffers")
	}
	c.Close()
	if _, err := c.Float32("model.language_model.norm.weight"); err == nil {
		t.Error("Float32 after Close: no error")
	}
}

func TestRecipeErrors(t *testing.T) {
	entry := func(fields string) string { return `{"tensors": [{` + fields + `}]}` }
	ok := `"name": "w", "shape": [2, 3], "seed": "00ff", "offset": 0.0, "scale": 0.5`
	cases := []struct {
		name, js, want string
	}{
		{"bad json", `{"tensors": [`, "unexpected end"},
		{"no tensors", `{"prng": {}}`, "no tensors"},
		{"no name", entry(`"shape": [1], "seed": "1", "offset": 0, "scale": 1`), "no name"},
		{"no seed", entry(`"name": "w", "shape": [1], "offset": 0, "scale": 1`), `"w"`},
		{"no scale", entry(`"name": "w", "shape": [1], "seed": "1", "offset": 0`), `"w"`},
		{"no shape", entry(`"name": "w", "seed": "1", "offset": 0, "scale": 1`), `"w"`},
		{"bad seed", entry(`"name": "w", "shape": [1], "seed": "xyz", "offset": 0, "scale": 1`), "bad seed"},
		{"negative dim", entry(`"name": "w", "shape": [-2], "seed": "1", "offset": 0, "scale": 1`), "negative"},
		{"duplicate", `{"tensors": [{` + ok + `}, {` + ok + `}]}`, "twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewRecipeStore([]byte(c.js), nil)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "weights: recipe.json") {
				t.Errorf("got %v, want %q", err, c.want)
			}
			dir := t.TempDir()
			writeFile(t, dir, recipeFile, []byte(c.js))
			_, err = OpenRecipe(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), filepath.Join(dir, recipeFile)) {
				t.Errorf("OpenRecipe: got %v, want %q", err, c.want)
			}
		})
	}
	t.Run("buffer name clash", func(t *testing.T) {
		buf := buildST(t, 0, tspec{"w", "F32", []int{1}, f32bytes(1)})
		if _, err := NewRecipeStore([]byte(entry(ok)), buf); err == nil || !strings.Contains(err.Error(), `"w"`) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("bad buffers", func(t *testing.T) {
		if _, err := NewRecipeStore([]byte(entry(ok)), []byte("junk")); err == nil || !strings.Contains(err.Error(), buffersFile) {
			t.Errorf("got %v", err)
		}
		dir := t.TempDir()
		writeFile(t, dir, recipeFile, []byte(entry(ok)))
		writeFile(t, dir, buffersFile, rawST(`{"x": 1}`, nil))
		if _, err := OpenRecipe(dir); err == nil || !strings.Contains(err.Error(), buffersFile) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("missing recipe", func(t *testing.T) {
		if _, err := OpenRecipe(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no such file") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("values", func(t *testing.T) {
		// A hand-checkable tensor: offset 1, scale 0 gives all ones.
		s, err := NewRecipeStore([]byte(entry(`"name": "w", "shape": [2, 3], "seed": "0x1", "offset": 1, "scale": 0`)), nil)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := s.Float32("w")
		if !slices.Equal(v, []float32{1, 1, 1, 1, 1, 1}) {
			t.Errorf("got %v", v)
		}
	})
}

func benchmarkGenerate(b *testing.B, rows, cols int) {
	js := fmt.Sprintf(`{"tensors": [{"name": "w", "shape": [%d, %d], "seed": "a88fd7958b2bd155", "offset": 0, "scale": 0.03}]}`, rows, cols)
	s, err := NewRecipeStore([]byte(js), nil)
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]float32, rows*cols)
	b.SetBytes(int64(4 * rows * cols))
	b.ResetTimer()
	for b.Loop() {
		if err := s.Rows("w", 0, dst); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rows*cols)*float64(b.N)/b.Elapsed().Seconds(), "elem/s")
}

// BenchmarkGenerateTinyEmbedding generates the tiny fixture's 262400x64
// token embedding.
func BenchmarkGenerateTinyEmbedding(b *testing.B) { benchmarkGenerate(b, 262400, 64) }

// BenchmarkGenerate2048x8192 generates an E2B-sized MLP matrix.
func BenchmarkGenerate2048x8192(b *testing.B) { benchmarkGenerate(b, 2048, 8192) }

// BenchmarkGenerateSerial is the single-goroutine generator speed.
func BenchmarkGenerateSerial(b *testing.B) {
	dst := make([]float32, 1<<20)
	for b.Loop() {
		Generate(dst, 0xa88fd7958b2bd155, 0, 0.03, 0)
	}
	b.ReportMetric(float64(len(dst))*float64(b.N)/b.Elapsed().Seconds(), "elem/s")
}
