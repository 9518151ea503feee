package gemma4_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma4"
	"verdict/engine/scorer"
)

// tinyNames are the Gemma 4 fixtures the backends run on: dense (per-layer
// inputs, KV sharing, the small chat template) and mixture of experts (the
// large template, whose generation prompt closes a thought channel).
var tinyNames = []string{"gemma4-synthetic-tiny", "gemma4-synthetic-tiny-moe"}

// openTiny loads a fixture's plain-Go reference and a Decoder over the same
// weights on the CPU backend, closed when the test ends.
func openTiny(t testing.TB, name string) (*gemma4.Model, *gemma4.Decoder) {
	t.Helper()
	fx, err := gemma4.OpenFixture(testmodel.Dir(t, name+".tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fx.Close() })
	ref, err := fx.Load()
	if err != nil {
		t.Fatal(err)
	}
	d, err := gemma4.NewDecoder(ref, gemma4.Options{KVPositions: 8192})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return ref, d
}

// lastLogprobs runs ids through the Decoder in one Forward (a cache of its
// own) and returns the log-softmax of the last position's logits, in
// float64. bump, when not nil, changes the logits first (the perturbation
// tests).
func lastLogprobs(t testing.TB, d *gemma4.Decoder, ids []int32, bump func([]float32)) []float64 {
	t.Helper()
	h, err := d.Forward(nil, ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	D := d.Config().Hidden
	lg, err := d.Logits(h[len(h)-D:], 1)
	if err != nil {
		t.Fatal(err)
	}
	if bump != nil {
		bump(lg)
	}
	return logSoftmax(lg)
}

func logSoftmax(lg []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range lg {
		mx = math.Max(mx, float64(v))
	}
	var z float64
	for _, v := range lg {
		z += math.Exp(float64(v) - mx)
	}
	out := make([]float64, len(lg))
	for i, v := range lg {
		out[i] = float64(v) - mx - math.Log(z)
	}
	return out
}

// cachedCase is one decision of the cached backend written out by hand:
// the text after the prompt whose last output scores the codes, and each
// candidate value's code.
type cachedCase struct {
	name   string
	suffix string
	codes  map[string]string // value → code text after the suffix
}

// cachedCases are schemaJSON's decisions under the cached backend: the
// choice and score fields answer a letter after `{"field": "`, the bool and
// each label of the independent field " true" or " false" after the key.
func cachedCases() []cachedCase {
	tf := map[string]string{"true": " true", "false": " false"}
	return []cachedCase{
		{"priority", `{"priority": "`, map[string]string{"low": "A", "medium": "B", "high": "C"}},
		{"refund", `{"refund":`, tf},
		{"issues.late", `{"issues": {"late":`, tf},
		{"issues.broken", `{"issues": {"broken":`, tf},
		{"anger", `{"anger": "`, map[string]string{"1": "A", "2": "B", "3": "C"}},
	}
}

// cachedPrompt is the cached backend's prompt for schemaJSON, written from
// the json backend's: the choice and score fields list their codes
// (docs/scorer.md's format).
func cachedPrompt(t testing.TB, s *scorer.Schema, input string, d *gemma4.Decoder) string {
	t.Helper()
	p := s.Prompt(input, d.Chat())
	for _, r := range [][2]string{
		{`One of: "low", "medium", "high".`, `One of (answer its code): A="low", B="medium", C="high".`},
		{`An integer from 1 to 3.`, `One of, from lowest to highest (answer its code): A=1, B=2, C=3.`},
	} {
		if strings.Count(p, r[0]) != 1 {
			t.Fatalf("the json prompt does not hold %q once:\n%s", r[0], p)
		}
		p = strings.Replace(p, r[0], r[1], 1)
	}
	return p
}

// cachedDirect computes every cached decision's candidate log-likelihoods
// from direct Forwards: the log-probability of the code's token after the
// prompt and the suffix. swap exchanges the first two codes' tokens and
// bump changes the logits (the perturbation tests).
func cachedDirect(t testing.TB, d *gemma4.Decoder, tok g4Tok, prompt string, swap bool, bump func([]float32)) map[string]map[string]float64 {
	t.Helper()
	out := map[string]map[string]float64{}
	for _, c := range cachedCases() {
		ids := tok.Encode(prompt + c.suffix)
		lp := lastLogprobs(t, d, ids, bump)
		code := map[string]int32{}
		var values []string
		for v, cd := range c.codes {
			full := tok.Encode(prompt + c.suffix + cd)
			if len(full) != len(ids)+1 || !slices.Equal(full[:len(ids)], ids) {
				t.Fatalf("%s: code %q is not one token after the suffix (%d then %d tokens)", c.name, cd, len(ids), len(full))
			}
			code[v] = full[len(ids)]
			values = append(values, v)
		}
		slices.Sort(values)
		if swap {
			code[values[0]], code[values[1]] = code[values[1]], code[values[0]]
		}
		out[c.name] = map[string]float64{}
		for _, v := range values {
			out[c.name][v] = lp[code[v]]
		}
	}
	return out
}

// compareLL returns the largest gap between a result's candidate
// log-likelihoods and want's, and an error naming the first one over tol
// (or a decision or value missing from either side).
func compareLL(res *scorer.Result, want map[string]map[string]float64, tol float64) (float64, error) {
	worst, seen := 0.0, 0
	var first error
	for _, f := range res.Fields {
		for _, dec := range f.Decisions {
			w, ok := want[dec.Name]
			if !ok || len(w) != len(dec.Candidates) {
				return math.Inf(1), fmt.Errorf("decision %s: %d candidates, the direct computation has %d", dec.Name, len(dec.Candidates), len(w))
			}
			seen++
			for _, c := range dec.Candidates {
				x, ok := w[c.Value]
				if !ok {
					return math.Inf(1), fmt.Errorf("decision %s: value %q has no direct log-likelihood", dec.Name, c.Value)
				}
				e := math.Abs(c.LogLikelihood - x)
				worst = math.Max(worst, e)
				if !(e <= tol) && first == nil {
					first = fmt.Errorf("%s = %s: log-likelihood %.7f, direct %.7f (gap %.3g > %.3g)", dec.Name, c.Value, c.LogLikelihood, x, e, tol)
				}
			}
		}
	}
	if seen != len(want) {
		return math.Inf(1), fmt.Errorf("%d decisions in the result, %d computed directly", seen, len(want))
	}
	return worst, first
}

// directTol bounds a backend's log-likelihood against a direct Forward of
// the whole sequence through the same Decoder: the same float32 kernels,
// the prefix computed once and forked rather than whole.
const directTol = 1e-5

// jsonTol bounds the cached backend's distributions against the json
// backend's where both score the same tokens after the same prompt (the
// Gemma 3n cached tests' tolerance, engine/scorer/cached_test.go).
const jsonTol = 1e-4

const g4Input = "My parcel came late and broken; I want my money back."

// TestCachedOnGemma4: the cached backend on the tiny dense and MoE Gemma 4.
// Every candidate's log-likelihood is its code token's log-probability in a
// direct Forward of the whole prompt + suffix through the Decoder (within
// directTol); on a schema without coded fields (the same prompt as json)
// its distributions are the json backend's (within jsonTol). A candidate's
// token swapped or one logit moved by 1e-4 in the direct computation fails
// the check.
func TestCachedOnGemma4(t *testing.T) {
	ctx := context.Background()
	tok := testTokenizer(t)
	s, err := scorer.ParseSchema([]byte(schemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	boolsOnly, err := scorer.ParseSchema([]byte(`{"fields":[
 {"name":"refund","question":"Refund asked?","type":"bool"},
 {"name":"issues","question":"Which?","type":"independent","labels":["late","broken"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range tinyNames {
		t.Run(name, func(t *testing.T) {
			_, d := openTiny(t, name)
			sc := scorer.New(d, tok)
			res, err := sc.Score(ctx, s, g4Input, scorer.Options{Backend: scorer.BackendCached, BranchBatch: 3})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(res.ProbabilitySource, "cached") || res.BranchRows != s.Decisions() {
				t.Fatalf("source %q, %d branch rows for %d decisions", res.ProbabilitySource, res.BranchRows, s.Decisions())
			}
			prompt := cachedPrompt(t, s, g4Input, d)
			worst, err := compareLL(res, cachedDirect(t, d, tok, prompt, false, nil), directTol)
			if err != nil {
				t.Fatal(err)
			}
			for _, dec := range resDecisions(res) {
				var sum float64
				for _, c := range dec.Candidates {
					sum += c.Probability
				}
				if math.Abs(sum-1) > 1e-9 {
					t.Errorf("%s: probabilities sum to %v", dec.Name, sum)
				}
			}
			// The checks catch a wrong token or a moved logit.
			if _, err := compareLL(res, cachedDirect(t, d, tok, prompt, true, nil), directTol); err == nil {
				t.Error("the codes' tokens swapped: the check passed")
			}
			code, _ := tok.Lookup("A")
			bump := func(lg []float32) { lg[code] += 1e-4 }
			if _, err := compareLL(res, cachedDirect(t, d, tok, prompt, false, bump), directTol); err == nil {
				t.Error("the logit of code A moved by 1e-4: the check passed")
			}

			// Without coded fields the prompt is the json backend's, and so
			// are the distributions.
			cb, err := sc.Score(ctx, boolsOnly, g4Input, scorer.Options{Backend: scorer.BackendCached, BranchBatch: 2})
			if err != nil {
				t.Fatal(err)
			}
			jb, err := sc.Score(ctx, boolsOnly, g4Input, scorer.Options{})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]map[string]float64{}
			wantP := map[string]map[string]float64{}
			for _, dec := range resDecisions(jb) {
				want[dec.Name], wantP[dec.Name] = map[string]float64{}, map[string]float64{}
				for _, c := range dec.Candidates {
					want[dec.Name][c.Value], wantP[dec.Name][c.Value] = c.LogLikelihood, c.Probability
				}
			}
			jworst, err := compareLL(cb, want, jsonTol)
			if err != nil {
				t.Fatal(err)
			}
			pworst := 0.0
			for _, dec := range resDecisions(cb) {
				for _, c := range dec.Candidates {
					e := math.Abs(c.Probability - wantP[dec.Name][c.Value])
					pworst = math.Max(pworst, e)
					if !(e <= jsonTol) {
						t.Errorf("%s = %s: cached probability %.7f, json %.7f", dec.Name, c.Value, c.Probability, wantP[dec.Name][c.Value])
					}
				}
			}
			if string(cb.Answer) != string(jb.Answer) {
				t.Errorf("cached answer %s, json %s", cb.Answer, jb.Answer)
			}
			// The mixed schema's cached prompt lists codes, so its
			// distributions are its own; reported, not checked.
			js, err := sc.Score(ctx, s, g4Input, scorer.Options{})
			if err != nil {
				t.Fatal(err)
			}
			cmp := scorer.Compare(js, res)
			t.Logf("%d decisions: largest log-likelihood gap to a direct Forward %.3g (tolerance %g); bools and labels against json: log-likelihood %.3g, probability %.3g (tolerance %g); the coded schema against json: mean KL %.4f nats, winners agreeing %.0f%%",
				s.Decisions(), worst, directTol, jworst, pworst, jsonTol, cmp.MeanKL, 100*cmp.WinnerAgreement)
		})
	}
}

// resDecisions lists a result's decisions in schema order.
func resDecisions(r *scorer.Result) []scorer.Decision {
	var out []scorer.Decision
	for _, f := range r.Fields {
		out = append(out, f.Decisions...)
	}
	return out
}
