package scorer_test

import (
	"context"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/scorer"
)

// TestPrefillProgress: the shared prefix's prefill reports the decoder
// layers it runs, in order, and the branches after it report nothing.
func TestPrefillProgress(t *testing.T) {
	m, tk, s := testmodel.Tiny(t), testmodel.Tokenizer(t), ticketSchema(t)
	var got [][2]int
	_, err := scorer.New(m, tk).Score(context.Background(), s, ticket, scorer.Options{OnPrefill: func(done, total int) {
		got = append(got, [2]int{done, total})
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The prefix needs no output state: the KV-sharing layers do not run.
	runs := m.Cfg.NumLayers - m.Cfg.NumKVSharedLayers
	if len(got) != runs {
		t.Fatalf("%d reports, want %d: %v", len(got), runs, got)
	}
	for i, g := range got {
		if g != [2]int{i + 1, runs} {
			t.Errorf("report %d is %v, want %d of %d", i, g, i+1, runs)
		}
	}
}
