package bench_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"verdict/engine/bench"
	"verdict/engine/catalog"
	"verdict/engine/fixture/testmodel"
)

// TestSweepRequest: the sweep's requests are peer_catalog_hf.py's: the
// example intents in turn, marked with their number, k = 1 + i%5.
func TestSweepRequest(t *testing.T) {
	for _, tc := range []struct {
		i      int
		intent int
		k      int
	}{{0, 0, 1}, {4, 4, 5}, {5, 5, 1}, {9, 1, 5}, {12, 4, 3}, {499, 3, 5}} {
		text, k := bench.SweepRequest(tc.i)
		want := catalog.ToolRequests[tc.intent].Text + " (request " + strconv.Itoa(tc.i) + ")"
		if text != want || k != tc.k {
			t.Errorf("request %d: %q, k = %d; want %q, k = %d", tc.i, text, k, want, tc.k)
		}
	}
}

// TestCatalogBench: a tiny run of every section on the tiny model: the
// per-token times, the sweep at two batch sizes (every request's k
// entries, the same names at both), the prefill comparison (the same
// states three ways, the shared prefix found); bad options are errors.
func TestCatalogBench(t *testing.T) {
	tok := testmodel.Tokenizer(t)
	m := testmodel.Tiny(t)
	sep, _ := tok.Lookup("\n")
	cat, err := catalog.Compile(catalog.Tools(), tok, catalog.Grammar{Sep: sep, SepText: "\n", Stop: tok.EndOfTurn()})
	if err != nil {
		t.Fatal(err)
	}
	opt := bench.CatalogOptions{PerToken: 1, Sweep: 7, Batches: []int{1, 3}, Prefill: 3}
	r, err := bench.Catalog(context.Background(), "tiny", m, cat, tok, opt)
	if err != nil {
		t.Fatal(err)
	}
	if r.Tokens == 0 || r.SparseMSPerToken <= 0 || r.UnconstrainedMSPerToken <= 0 || r.Unshared.Requests != 1 ||
		r.SparseRunsMSPerToken <= 0 || r.ForcedShare <= 0 || r.ForcedShare >= 1 {
		t.Errorf("per-token section: %+v", r)
	}
	if len(r.Batches) != 2 {
		t.Fatalf("%d sweep batches, want 2", len(r.Batches))
	}
	for _, b := range r.Batches {
		if b.Requests != 7 || b.Tokens < 7*2 || b.PerSecond <= 0 || b.MSPerToken <= 0 || !b.SameAsBatch1 || b.SharedPrefix == 0 || b.Forced == 0 {
			t.Errorf("batch %d: %+v", b.Batch, b)
		}
	}
	if r.Batches[0].Tokens != r.Batches[1].Tokens || r.Batches[1].Steps >= r.Batches[0].Steps {
		t.Errorf("batch 3 against 1: %+v, %+v", r.Batches[1], r.Batches[0])
	}
	p := r.Prefill
	if p == nil || p.Prompts != 3 || p.Tokens < 3*r.SweepPrompt/2 || !p.SameStates || p.SharedPrefix == 0 || p.SerialSeconds <= 0 || p.BatchedSeconds <= 0 || p.SharedSeconds <= 0 {
		t.Errorf("prefill: %+v", p)
	}
	for _, s := range []string{"per token, forced runs fed ahead", "tokens fed ahead, a shared prefix", "end to end, 7 requests", "batch  3:", "same names as batch 1", "prefill of the sweep's first 3 prompts"} {
		if !strings.Contains(r.String(), s) {
			t.Errorf("the report does not say %q:\n%s", s, r)
		}
	}
	for _, bad := range []bench.CatalogOptions{
		{PerToken: 0, Sweep: 1, Batches: []int{1}},
		{PerToken: 9, Sweep: 1, Batches: []int{1}},
		{PerToken: 1, Sweep: 0, Batches: []int{1}},
		{PerToken: 1, Sweep: 1},
		{PerToken: 1, Sweep: 2, Batches: []int{1}, Prefill: 3},
	} {
		if _, err := bench.Catalog(context.Background(), "tiny", m, cat, tok, bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
