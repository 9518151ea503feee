package catalog_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"verdict/engine/catalog"
	"verdict/engine/fixture/testmodel"
)

func parseFixture(t *testing.T) *catalog.Fixture {
	t.Helper()
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

// TestCheckFixture: on the CPU every fixture gate passes with a case for
// each of the 12 recorded decodes; a fixture changed anywhere (a name, a
// step's choice, a margin, a prompt id, a trie size) fails the gate that
// reads it; a "CPU" model that decodes otherwise fails the CPU = device
// gate.
func TestCheckFixture(t *testing.T) {
	tok := testmodel.Tokenizer(t)
	m := testmodel.Tiny(t)
	gates, err := catalog.CheckFixture(context.Background(), parseFixture(t), tok, m, m)
	if err != nil {
		t.Fatal(err)
	}
	if len(gates) != 6 {
		t.Fatalf("%d gates, want 6", len(gates))
	}
	for _, g := range gates {
		if g.Failed != 0 || g.Passed < 2 {
			t.Errorf("%s: %d passed, %d failed (%s)", g.Name, g.Passed, g.Failed, g.First)
		}
	}
	for _, tc := range []struct {
		name   string
		prefix bool // the change is in the prefix catalog's case i
		i      int
		change func(*catalog.FixtureCase, *catalog.Fixture)
		gate   string // a prefix of the gate that must fail
	}{
		{"name", false, 2, func(c *catalog.FixtureCase, _ *catalog.Fixture) { c.ExpectedNames[0] = "get_news" }, "fixture: every step"},
		{"choice", true, 1, func(c *catalog.FixtureCase, _ *catalog.Fixture) { c.Steps[0].Chosen++ }, "fixture: every step"},
		{"margin", false, 0, func(c *catalog.FixtureCase, _ *catalog.Fixture) { *c.Steps[0].Margin += 2 * catalog.FixtureMargin }, "fixture: every step"},
		{"prompt id", false, 5, func(c *catalog.FixtureCase, _ *catalog.Fixture) { c.PromptIDs[3]++ }, "fixture: tries and prompts"},
		{"trie size", true, 0, func(_ *catalog.FixtureCase, f *catalog.Fixture) { f.Prefix.TrieNodes++ }, "fixture: tries and prompts"},
		{"batched", false, 7, func(c *catalog.FixtureCase, _ *catalog.Fixture) { c.ExpectedTokens[0]++ }, "fixture: each catalog's cases in one batch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := parseFixture(t)
			// Only the changed case (and one of the main catalog's), to be quick.
			if tc.prefix {
				f.Cases, f.Prefix.Cases = f.Cases[:1], f.Prefix.Cases[tc.i:tc.i+1]
				tc.change(&f.Prefix.Cases[0], f)
			} else {
				f.Cases, f.Prefix.Cases = f.Cases[tc.i:tc.i+1], nil
				tc.change(&f.Cases[0], f)
			}
			gates, err := catalog.CheckFixture(context.Background(), f, tok, m, nil)
			if err != nil {
				t.Fatal(err)
			}
			failed := false
			for _, g := range gates {
				if strings.HasPrefix(g.Name, tc.gate) && g.Failed > 0 {
					failed = true
				}
			}
			if !failed {
				t.Errorf("a changed %s went unseen by %q: %+v", tc.name, tc.gate, gates)
			}
		})
	}
	t.Run("cpu differs", func(t *testing.T) {
		other := testmodel.Load(t, "gemma3n-micro-bf16.tar.gz")
		f := parseFixture(t)
		f.Cases, f.Prefix.Cases = f.Cases[:2], nil
		gates, err := catalog.CheckFixture(context.Background(), f, tok, m, other)
		if err != nil {
			t.Fatal(err)
		}
		if g := gates[len(gates)-1]; !strings.HasPrefix(g.Name, "the CPU decoder") || g.Failed == 0 {
			t.Errorf("another model as the CPU's: %+v", g)
		}
	})
	if _, err := catalog.ParseFixture([]byte(`{"cases": []}`)); err == nil {
		t.Error("a fixture without cases parsed")
	}
}
