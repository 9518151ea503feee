package gemma4_test

import (
	"context"
	"math"
	"slices"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma4"
	"verdict/engine/scorer"
)

const schemaJSON = `{"fields":[
 {"name":"priority","question":"How urgent?","type":"choice","options":["low","medium","high"]},
 {"name":"refund","question":"Refund asked?","type":"bool"},
 {"name":"issues","question":"Which?","type":"independent","labels":["late","broken"]},
 {"name":"anger","question":"Anger 1-3?","type":"score","levels":["1","2","3"]}]}`

// TestScorerOnGemma4: the scorer scores a schema on the tiny Gemma 4 model
// through the model interface (the test tokenizer, testdata/tokenizer.json),
// and every candidate's log-likelihood equals the one a direct Forward over
// the prompt, the key and the value gives.
func TestScorerOnGemma4(t *testing.T) {
	for _, name := range []string{"gemma4-synthetic-tiny", "gemma4-synthetic-tiny-moe"} {
		t.Run(name, func(t *testing.T) {
			fx, err := gemma4.OpenFixture(testmodel.Dir(t, name+".tar.gz"))
			if err != nil {
				t.Fatal(err)
			}
			defer fx.Close()
			ref, err := fx.Load()
			if err != nil {
				t.Fatal(err)
			}
			d, err := gemma4.NewDecoder(ref, gemma4.Options{KVPositions: 8192})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			s, err := scorer.ParseSchema([]byte(schemaJSON))
			if err != nil {
				t.Fatal(err)
			}
			sc := scorer.New(d, testTokenizer(t))
			const input = "My parcel came late and broken; I want my money back."
			r, err := sc.Score(context.Background(), s, input, scorer.Options{TokenLogprobs: true})
			if err != nil {
				t.Fatal(err)
			}
			prefix, rows, err := sc.Rows(s, input)
			if err != nil {
				t.Fatal(err)
			}
			var decisions []scorer.Decision
			for _, f := range r.Fields {
				decisions = append(decisions, f.Decisions...)
			}
			if len(decisions) != len(rows) || len(decisions) != s.Decisions() {
				t.Fatalf("%d decisions scored, %d in the rows, the schema has %d", len(decisions), len(rows), s.Decisions())
			}
			V, D := d.Config().Vocab, d.Config().Hidden
			worst := 0.0
			for i, dec := range decisions {
				if len(dec.Candidates) != len(rows[i]) {
					t.Fatalf("decision %s: %d candidates, %d rows", dec.Name, len(dec.Candidates), len(rows[i]))
				}
				var got, want []float64
				for j, row := range rows[i] {
					cand := dec.Candidates[j]
					got = append(got, cand.LogLikelihood)
					k := len(cand.TokenLogprobs) // the row's last k tokens are scored
					if k == 0 || k > len(row) {
						t.Fatalf("%s = %s: %d token log-probabilities for a row of %d", dec.Name, cand.Value, k, len(row))
					}
					ids := append(slices.Clone(prefix), row...)
					h, err := d.Forward(nil, ids, nil)
					if err != nil {
						t.Fatal(err)
					}
					n := len(ids)
					lg, err := d.Logits(h[(n-k-1)*D:(n-1)*D], k)
					if err != nil {
						t.Fatal(err)
					}
					var sum float64
					for p := range k {
						l := lg[p*V : (p+1)*V]
						mx := math.Inf(-1)
						for _, v := range l {
							mx = math.Max(mx, float64(v))
						}
						var z float64
						for _, v := range l {
							z += math.Exp(float64(v) - mx)
						}
						sum += float64(l[ids[n-k+p]]) - mx - math.Log(z)
					}
					want = append(want, sum)
				}
				// Candidates may be reported in another order than the rows:
				// compare the sets.
				slices.Sort(got)
				slices.Sort(want)
				for j := range got {
					e := math.Abs(got[j] - want[j])
					worst = math.Max(worst, e)
					if !(e <= 1e-5) {
						t.Errorf("%s: log-likelihood %.7f, a direct Forward gives %.7f", dec.Name, got[j], want[j])
					}
				}
			}
			t.Logf("%d decisions, largest log-likelihood difference against a direct Forward %.3g", len(decisions), worst)

			// The catalog backend decodes the choice field through the
			// catalog's sparse head (CatalogHead, LogitsRows) and a Loop
			// run from the host; its winner is an option.
			rc, err := sc.Score(context.Background(), s, input, scorer.Options{Backend: scorer.BackendCatalog})
			if err != nil {
				t.Fatal(err)
			}
			if w := rc.Fields[0].Winner; !slices.Contains([]string{"low", "medium", "high"}, w) || len(rc.Fields[0].Names) != 1 {
				t.Errorf("the catalog backend's priority: winner %q, names %v", w, rc.Fields[0].Names)
			}
		})
	}
}
