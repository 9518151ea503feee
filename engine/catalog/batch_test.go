package catalog_test

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"verdict/engine/catalog"
	"verdict/engine/fixture/testmodel"
	"verdict/engine/model"
)

// TestBatchMatchesAlone: batched decoding (the masked no-repeat form, prompt
// chunks mixed with other sequences' decode steps, requests admitted as
// others finish) gives every request exactly what decoding it alone gives:
// the same tokens and bit-identical logits at every step, over shuffled
// batches of the fixture's intents on both catalogs, with and without the
// shared prompt prefix computed once and forked.
func TestBatchMatchesAlone(t *testing.T) {
	f := loadFixture(t)
	tok := testmodel.Tokenizer(t)
	m := testmodel.Tiny(t)
	g := grammar(tok)
	main, err := catalog.Compile(f.Catalog, tok, g)
	if err != nil {
		t.Fatal(err)
	}
	var pre []catalog.Entry
	for _, e := range f.Catalog {
		pre = append(pre, catalog.Entry{Name: e.Name})
	}
	for _, n := range f.Prefix.Extra {
		pre = append(pre, catalog.Entry{Name: n})
	}
	prefix, err := catalog.Compile(pre, tok, g)
	if err != nil {
		t.Fatal(err)
	}
	type job struct {
		cat *catalog.Catalog
		req catalog.Request
	}
	var jobs []job
	for _, c := range f.Cases {
		jobs = append(jobs, job{main, catalog.Request{Prompt: c.PromptIDs, K: c.K}})
	}
	for _, c := range f.Prefix.Cases {
		jobs = append(jobs, job{prefix, catalog.Request{Prompt: c.PromptIDs, K: c.K}})
	}
	// Every intent again with another k, so that batches mix lengths.
	for i, c := range f.Cases {
		ids, err := catalog.Prompt(main.Entries, 1+i%6, c.Intent, gemmaChat).Encode(tok, model.Special{})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, job{main, catalog.Request{Prompt: ids, K: 1 + i%6}})
	}
	alone := make([]catalog.Result, len(jobs))
	for i, j := range jobs {
		if alone[i], err = catalog.Decode(context.Background(), m, j.cat, j.req, catalog.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	batches := 200
	if s := os.Getenv("VERDICT_CATALOG_BATCHES"); s != "" {
		batches, _ = strconv.Atoi(s)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for b := 0; b < batches; b++ {
		cat := main
		var pick []int
		for i, j := range jobs {
			if j.cat == main {
				pick = append(pick, i)
			}
		}
		if b%4 == 3 {
			cat, pick = prefix, pick[:0]
			for i, j := range jobs {
				if j.cat == prefix {
					pick = append(pick, i)
				}
			}
		}
		r.Shuffle(len(pick), func(x, y int) { pick[x], pick[y] = pick[y], pick[x] })
		pick = pick[:1+r.IntN(len(pick))]
		reqs := make([]catalog.Request, len(pick))
		for i, p := range pick {
			reqs[i] = jobs[p].req
		}
		opt := catalog.Options{MaxBatch: 1 + r.IntN(8), PrefillChunk: []int{7, 64, 200, 512}[r.IntN(4)], NoSharedPrefix: b%3 == 0}
		got, st, err := catalog.DecodeBatch(context.Background(), m, cat, reqs, opt)
		if err != nil {
			t.Fatal(err)
		}
		if shared := len(reqs) > 1 && !opt.NoSharedPrefix; (st.SharedPrefix > 0) != shared {
			t.Fatalf("batch %d: %d requests, %+v: shared prefix of %d tokens", b, len(reqs), opt, st.SharedPrefix)
		}
		for i, p := range pick {
			want := alone[p]
			if !slices.Equal(got[i].Tokens, want.Tokens) || !slices.Equal(got[i].Names, want.Names) {
				t.Fatalf("batch %d (%+v) request %d: %v, alone %v", b, opt, i, got[i].Names, want.Names)
			}
			for s := range want.Steps {
				if !bitsEqual(got[i].Steps[s].Logits, want.Steps[s].Logits) {
					t.Fatalf("batch %d request %d step %d: logits %v, alone %v", b, i, s, got[i].Steps[s].Logits, want.Steps[s].Logits)
				}
			}
		}
	}
}

// TestAdmission: with a key/value pool too small for all requests at once,
// the batched decoder admits what fits, queues the rest and gives every
// request the result it gets alone; a request that can never fit is an
// error naming it.
func TestAdmission(t *testing.T) {
	base := testmodel.Tiny(t)
	m, err := base.WithKVPositions(40 * model.KVBlock)
	if err != nil {
		t.Fatal(err)
	}
	f := loadFixture(t)
	tok := testmodel.Tokenizer(t)
	cat, err := catalog.Compile(f.Catalog, tok, grammar(tok))
	if err != nil {
		t.Fatal(err)
	}
	c := f.Cases[0]
	reqs := make([]catalog.Request, 6)
	for i := range reqs {
		reqs[i] = catalog.Request{Prompt: c.PromptIDs, K: c.K}
	}
	alone, err := catalog.Decode(context.Background(), m, cat, reqs[0], catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := catalog.DecodeBatch(context.Background(), m, cat, reqs, catalog.Options{MaxBatch: 8, NoSharedPrefix: true})
	if err != nil {
		t.Fatalf("a small pool: %v", err)
	}
	for i := range got {
		if !slices.Equal(got[i].Names, alone.Names) {
			t.Fatalf("request %d: %v, alone %v", i, got[i].Names, alone.Names)
		}
	}
	tiny, err := base.WithKVPositions(2 * model.KVBlock)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := catalog.DecodeBatch(context.Background(), tiny, cat, reqs[:1], catalog.Options{}); err == nil || !strings.Contains(err.Error(), "request 0") {
		t.Errorf("a request beyond the whole pool: %v", err)
	}
}
