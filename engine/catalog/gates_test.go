package catalog_test

import (
	"context"
	"testing"

	"verdict/engine/catalog"
	"verdict/engine/fixture/testmodel"
)

// TestGates: on the CPU backend every gate passes over the fixture's
// requests (a few shuffled batches here; the GPU machine runs 2,000), and
// every gate has cases.
func TestGates(t *testing.T) {
	f := loadFixture(t)
	tok := testmodel.Tokenizer(t)
	m := testmodel.Tiny(t)
	cat, err := catalog.Compile(f.Catalog, tok, grammar(tok))
	if err != nil {
		t.Fatal(err)
	}
	var reqs []catalog.Request
	for _, c := range f.Cases[:min(len(f.Cases), 8)] {
		reqs = append(reqs, catalog.Request{Prompt: c.PromptIDs, K: c.K})
	}
	gates, err := catalog.Gates(context.Background(), m, cat, reqs, 6, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(gates) != 13 {
		t.Fatalf("%d gates, want 13", len(gates))
	}
	for _, g := range gates {
		if g.Failed != 0 || g.Passed == 0 {
			t.Errorf("%s: %d passed, %d failed (%s)", g.Name, g.Passed, g.Failed, g.First)
		}
	}
}

// TestDiffer: a gate sees a result that differs anywhere: an entry, a
// token, a step's choice, a logit's last bit.
func TestDiffer(t *testing.T) {
	base := catalog.Result{Entries: []int32{1, 2}, Tokens: []int32{5, 6, 7},
		Steps: []catalog.Step{{Node: 0, Legal: []int32{5, 9}, Chosen: 5, Logits: []float32{1.5, -2}}}}
	clone := func() catalog.Result {
		r := base
		r.Entries = append([]int32(nil), base.Entries...)
		r.Tokens = append([]int32(nil), base.Tokens...)
		st := base.Steps[0]
		st.Legal = append([]int32(nil), st.Legal...)
		st.Logits = append([]float32(nil), st.Logits...)
		r.Steps = []catalog.Step{st}
		return r
	}
	if d := catalog.Differ(clone(), base); d != "" {
		t.Fatalf("a copy differs: %s", d)
	}
	for name, change := range map[string]func(*catalog.Result){
		"entry":  func(r *catalog.Result) { r.Entries[1] = 3 },
		"token":  func(r *catalog.Result) { r.Tokens[2] = 8 },
		"choice": func(r *catalog.Result) { r.Steps[0].Chosen = 9 },
		"legal":  func(r *catalog.Result) { r.Steps[0].Legal[1] = 10 },
		"logit":  func(r *catalog.Result) { r.Steps[0].Logits[1] = -1.9999999 },
		"steps":  func(r *catalog.Result) { r.Steps = nil },
	} {
		r := clone()
		change(&r)
		if catalog.Differ(r, base) == "" {
			t.Errorf("a changed %s went unseen", name)
		}
	}
}
