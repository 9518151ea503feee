package weights

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestGemma4FixtureRecipes: the Gemma 4 references made by
// build/fixtures/make_gemma4_fixtures.py (transformers' gemma4 on the GPU
// machine) hold a checkpoint that this package's recipe regenerates bit
// for bit, tensor by tensor (the recipe of the Gemma 3n fixtures over
// Gemma 4's tensor names), and their first hidden state is the token
// embedding times sqrt(hidden): the ground a Gemma 4 decoder starts from.
func TestGemma4FixtureRecipes(t *testing.T) {
	for _, name := range []string{"gemma4-synthetic-tiny", "gemma4-synthetic-tiny-moe", "gemma4-synthetic-tiny-f64"} {
		t.Run(name, func(t *testing.T) {
			dir := fixture(t, name, "recipe.json", "buffers.safetensors", "model.safetensors", "meta.json", "config.json", "expected.safetensors")
			rec, err := OpenRecipe(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Close()
			ckpt, err := OpenSafetensors(filepath.Join(dir, "model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer ckpt.Close()
			names := ckpt.Names()
			if len(names) < 20 {
				t.Fatalf("model.safetensors holds %d tensors", len(names))
			}
			for _, n := range names {
				want, err := ckpt.Float32(n)
				if err != nil {
					t.Fatal(err)
				}
				got, err := rec.Float32(n)
				if err != nil {
					t.Fatalf("%s: the recipe lacks it: %v", n, err)
				}
				if len(got) != len(want) {
					t.Fatalf("%s: %d values from the recipe, %d in the checkpoint", n, len(got), len(want))
				}
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s[%d]: recipe %v, checkpoint %v", n, i, got[i], want[i])
					}
				}
			}
			var cfg struct {
				Model  string `json:"model_type"`
				Hidden int    `json:"hidden_size"`
			}
			var meta struct {
				Family string `json:"family"`
				IDs    []int  `json:"text_prompt_ids"`
			}
			for f, v := range map[string]any{"config.json": &cfg, "meta.json": &meta} {
				js, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(js, v); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
			}
			if meta.Family != "gemma4" || cfg.Model != "gemma4_text" || cfg.Hidden <= 0 || len(meta.IDs) == 0 {
				t.Fatalf("family %q, model_type %q, hidden %d, %d ids", meta.Family, cfg.Model, cfg.Hidden, len(meta.IDs))
			}
			exp, err := OpenSafetensors(filepath.Join(dir, "expected.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer exp.Close()
			h0 := make([]float32, len(meta.IDs)*cfg.Hidden)
			if err := exp.Rows("hidden_states", 0, h0); err != nil {
				t.Fatal(err)
			}
			scale := float32(math.Sqrt(float64(cfg.Hidden)))
			row := make([]float32, cfg.Hidden)
			var worst float64
			for p, id := range meta.IDs {
				if err := rec.Rows("model.language_model.embed_tokens.weight", id, row); err != nil {
					if err2 := rec.Rows("model.embed_tokens.weight", id, row); err2 != nil {
						t.Fatalf("the embedding: %v; %v", err, err2)
					}
				}
				for j := range row {
					worst = math.Max(worst, math.Abs(float64(row[j]*scale)-float64(h0[p*cfg.Hidden+j])))
				}
			}
			if worst > 1e-6 {
				t.Errorf("the first hidden state is the embedding times sqrt(%d) to %.3g, want ≤ 1e-6", cfg.Hidden, worst)
			}
		})
	}
}
