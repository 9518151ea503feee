package weights

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestE2BRecipe is opt-in: set VERDICT_E2B_DIR to an extracted
// gemma3n-synthetic-e2b fixture. It checks the scaled token embedding
// against transformers' first hidden state and times the generation of the
// 262144x7680 per-layer embedding table (8 GB of float32).
func TestE2BRecipe(t *testing.T) {
	dir := os.Getenv("VERDICT_E2B_DIR")
	if dir == "" {
		t.Skip("set VERDICT_E2B_DIR to an extracted gemma3n-synthetic-e2b fixture")
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var meta struct {
		IDs []int `json:"input_ids"`
	}
	js, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &meta); err != nil {
		t.Fatal(err)
	}
	exp, err := OpenSafetensors(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	const hidden = 2048
	h0 := make([]float32, len(meta.IDs)*hidden)
	if err := exp.Rows("hidden_states", 0, h0); err != nil {
		t.Fatal(err)
	}
	scale, err := s.Float32("model.embed_tokens.embed_scale")
	if err != nil {
		t.Fatal(err)
	}
	row := make([]float32, hidden)
	for p, id := range meta.IDs {
		if err := s.Rows("model.embed_tokens.weight", id, row); err != nil {
			t.Fatal(err)
		}
		for j := range row {
			if got, want := row[j]*scale[0], h0[p*hidden+j]; got != want {
				t.Fatalf("position %d dim %d: %v, transformers %v", p, j, got, want)
			}
		}
	}

	const ple = "model.embed_tokens_per_layer.weight"
	shape, _, _ := s.Info(ple)
	n, _ := numel(shape)
	start := time.Now()
	all, err := s.Float32(ple)
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	t.Logf("%s %v: %d elements in %v, %.3g elements/s", ple, shape, n, el, float64(n)/el.Seconds())
	// Again into the same, now resident, memory: the generator's own speed.
	start = time.Now()
	if err := s.Rows(ple, 0, all); err != nil {
		t.Fatal(err)
	}
	el = time.Since(start)
	t.Logf("again into resident memory: %v, %.3g elements/s", el, float64(n)/el.Seconds())
	cols := n / shape[0]
	last := make([]float32, 2*cols)
	if err := s.Rows(ple, shape[0]-2, last); err != nil {
		t.Fatal(err)
	}
	for i, v := range last {
		if all[n-2*cols+i] != v {
			t.Fatalf("Rows differs from Float32 at %d", i)
		}
	}
}
