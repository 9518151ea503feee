package catalog_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	"verdict/engine/catalog"
	"verdict/engine/fixture/testmodel"
	"verdict/engine/model"
	"verdict/engine/prompt"
)

// sameResults fails unless the backend step's results are the host
// path's: names, tokens, and every step's node, legal set, choice, entry,
// margin and logits, bit for bit.
func sameResults(t *testing.T, what string, got, want []catalog.Result) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, host %d", what, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if !slices.Equal(g.Names, w.Names) || !slices.Equal(g.Tokens, w.Tokens) || len(g.Steps) != len(w.Steps) {
			t.Fatalf("%s: request %d: backend %v %v, host %v %v", what, i, g.Names, g.Tokens, w.Names, w.Tokens)
		}
		for s := range w.Steps {
			gs, ws := g.Steps[s], w.Steps[s]
			if gs.Node != ws.Node || gs.Chosen != ws.Chosen || gs.Entry != ws.Entry || !slices.Equal(gs.Legal, ws.Legal) ||
				!bitsEqual(gs.Logits, ws.Logits) || (gs.Margin == nil) != (ws.Margin == nil) ||
				(gs.Margin != nil && *gs.Margin != *ws.Margin) {
				t.Fatalf("%s: request %d step %d: backend %+v, host %+v", what, i, s, gs, ws)
			}
		}
	}
}

func decodeBoth(t *testing.T, m model.Model, c *catalog.Catalog, reqs []catalog.Request, opt catalog.Options, batched bool) (dev, host []catalog.Result) {
	t.Helper()
	run := func(mode catalog.StepMode) []catalog.Result {
		o := opt
		o.Step = mode
		if !batched {
			var out []catalog.Result
			for _, r := range reqs {
				res, err := catalog.Decode(context.Background(), m, c, r, o)
				if err != nil {
					t.Fatalf("step mode %d: %v", mode, err)
				}
				out = append(out, res)
			}
			return out
		}
		out, _, err := catalog.DecodeBatch(context.Background(), m, c, reqs, o)
		if err != nil {
			t.Fatalf("step mode %d: %v", mode, err)
		}
		return out
	}
	return run(catalog.BackendStep), run(catalog.HostStep)
}

// fixtureCatalogs compiles the fixture's two catalogs and its requests.
func fixtureCatalogs(t *testing.T) (main, prefix *catalog.Catalog, mainReqs, prefixReqs []catalog.Request) {
	f := loadFixture(t)
	tok := testmodel.Tokenizer(t)
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
	if prefix, err = catalog.Compile(pre, tok, g); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Cases {
		mainReqs = append(mainReqs, catalog.Request{Prompt: c.PromptIDs, K: c.K})
	}
	for _, c := range f.Prefix.Cases {
		prefixReqs = append(prefixReqs, catalog.Request{Prompt: c.PromptIDs, K: c.K})
	}
	return main, prefix, mainReqs, prefixReqs
}

// TestBackendStepFixture: on every case of catalog-tiny.json, alone (the
// counts form) and batched (the mask form), the backend's catalog step
// gives the host path's names, steps and logits bit for bit, with the
// dense head cross-checked at every step.
func TestBackendStepFixture(t *testing.T) {
	m := testmodel.Tiny(t)
	main, prefix, mr, pr := fixtureCatalogs(t)
	for _, set := range []struct {
		name string
		cat  *catalog.Catalog
		reqs []catalog.Request
	}{{"main", main, mr}, {"prefix", prefix, pr}} {
		for _, batched := range []bool{false, true} {
			dev, host := decodeBoth(t, m, set.cat, set.reqs, catalog.Options{CheckDense: true}, batched)
			sameResults(t, fmt.Sprintf("%s batched=%v", set.name, batched), dev, host)
		}
	}
}

// TestBackendStepBatches: batches of 1, 2, 7, 32 and 64 sequences (the
// fixture's intents with assorted k) give the same results with the
// backend step as with the host path.
func TestBackendStepBatches(t *testing.T) {
	m := testmodel.Tiny(t)
	f := loadFixture(t)
	tok := testmodel.Tokenizer(t)
	main, _, _, _ := fixtureCatalogs(t)
	reqs := fixtureRequests(t, f, tok, main, 64)
	for _, n := range []int{1, 2, 7, 32, 64} {
		dev, host := decodeBoth(t, m, main, reqs[:n], catalog.Options{MaxBatch: n}, true)
		sameResults(t, fmt.Sprintf("batch of %d", n), dev, host)
	}
}

