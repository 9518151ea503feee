package catalog_test

import (
	"context"
	"os"
	"slices"
	"testing"

	"verdict/engine/catalog"
	"verdict/engine/fixture/testmodel"
	"verdict/engine/model"
	"verdict/engine/tokenizer"
)

// fixtureCase is one case of testdata/catalog-tiny.json.
type fixtureCase = catalog.FixtureCase

func loadFixture(t testing.TB) *catalog.Fixture {
	data, err := os.ReadFile(testmodel.Testdata("catalog-tiny.json"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := catalog.ParseFixture(data)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func grammar(tok *tokenizer.Tokenizer) catalog.Grammar {
	sep, _ := tok.Lookup("\n")
	return catalog.Grammar{Sep: sep, SepText: "\n", Stop: tok.EndOfTurn()}
}

// TestFixture reproduces catalog-tiny.json exactly with float32 weights:
// prompts, trie size, every step's node, legal set and chosen token, the
// names, for both catalogs, with the sparse head cross-checked against the
// dense one at every step and the same answers from the dense head alone.
func TestFixture(t *testing.T) {
	f := loadFixture(t)
	tok := testmodel.Tokenizer(t)
	m := testmodel.Tiny(t)
	g := grammar(tok)
	if g.Sep != f.Sep || g.Stop != f.Stop {
		t.Fatalf("separator/stop %d/%d, fixture %d/%d", g.Sep, g.Stop, f.Sep, f.Stop)
	}
	main, err := catalog.Compile(f.Catalog, tok, g) // token_ids verified
	if err != nil {
		t.Fatal(err)
	}
	if main.Nodes() != f.TrieNodes {
		t.Fatalf("%d trie nodes, fixture %d", main.Nodes(), f.TrieNodes)
	}
	prefixEntries := make([]catalog.Entry, 0, len(f.Catalog)+len(f.Prefix.Extra))
	for _, e := range f.Catalog {
		prefixEntries = append(prefixEntries, catalog.Entry{Name: e.Name}) // the prompt lists names only
	}
	for _, n := range f.Prefix.Extra {
		prefixEntries = append(prefixEntries, catalog.Entry{Name: n, TokenIDs: f.Prefix.TokenIDs[n]})
	}
	pre, err := catalog.Compile(prefixEntries, tok, g)
	if err != nil {
		t.Fatal(err)
	}
	if pre.Nodes() != f.Prefix.TrieNodes {
		t.Fatalf("prefix catalog: %d trie nodes, fixture %d", pre.Nodes(), f.Prefix.TrieNodes)
	}
	sets := []struct {
		name  string
		cat   *catalog.Catalog
		cases []fixtureCase
	}{{"main", main, f.Cases}, {"prefix", pre, f.Prefix.Cases}}
	if len(f.Cases) != 8 || len(f.Prefix.Cases) != 4 {
		t.Fatalf("fixture holds %d and %d cases, want 8 and 4", len(f.Cases), len(f.Prefix.Cases))
	}
	for _, set := range sets {
		for i, fc := range set.cases {
			ids, err := catalog.Prompt(set.cat.Entries, fc.K, fc.Intent, gemmaChat).Encode(tok, model.Special{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids, fc.PromptIDs) {
				t.Fatalf("%s case %d: the prompt builder's %d ids differ from the fixture's %d", set.name, i, len(ids), len(fc.PromptIDs))
			}
			for _, head := range []catalog.Head{catalog.SparseHead, catalog.DenseHead} {
				res, err := catalog.Decode(context.Background(), m, set.cat, catalog.Request{Prompt: ids, K: fc.K},
					catalog.Options{Head: head, CheckDense: head == catalog.SparseHead})
				if err != nil {
					t.Fatalf("%s case %d: %v", set.name, i, err)
				}
				checkCase(t, set.name, i, fc, res)
			}
		}
	}
}

func checkCase(t *testing.T, set string, i int, fc fixtureCase, res catalog.Result) {
	t.Helper()
	if !slices.Equal(res.Names, fc.ExpectedNames) {
		t.Fatalf("%s case %d: names %v, fixture %v", set, i, res.Names, fc.ExpectedNames)
	}
	if !slices.Equal(res.Tokens, fc.ExpectedTokens) {
		t.Fatalf("%s case %d: tokens %v, fixture %v", set, i, res.Tokens, fc.ExpectedTokens)
	}
	if len(res.Steps) != len(fc.Steps) {
		t.Fatalf("%s case %d: %d steps, fixture %d", set, i, len(res.Steps), len(fc.Steps))
	}
	for s, want := range fc.Steps {
		got := res.Steps[s]
		if got.Node != want.Node || got.Chosen != want.Chosen || !slices.Equal(got.Legal, want.Legal) {
			t.Fatalf("%s case %d step %d: node %d legal %v chosen %d; fixture node %d legal %v chosen %d",
				set, i, s, got.Node, got.Legal, got.Chosen, want.Node, want.Legal, want.Chosen)
		}
		if (got.Margin == nil) != (want.Margin == nil) {
			t.Fatalf("%s case %d step %d: margin %v, fixture %v", set, i, s, got.Margin, want.Margin)
		}
		if got.Margin != nil && absf(*got.Margin-*want.Margin) > 1e-4 {
			t.Fatalf("%s case %d step %d: margin %g, fixture %g", set, i, s, *got.Margin, *want.Margin)
		}
	}
}

func absf(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
