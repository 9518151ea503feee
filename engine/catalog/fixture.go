package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"verdict/engine/model"
	"verdict/engine/prompt"
)

// FixtureMargin is the largest gap CheckFixture accepts between a step's
// margin and the fixture's.
const FixtureMargin = 1e-4

// Fixture is a reference decode file (testdata/catalog-tiny.json, written
// by make_catalog_fixture.py with transformers on the tiny synthetic
// model): a catalog, requests with every step of their constrained greedy
// decodes, and a second catalog (names only, plus names that are token
// prefixes of others) with its own cases.
type Fixture struct {
	Sep       int32         `json:"separator_token"`
	Stop      int32         `json:"stop_token"`
	Catalog   []Entry       `json:"catalog"`
	TrieNodes int           `json:"trie_nodes"`
	Cases     []FixtureCase `json:"cases"`
	Prefix    struct {
		Extra     []string           `json:"extra_names"`
		TokenIDs  map[string][]int32 `json:"token_ids"`
		TrieNodes int                `json:"trie_nodes"`
		Cases     []FixtureCase      `json:"cases"`
	} `json:"prefix_catalog"`
}

// FixtureCase is one recorded decode.
type FixtureCase struct {
	Intent         string   `json:"intent"`
	K              int      `json:"k"`
	PromptIDs      []int32  `json:"prompt_ids"`
	ExpectedNames  []string `json:"expected_names"`
	ExpectedTokens []int32  `json:"expected_tokens"`
	Steps          []struct {
		Node   int32    `json:"node"`
		Legal  []int32  `json:"legal"`
		Chosen int32    `json:"chosen"`
		Margin *float64 `json:"margin"`
	} `json:"steps"`
}

// ParseFixture reads a reference decode file; a file without cases is an
// error.
func ParseFixture(data []byte) (*Fixture, error) {
	var f Fixture
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("catalog fixture: %v", err)
	}
	if len(f.Catalog) == 0 || len(f.Cases) == 0 {
		return nil, fmt.Errorf("catalog fixture: %d catalog entries and %d cases, want some of each", len(f.Catalog), len(f.Cases))
	}
	return &f, nil
}

// fixtureSet is one of a fixture's catalogs with its cases.
type fixtureSet struct {
	name  string
	cat   *Catalog
	nodes int
	cases []FixtureCase
}

func (f *Fixture) sets(tok Tokenizer) ([]fixtureSet, error) {
	g := Grammar{Sep: f.Sep, SepText: "\n", Stop: f.Stop}
	main, err := Compile(f.Catalog, tok, g) // token_ids verified
	if err != nil {
		return nil, fmt.Errorf("catalog fixture: the catalog: %w", err)
	}
	sets := []fixtureSet{{"catalog", main, f.TrieNodes, f.Cases}}
	if len(f.Prefix.Cases) == 0 {
		return sets, nil
	}
	var es []Entry
	for _, e := range f.Catalog {
		es = append(es, Entry{Name: e.Name}) // its prompt lists names only
	}
	for _, n := range f.Prefix.Extra {
		es = append(es, Entry{Name: n, TokenIDs: f.Prefix.TokenIDs[n]})
	}
	pre, err := Compile(es, tok, g)
	if err != nil {
		return nil, fmt.Errorf("catalog fixture: the prefix catalog: %w", err)
	}
	return append(sets, fixtureSet{"prefix catalog", pre, f.Prefix.TrieNodes, f.Prefix.Cases}), nil
}

// FixtureTokenizer is what CheckFixture needs of a tokenizer: plain text
// for the names, parts for the prompts.
type FixtureTokenizer interface {
	Tokenizer
	prompt.Tokenizer
}

