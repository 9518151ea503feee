package scorer_test

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"verdict/engine/catalog"
	"verdict/engine/fixture/testmodel"
	"verdict/engine/scorer"
)

const catalogSchema = `{"input_label": "Request", "fields": [
 {"name": "tools", "question": "Which tools serve this request?", "type": "catalog", "k": 2,
  "entries": {"get_weather": "Weather and forecast", "create_calendar_event": "Add an event", "send_email": "Send an email",
   "read_email": "Read the inbox", "read": "Read anything", "set_timer": "Start a timer"}},
 {"name": "priority", "question": "How urgent?", "type": "choice", "options": {"low": "", "medium": "", "high": "", "higher": ""}},
 {"name": "outdoor", "question": "Is it about the outdoors?", "type": "bool"}]}`

// TestCatalogField: a catalog field is decoded from a fork of the shared
// prefix exactly as the trie decoder decodes the whole prompt alone (same
// tokens, bit-identical logits), and its names land in the answer.
func TestCatalogField(t *testing.T) {
	tok := testmodel.Tokenizer(t)
	m := testmodel.Tiny(t)
	s, err := scorer.ParseSchema([]byte(catalogSchema))
	if err != nil {
		t.Fatal(err)
	}
	input := "Umbrella for Berlin tomorrow? Put the meeting in my calendar and mail Anna."
	sc := scorer.New(m, tok)
	var streamed []string
	var live [][]string
	res, err := sc.Score(context.Background(), s, input, scorer.Options{CatalogCheckDense: true,
		OnField: func(f scorer.FieldResult) {
			if f.Elapsed > 0 {
				streamed = append(streamed, f.Name)
			}
		},
		OnCatalogStep: func(field string, names []string, st scorer.CatalogStep) {
			if field == "tools" {
				live = append(live, names)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	f := res.Fields[0]
	if len(f.Names) != 2 || f.Names[0] == f.Names[1] || len(f.Steps) == 0 || !slices.Contains(streamed, "tools") {
		t.Fatalf("tools field %+v, streamed %v", f, streamed)
	}
	if len(live) != len(f.Steps) || !slices.Equal(live[len(live)-1], f.Names) || len(live[0]) != 0 {
		t.Fatalf("live steps %v for %d steps, names %v", live, len(f.Steps), f.Names)
	}
	if tm := f.CatalogTiming; tm == nil || tm.Tokens != len(f.Steps) || tm.DenseHeadMsPerToken <= 0 || tm.DenseMaxRelGap != 0 {
		t.Fatalf("catalog timing %+v", f.CatalogTiming)
	}
	// The same decode alone: the prompt, then the key.
	prompt := tok.Encode(s.Prompt(input, gemmaChat) + `{"tools":`)
	var entries []catalog.Entry
	for _, o := range s.Fields[0].Options {
		entries = append(entries, catalog.Entry{Name: o.Name})
	}
	sep, _ := tok.Lookup("\n")
	cat, err := catalog.Compile(entries, tok, catalog.Grammar{Sep: sep, SepText: "\n", Stop: tok.EndOfTurn()})
	if err != nil {
		t.Fatal(err)
	}
	alone, err := catalog.Decode(context.Background(), m, cat, catalog.Request{Prompt: prompt, K: 2}, catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(alone.Names, f.Names) || len(alone.Steps) != len(f.Steps) {
		t.Fatalf("scorer %v, alone %v", f.Names, alone.Names)
	}
	for i, st := range alone.Steps {
		p := st.Probs()
		for j, id := range st.Legal {
			k := slices.IndexFunc(f.Steps[i].Tokens, func(tp scorer.TokenProb) bool { return tp.ID == id })
			if k < 0 || f.Steps[i].Tokens[k].P != p[j] {
				t.Fatalf("step %d token %d: scorer %+v, alone p %v", i, id, f.Steps[i].Tokens, p[j])
			}
		}
	}
	if !strings.HasPrefix(string(res.Answer), `{"tools": ["`+f.Names[0]+`", "`+f.Names[1]+`"], "priority": "`) {
		t.Fatalf("answer %s", res.Answer)
	}

	// Under the catalog backend the choice field is a 1-of-n decode: its
	// candidates partition the probability; "high"/"higher" share a token.
	res2, err := sc.Score(context.Background(), s, input, scorer.Options{Backend: scorer.BackendCatalog})
	if err != nil {
		t.Fatal(err)
	}
	pr := res2.Fields[1]
	if pr.Winner == "" || len(pr.Names) != 1 || len(pr.Decisions) != 1 {
		t.Fatalf("priority under the catalog backend: %+v", pr)
	}
	sum := 0.0
	for _, c := range pr.Decisions[0].Candidates {
		sum += c.Probability
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Fatalf("candidates sum to %v: %+v", sum, pr.Decisions[0].Candidates)
	}
	if !slices.Equal(res2.Fields[0].Names, f.Names) || res2.Fields[2].PTrue == nil {
		t.Fatalf("other fields changed under the catalog backend: %+v", res2.Fields)
	}
	// Decoded in one batch with the priority field, the tools field is
	// bit-identical to its decode beside no other.
	for i, st := range res2.Fields[0].Steps {
		if !slices.Equal(st.Tokens, f.Steps[i].Tokens) {
			t.Fatalf("step %d: batched with another field %+v, alone %+v", i, st.Tokens, f.Steps[i].Tokens)
		}
	}
	if _, err := sc.Score(context.Background(), s, input, scorer.Options{Backend: "head"}); err == nil {
		t.Fatal("an unknown backend was accepted")
	}
}

func TestCatalogSchemaErrors(t *testing.T) {
	for _, c := range []struct{ schema, want string }{
		{`{"fields":[{"name":"t","question":"?","type":"catalog","entries":{"a":"","b":""},"k":3}]}`, "k must be 1..2"},
		{`{"fields":[{"name":"t","question":"?","type":"catalog","entries":{"a":""}}]}`, "k = 0"},
		{`{"fields":[{"name":"t","question":"?","type":"catalog","k":1}]}`, "at least 1 entry"},
		{`{"fields":[{"name":"t","question":"?","type":"choice","options":["a","b"],"k":1}]}`, "k is for catalog fields only"},
	} {
		if _, err := scorer.ParseSchema([]byte(c.schema)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.schema, err, c.want)
		}
	}
}
