package scorer_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/scorer"
)

func near(a, b []float64, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > tol {
			return false
		}
	}
	return true
}

// TestCorrectionMath: a distribution made of a known truth times a known
// prior comes back as the truth, under either correction.
func TestCorrectionMath(t *testing.T) {
	for _, tc := range []struct{ truth, prior []float64 }{
		{[]float64{0.25, 0.25, 0.25, 0.25}, []float64{0.7, 0.1, 0.1, 0.1}},
		{[]float64{0.6, 0.3, 0.1}, []float64{0.05, 0.15, 0.8}},
		{[]float64{0.9, 0.1}, []float64{0.5, 0.5}},
	} {
		p := make([]float64, len(tc.truth))
		var z float64
		for i := range p {
			p[i] = tc.truth[i] * tc.prior[i]
			z += p[i]
		}
		for i := range p {
			p[i] /= z
		}
		if q := scorer.ContextualCorrect(p, tc.prior); !near(q, tc.truth, 1e-12) {
			t.Errorf("contextual: %v / %v = %v, want %v", p, tc.prior, q, tc.truth)
		}
		// PMI: log-likelihoods are log truth plus the neutral premise's
		// (unnormalised) log-likelihoods, at temperature 2 and 1.
		for _, T := range []float64{1, 2} {
			s, neutral := make([]float64, len(p)), make([]float64, len(p))
			for i := range s {
				neutral[i] = T*math.Log(tc.prior[i]) - 3
				s[i] = T*math.Log(tc.truth[i]) + neutral[i] - 1.5
			}
			if q := scorer.PMICorrect(s, neutral, T); !near(q, tc.truth, 1e-12) {
				t.Errorf("pmi at T=%g: %v, want %v", T, q, tc.truth)
			}
		}
	}
	m := scorer.MeanDistribution([][]float64{{0.2, 0.8}, {0.6, 0.4}, {0.1, 0.9}})
	if !near(m, []float64{0.3, 0.7}, 1e-12) {
		t.Errorf("mean %v", m)
	}
}

func decisionProbs(r *scorer.Result) [][]float64 {
	var out [][]float64
	for _, f := range r.Fields {
		for _, d := range f.Decisions {
			var p []float64
			for _, c := range d.Candidates {
				p = append(p, c.Probability)
			}
			out = append(out, p)
		}
	}
	return out
}

