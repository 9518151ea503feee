package scorer_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/scorer"
	"verdict/native"
)

// cachedSuffix is the text after the prompt whose last output scores the
// codes of decision k of the ticket schema, written out by hand.
func cachedSuffixes(s *scorer.Schema) []string {
	var out []string
	for _, f := range s.Fields {
		key := fmt.Sprintf(`{"%s":`, f.Name)
		switch f.Kind {
		case scorer.Choice, scorer.Score:
			out = append(out, key+` "`)
		case scorer.Bool:
			out = append(out, key)
		case scorer.Independent:
			for _, o := range f.Options {
				out = append(out, fmt.Sprintf(`%s {"%s":`, key, o.Name))
			}
		}
	}
	return out
}

// TestCachedBackend: every code's log-likelihood is the log-probability of
// its token after prompt + suffix in one full forward pass of its own; the
// prompt lists the codes; the result has the json backend's shape.
func TestCachedBackend(t *testing.T) {
	m, tk, s := testmodel.Tiny(t), testmodel.Tokenizer(t), ticketSchema(t)
	sc := scorer.New(m, tk)
	ctx := context.Background()
	var streamed []string
	res, err := sc.Score(ctx, s, ticket, scorer.Options{Backend: scorer.BackendCached, BranchBatch: 3,
		OnField: func(f scorer.FieldResult) { streamed = append(streamed, f.Name) }})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.ProbabilitySource, "cached") || len(streamed) != len(s.Fields) {
		t.Fatalf("source %q, streamed %v", res.ProbabilitySource, streamed)
	}
	codes, err := sc.CachedCodes(s)
	if err != nil {
		t.Fatal(err)
	}
	prompt := scorer.CachedPrompt(s, ticket, codes)
	for _, want := range []string{`One of (answer its code): A="low", B="medium", C="high", D="critical".`, `E="sales"`, "One of, from lowest to highest (answer its code): A=1, B=2"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("the cached prompt lacks %q:\n%s", want, prompt)
		}
	}
	json, err := sc.Score(ctx, s, ticket, scorer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	V := m.Cfg.VocabSize
	suffixes := cachedSuffixes(s)
	k := 0
	for fi, f := range res.Fields {
		if f.Name != s.Fields[fi].Name || len(f.Decisions) != len(json.Fields[fi].Decisions) {
			t.Fatalf("field %d: %+v", fi, f)
		}
		for _, d := range f.Decisions {
			ids := tk.Encode(prompt + suffixes[k])
			h, err := m.Forward(nil, ids, nil)
			if err != nil {
				t.Fatal(err)
			}
			D := m.Cfg.HiddenSize
			logits, err := m.Logits(h[len(h)-D:], 1)
			if err != nil {
				t.Fatal(err)
			}
			lse := make([]float32, 1)
			native.LogSumExp(lse, logits, V)
			var sum float64
			for j, c := range d.Candidates {
				code := " " + []string{"true", "false"}[j%2]
				if cs, ok := codes[fi]; ok {
					code = cs[j]
				}
				full := tk.Encode(prompt + suffixes[k] + code)
				if len(full) != len(ids)+1 {
					t.Fatalf("%s: code %q is %d tokens", d.Name, code, len(full)-len(ids))
				}
				want := float64(logits[full[len(ids)]]) - float64(lse[0])
				if math.Abs(c.LogLikelihood-want) > 1e-4 {
					t.Errorf("%s %s: log-likelihood %.6f, full pass %.6f", d.Name, c.Value, c.LogLikelihood, want)
				}
				sum += c.Probability
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Errorf("%s: probabilities sum to %v", d.Name, sum)
			}
			k++
		}
	}
	if k != len(suffixes) {
		t.Fatalf("%d decisions, want %d", k, len(suffixes))
	}
	if len(res.Answer) == 0 || res.Timings.Prefill <= 0 || res.BranchRows != len(suffixes) {
		t.Fatalf("answer %s, timings %+v, rows %d", res.Answer, res.Timings, res.BranchRows)
	}
	c := scorer.Compare(json, res)
	t.Logf("tiny fixture, ticket schema: cached vs json over %d decisions: mean KL %.4f nats, max %.4f, winner agreement %.0f%%; json %.1f ms, cached %.1f ms",
		len(c.Decisions), c.MeanKL, c.MaxKL, 100*c.WinnerAgreement,
		float64(json.Timings.Total)/1e6, float64(res.Timings.Total)/1e6)
}

// TestCachedCodes: letters up to 26 options; past them numbers, which the
// Gemma tokenizer splits after 9, so upper and lower case letters; past 52
// a clear error. A code that merges with its suffix is refused.
func TestCachedCodes(t *testing.T) {
	m, tk := testmodel.Tiny(t), testmodel.Tokenizer(t)
	sc := scorer.New(m, tk)
	field := func(n int) *scorer.Schema {
		f := scorer.Field{Name: "pick", Question: "Which?", Kind: scorer.Choice}
		for i := 0; i < n; i++ {
			f.Options = append(f.Options, scorer.Option{Name: fmt.Sprintf("option %d", i)})
		}
		return &scorer.Schema{Fields: []scorer.Field{f}}
	}
	for _, tc := range []struct {
		n          int
		first, lst string
	}{{2, "A", "B"}, {26, "A", "Z"}, {30, "A", "d"}, {52, "A", "z"}} {
		codes, err := sc.CachedCodes(field(tc.n))
		if err != nil {
			t.Fatalf("%d options: %v", tc.n, err)
		}
		if c := codes[0]; len(c) != tc.n || c[0] != tc.first || c[tc.n-1] != tc.lst {
			t.Errorf("%d options: codes %v", tc.n, c)
		}
	}
	_, err := sc.CachedCodes(field(53))
	var se *scorer.SchemaError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "no single-token answer codes for its 53 options") {
		t.Errorf("53 options: %v", err)
	}
	if _, _, err := sc.CodeTokens(`{"pick": "`, []string{"A", `"`}); err == nil || !strings.Contains(err.Error(), `code "\"" is not one token`) {
		t.Errorf("a code merging with the quote: %v", err)
	}
	if _, _, err := sc.CodeTokens(`{"pick": "`, []string{"A", "10"}); err == nil {
		t.Errorf("a two-token code passed")
	}
}
