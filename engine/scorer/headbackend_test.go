package scorer_test

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/scorer"
)

// lastHead is a decision head that puts almost all the mass on each
// decision's last candidate, and counts its checks.
type lastHead struct{ checks int }

func (h *lastHead) Check(*scorer.Scorer, *scorer.Schema) error { h.checks++; return nil }

func (h *lastHead) Rescore(_ context.Context, _ *scorer.Scorer, _ *scorer.Schema, _ string, res *scorer.Result) (map[string][]float64, string, error) {
	out := map[string][]float64{}
	for _, f := range res.Fields {
		for _, d := range f.Decisions {
			s := make([]float64, len(d.Candidates))
			s[len(s)-1] = 10
			out[d.Name] = s
		}
	}
	return out, "last candidate", nil
}

// TestHeadBackend: the head backend keeps the json backend's
// log-likelihoods, takes the head's distributions, and derives every
// field's summary and the answer from them; fields are reported once each.
func TestHeadBackend(t *testing.T) {
	m, tk, s := testmodel.Tiny(t), testmodel.Tokenizer(t), ticketSchema(t)
	sc := scorer.New(m, tk)
	ctx := context.Background()
	base, err := sc.Score(ctx, s, ticket, scorer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := &lastHead{}
	var reported []string
	r, err := sc.Score(ctx, s, ticket, scorer.Options{Backend: scorer.BackendHead, Head: h, OnField: func(f scorer.FieldResult) {
		reported = append(reported, f.Name)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if h.checks != 1 || r.ProbabilitySource != "last candidate" {
		t.Errorf("%d checks, source %q", h.checks, r.ProbabilitySource)
	}
	if want := []string{"priority", "department", "refund_requested", "issues", "anger"}; !slices.Equal(reported, want) {
		t.Errorf("fields reported %v, want %v", reported, want)
	}
	for i, f := range r.Fields {
		for j, d := range f.Decisions {
			for k, c := range d.Candidates {
				if c.LogLikelihood != base.Fields[i].Decisions[j].Candidates[k].LogLikelihood {
					t.Errorf("%s: log-likelihood changed", d.Name)
				}
			}
			if last := d.Candidates[len(d.Candidates)-1].Probability; last < 0.999 {
				t.Errorf("%s: last candidate's probability %v", d.Name, last)
			}
		}
	}
	var ans map[string]any
	if err := json.Unmarshal(r.Answer, &ans); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"priority": "critical", "department": "sales", "refund_requested": false,
		"issues": map[string]any{"late delivery": false, "damaged item": false, "double charge": false, "login problem": false}, "anger": 5.0}
	if got, _ := json.Marshal(ans); string(got) != mustJSON(want) {
		t.Errorf("answer %s, want %s", got, mustJSON(want))
	}
	f := r.Fields
	if f[0].Winner != "critical" || *f[2].PTrue > 0.001 || len(f[3].Labels) != 4 || f[3].Labels[2].Label != "double charge" || f[3].Labels[2].PYes > 0.001 {
		t.Errorf("field summaries: %+v", f)
	}
	if e := *f[4].ExpectedLevel; math.Abs(e-5) > 1e-3 {
		t.Errorf("expected level %v, want about 5", e)
	}
	if c := f[4].Decisions[0].Confidence; c < 0.99 || f[4].Confidence != c {
		t.Errorf("confidence %v, field %v", c, f[4].Confidence)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestTokensKey: each decision's Shared tokens begin with its JSON key's
// Key tokens, as the prompt continues them.
func TestTokensKey(t *testing.T) {
	m, tk, s := testmodel.Tiny(t), testmodel.Tokenizer(t), ticketSchema(t)
	sc := scorer.New(m, tk)
	prefix, ds, err := sc.Tokens(s, ticket)
	if err != nil {
		t.Fatal(err)
	}
	if len(prefix) == 0 || len(ds) != 1+1+1+4+1 {
		t.Fatalf("%d prompt tokens, %d decisions", len(prefix), len(ds))
	}
	for _, d := range ds {
		key := `{"` + d.Name + `":`
		if d.Name == "issues.late delivery" {
			key = `{"issues": {"late delivery":`
		}
		if d.Field == 3 && d.Name != "issues.late delivery" {
			continue
		}
		if got := tk.Decode(d.Shared[:d.Key]); got != key {
			t.Errorf("%s: key tokens %q, want %q", d.Name, got, key)
		}
		if len(d.Cands) != len(d.Values) {
			t.Errorf("%s: %d candidates for %d values", d.Name, len(d.Cands), len(d.Values))
		}
	}
}