// TestContextualEndToEnd: on the built-in model the corrected distribution
// is the raw one divided by the mean of the content-free inputs' and
// renormalised; both are kept, and the summary follows the corrected one.
func TestContextualEndToEnd(t *testing.T) {
	m, tk, s := testmodel.Tiny(t), testmodel.Tokenizer(t), ticketSchema(t)
	sc := scorer.New(m, tk)
	ctx := context.Background()
	for _, backend := range []string{scorer.BackendJSON, scorer.BackendCached} {
		opt := scorer.Options{Backend: backend, Temperature: 0.7}
		raw, err := sc.Score(ctx, s, ticket, opt)
		if err != nil {
			t.Fatal(err)
		}
		var priors [][][]float64
		for _, in := range []string{"N/A", "", "[MASK]"} {
			r, err := sc.Score(ctx, s, in, opt)
			if err != nil {
				t.Fatal(err)
			}
			priors = append(priors, decisionProbs(r))
		}
		opt.Normalize = scorer.NormalizeContextual
		streamed := map[string]scorer.FieldResult{}
		opt.OnField = func(f scorer.FieldResult) { streamed[f.Name] = f }
		got, err := sc.Score(ctx, s, ticket, opt)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(got.ProbabilitySource, "contextual calibration") || len(got.RawAnswer) == 0 {
			t.Fatalf("%s: source %q, raw answer %s", backend, got.ProbabilitySource, got.RawAnswer)
		}
		rawP, gotP := decisionProbs(raw), decisionProbs(got)
		k, changed := 0, 0
		for fi, f := range got.Fields {
			for _, d := range f.Decisions {
				prior := scorer.MeanDistribution([][]float64{priors[0][k], priors[1][k], priors[2][k]})
				want := scorer.ContextualCorrect(rawP[k], prior)
				if !near(gotP[k], want, 1e-9) || d.Correction == nil || !near(d.Correction.RawProbabilities, rawP[k], 1e-12) ||
					!near(d.Correction.PriorProbabilities, prior, 1e-12) {
					t.Errorf("%s %s: corrected %v, want %v (correction %+v)", backend, d.Name, gotP[k], want, d.Correction)
				}
				if !near(gotP[k], rawP[k], 1e-3) {
					changed++
				}
				k++
			}
			if s.Fields[fi].Kind == scorer.Choice {
				best := f.Decisions[0].Candidates[0]
				for _, c := range f.Decisions[0].Candidates {
					if c.Probability > best.Probability {
						best = c
					}
				}
				if f.Winner != best.Value {
					t.Errorf("%s %s: winner %q, most probable corrected %q", backend, f.Name, f.Winner, best.Value)
				}
			}
			if sf := streamed[f.Name]; sf.Name != f.Name || !near(decisionProbs(&scorer.Result{Fields: []scorer.FieldResult{sf}})[0], decisionProbs(&scorer.Result{Fields: []scorer.FieldResult{f}})[0], 1e-12) {
				t.Errorf("%s %s: the streamed field differs from the result's", backend, f.Name)
			}
		}
		if changed == 0 {
			t.Errorf("%s: no distribution changed", backend)
		}
		// The reference results are kept: another input reuses the prior.
		n := sc.PriorsCached()
		again, err := sc.Score(ctx, s, "Thanks, all good.", opt)
		if err != nil {
			t.Fatal(err)
		}
		if sc.PriorsCached() != n || !near(again.Fields[0].Decisions[0].Correction.PriorProbabilities, got.Fields[0].Decisions[0].Correction.PriorProbabilities, 0) {
			t.Errorf("%s: %d cached priors, then %d; prior %v then %v", backend, n, sc.PriorsCached(),
				got.Fields[0].Decisions[0].Correction.PriorProbabilities, again.Fields[0].Decisions[0].Correction.PriorProbabilities)
		}
	}
	if n := sc.PriorsCached(); n != 2 {
		t.Errorf("%d cached priors after two backends, want 2", n)
	}
}

// TestPMIRemovesTheNeutralPrior: the neutral premise scored under PMI is its
// own prior: every corrected distribution is uniform, whatever the raw one.
func TestPMIRemovesTheNeutralPrior(t *testing.T) {
	m, tk, s := testmodel.Tiny(t), testmodel.Tokenizer(t), ticketSchema(t)
	sc := scorer.New(m, tk)
	for _, backend := range []string{scorer.BackendJSON, scorer.BackendCached} {
		res, err := sc.Score(context.Background(), s, scorer.NeutralInput, scorer.Options{Backend: backend, Normalize: scorer.NormalizePMI})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(res.ProbabilitySource, "PMI") {
			t.Errorf("source %q", res.ProbabilitySource)
		}
		for _, f := range res.Fields {
			for _, d := range f.Decisions {
				n := len(d.Candidates)
				for _, c := range d.Candidates {
					if math.Abs(c.Probability-1/float64(n)) > 1e-9 {
						t.Errorf("%s %s: %s has %v, want 1/%d", backend, d.Name, c.Value, c.Probability, n)
					}
				}
				if d.Correction == nil || near(d.Correction.RawProbabilities, probsOf(d), 1e-6) {
					t.Errorf("%s %s: raw distribution %+v was already uniform or not kept", backend, d.Name, d.Correction)
				}
			}
		}
	}
	if _, err := sc.Score(context.Background(), s, ticket, scorer.Options{Normalize: "zscore"}); err == nil || !strings.Contains(err.Error(), `unknown normalisation "zscore"`) {
		t.Errorf("unknown normalisation: %v", err)
	}
}

func probsOf(d scorer.Decision) []float64 {
	var p []float64
	for _, c := range d.Candidates {
		p = append(p, c.Probability)
	}
	return p
}