// TestBackendStepRandomCatalogs: random catalogs (names of random words,
// some the prefix of others) decode the same through the backend step as
// through the host path, alone and in batches.
func TestBackendStepRandomCatalogs(t *testing.T) {
	m := testmodel.Tiny(t)
	tok := testmodel.Tokenizer(t)
	g := grammar(tok)
	r := rand.New(rand.NewPCG(7, 8))
	words := []string{"get", "set", "list", "find", "open", "close", "read", "send", "mail", "file", "user", "task", "note", "time", "map", "log"}
	for trial := 0; trial < 4; trial++ {
		seen := map[string]bool{}
		var entries []catalog.Entry
		for len(entries) < 6+r.IntN(20) {
			n := 1 + r.IntN(3)
			parts := make([]string, n)
			for i := range parts {
				parts[i] = words[r.IntN(len(words))]
			}
			name := strings.Join(parts, "_")
			if !seen[name] {
				seen[name] = true
				entries = append(entries, catalog.Entry{Name: name})
			}
		}
		c, err := catalog.Compile(entries, tok, g)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		var reqs []catalog.Request
		for i := 0; i < 7; i++ {
			k := 1 + r.IntN(min(4, len(entries)))
			ids, err := catalog.Prompt(c.Entries, k, fmt.Sprintf("request %d of trial %d: %s", i, trial, words[r.IntN(len(words))]), gemmaChat).Encode(tok, model.Special{})
			if err != nil {
				t.Fatal(err)
			}
			reqs = append(reqs, catalog.Request{Prompt: ids, K: k})
		}
		for _, batched := range []bool{false, true} {
			dev, host := decodeBoth(t, m, c, reqs, catalog.Options{MaxBatch: 1 + r.IntN(7)}, batched)
			sameResults(t, fmt.Sprintf("trial %d (%d entries, %d nodes) batched=%v", trial, len(entries), c.Nodes(), batched), dev, host)
		}
	}
}

var emptyMask = regexp.MustCompile(`sequence \d+, step \d+: empty mask at trie node \d+`)

// TestBackendStepBrokenTrie: a planted broken trie (every token edge below
// the root claims no live entry) stops the decode with an error naming the
// empty mask's node, through the backend step as through the host path,
// in both no-repeat forms.
func TestBackendStepBrokenTrie(t *testing.T) {
	m := testmodel.Tiny(t)
	main, _, mr, _ := fixtureCatalogs(t)
	bad := *main
	bad.Count, bad.Mask = slices.Clone(main.Count), slices.Clone(main.Mask)
	for e := bad.First[1]; e < int32(len(bad.Token)); e++ {
		if bad.Child[e] >= 0 {
			bad.Count[e] = 0
			for w := 0; w < bad.Words; w++ {
				bad.Mask[int(e)*bad.Words+w] = 0
			}
		}
	}
	req := mr[0]
	for _, batched := range []bool{false, true} {
		var msgs []string
		for _, mode := range []catalog.StepMode{catalog.BackendStep, catalog.HostStep} {
			var err error
			if batched {
				_, _, err = catalog.DecodeBatch(context.Background(), m, &bad, []catalog.Request{req, req}, catalog.Options{Step: mode})
			} else {
				_, err = catalog.Decode(context.Background(), m, &bad, req, catalog.Options{Step: mode})
			}
			if err == nil || !strings.Contains(err.Error(), "empty mask at trie node") {
				t.Fatalf("batched=%v mode %d: error %v, want an empty mask", batched, mode, err)
			}
			msgs = append(msgs, emptyMask.FindString(err.Error()))
		}
		t.Logf("batched=%v: backend %q, host %q", batched, msgs[0], msgs[1])
		if msgs[0] == "" || msgs[0] != msgs[1] {
			t.Fatalf("batched=%v: backend %q, host %q", batched, msgs[0], msgs[1])
		}
		if _, err := catalog.Decode(context.Background(), m, main, req, catalog.Options{}); err != nil {
			t.Fatalf("the sound catalog after the broken one: %v", err)
		}
	}
}

// TestBackendStepGrammarSwitch: decodes that switch catalogs between them
// (main, prefix, main) and a batch mixing both catalogs' requests walk the
// right trie every time: the host path's results.
func TestBackendStepGrammarSwitch(t *testing.T) {
	m := testmodel.Tiny(t)
	main, prefix, mr, pr := fixtureCatalogs(t)
	cats := []*catalog.Catalog{main, prefix, main, prefix}
	reqs := [][]catalog.Request{mr[:3], pr[:2], mr[3:5], pr[2:]}
	for i, c := range cats {
		dev, host := decodeBoth(t, m, c, reqs[i], catalog.Options{}, false)
		sameResults(t, fmt.Sprintf("switch %d", i), dev, host)
	}
	var mixed []catalog.Request
	for i := 0; i < 4; i++ {
		a, b := mr[i], pr[i]
		b.Catalog = prefix
		mixed = append(mixed, a, b)
	}
	dev, host := decodeBoth(t, m, main, mixed, catalog.Options{MaxBatch: 5}, true)
	sameResults(t, "mixed catalogs in one batch", dev, host)
}

// fixtureRequests makes n requests over c from the fixture's intents in
// turn, with k cycling through 1..5.
func fixtureRequests(t *testing.T, f *catalog.Fixture, tok prompt.Tokenizer, c *catalog.Catalog, n int) []catalog.Request {
	t.Helper()
	var reqs []catalog.Request
	for i := 0; len(reqs) < n; i++ {
		fc := f.Cases[i%len(f.Cases)]
		k := 1 + i%5
		ids, err := catalog.Prompt(c.Entries, k, fc.Intent, gemmaChat).Encode(tok, model.Special{})
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, catalog.Request{Prompt: ids, K: k})
	}
	return reqs
}