// CheckFixture decodes every case of f on m and checks it against the
// recording: the tries' sizes and the prompts' ids; every step's node,
// legal set and choice, the margin within FixtureMargin, names and tokens,
// with the sparse head (the backend's step, cross-checked against the
// dense head at every step), the host's step, the dense head and a mask,
// and each catalog's cases in one batch. With cpu (the same weights on the
// CPU backend) it checks too that the CPU decoder gives the names and
// tokens m gives on every case.
func CheckFixture(ctx context.Context, f *Fixture, tok FixtureTokenizer, m, cpu model.Model) ([]Gate, error) {
	sets, err := f.sets(tok)
	if err != nil {
		return nil, err
	}
	var gates []Gate
	add := func(name string) *Gate {
		gates = append(gates, Gate{Name: name})
		return &gates[len(gates)-1]
	}
	g := add("fixture: tries and prompts as recorded")
	for _, s := range sets {
		g.check(s.cat.Nodes() == s.nodes, "%s: %d trie nodes, recorded %d", s.name, s.cat.Nodes(), s.nodes)
		for i, c := range s.cases {
			ids, err := Prompt(s.cat.Entries, c.K, c.Intent, m.Chat()).Encode(tok, model.Special{})
			if err != nil {
				return gates, err
			}
			g.check(slices.Equal(ids, c.PromptIDs), "%s case %d: the prompt builder's %d ids differ from the recorded %d",
				s.name, i, len(ids), len(c.PromptIDs))
		}
	}
	ways := []struct {
		name string
		opt  Options
	}{
		{"fixture: every step as recorded, sparse head (backend step, dense cross-check)", Options{CheckDense: true}},
		{"fixture: every step as recorded, sparse head (host step)", Options{Step: HostStep}},
		{"fixture: every step as recorded, dense head + mask", Options{Head: DenseHead}},
	}
	dev := make([][]Result, len(sets))
	for w, way := range ways {
		g := add(way.name)
		for si, s := range sets {
			for i, c := range s.cases {
				res, err := Decode(ctx, m, s.cat, Request{Prompt: c.PromptIDs, K: c.K}, way.opt)
				if err != nil {
					g.check(false, "%s case %d: %v", s.name, i, err)
					continue
				}
				d := fixtureDiffer(res, c)
				g.check(d == "", "%s case %d: %s", s.name, i, d)
				if w == 0 {
					dev[si] = append(dev[si], res)
				}
			}
		}
	}
	g = add("fixture: each catalog's cases in one batch as recorded")
	for _, s := range sets {
		reqs := make([]Request, len(s.cases))
		for i, c := range s.cases {
			reqs[i] = Request{Prompt: c.PromptIDs, K: c.K}
		}
		out, _, err := DecodeBatch(ctx, m, s.cat, reqs, Options{MaxBatch: len(reqs)})
		if err != nil {
			g.check(false, "%s: %v", s.name, err)
			continue
		}
		for i, c := range s.cases {
			d := fixtureDiffer(out[i], c)
			g.check(d == "", "%s case %d in a batch of %d: %s", s.name, i, len(reqs), d)
		}
	}
	if cpu == nil {
		return gates, nil
	}
	g = add("the CPU decoder's names = the device's on every case of catalog-tiny.json")
	for si, s := range sets {
		for i, c := range s.cases {
			res, err := Decode(ctx, cpu, s.cat, Request{Prompt: c.PromptIDs, K: c.K}, Options{})
			if err != nil {
				g.check(false, "%s case %d on the CPU: %v", s.name, i, err)
				continue
			}
			if i >= len(dev[si]) {
				g.check(false, "%s case %d: the device did not decode it", s.name, i)
				continue
			}
			d := dev[si][i]
			g.check(slices.Equal(res.Names, d.Names) && slices.Equal(res.Tokens, d.Tokens),
				"%s case %d: the CPU says %v (tokens %v), the device %v (tokens %v)", s.name, i, res.Names, res.Tokens, d.Names, d.Tokens)
		}
	}
	return gates, nil
}

// fixtureDiffer says how a result differs from a recorded case ("" when
// it does not).
func fixtureDiffer(res Result, c FixtureCase) string {
	switch {
	case !slices.Equal(res.Names, c.ExpectedNames):
		return fmt.Sprintf("names %v, recorded %v", res.Names, c.ExpectedNames)
	case !slices.Equal(res.Tokens, c.ExpectedTokens):
		return fmt.Sprintf("tokens %v, recorded %v", res.Tokens, c.ExpectedTokens)
	case len(res.Steps) != len(c.Steps):
		return fmt.Sprintf("%d steps, recorded %d", len(res.Steps), len(c.Steps))
	}
	for s, want := range c.Steps {
		got := res.Steps[s]
		if got.Node != want.Node || got.Chosen != want.Chosen || !slices.Equal(got.Legal, want.Legal) {
			return fmt.Sprintf("step %d: node %d legal %v chose %d; recorded node %d legal %v chose %d",
				s, got.Node, got.Legal, got.Chosen, want.Node, want.Legal, want.Chosen)
		}
		if (got.Margin == nil) != (want.Margin == nil) ||
			(got.Margin != nil && math.Abs(*got.Margin-*want.Margin) > FixtureMargin) {
			return fmt.Sprintf("step %d: margin %v, recorded %v", s, fmtMargin(got.Margin), fmtMargin(want.Margin))
		}
	}
	return ""
}

func fmtMargin(m *float64) string {
	if m == nil {
		return "none"
	}
	return fmt.Sprintf("%.6g", *m)
}
