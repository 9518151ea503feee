package generate_test

import (
	"context"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/generate"
)

// TestPrefillProgress: the prompt's prefill reports every decoder layer in
// order, and the decode steps after it report nothing.
func TestPrefillProgress(t *testing.T) {
	m := testmodel.Tiny(t)
	var got [][2]int
	_, err := generate.Run(context.Background(), m, prompt, generate.Options{MaxTokens: 4, OnPrefill: func(done, total int) {
		got = append(got, [2]int{done, total})
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	L := m.Cfg.NumLayers
	if len(got) != L {
		t.Fatalf("%d reports for %d layers (and 3 decode steps): %v", len(got), L, got)
	}
	for i, g := range got {
		if g != [2]int{i + 1, L} {
			t.Errorf("report %d is %v, want %d of %d", i, g, i+1, L)
		}
	}
}
