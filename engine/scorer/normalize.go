package scorer

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Scoring corrections (Options.Normalize). A model's answers lean towards
// some values whatever the input says; both corrections estimate that lean
// from inputs that say nothing and divide it out.
//
//   - contextual (Zhao et al. 2021, "Calibrate before use"): the schema is
//     scored on the content-free inputs of ContentFreeInputs; the mean of
//     their distributions is each decision's prior p̄, and the corrected
//     distribution is q(c) ∝ p(c) / p̄(c).
//   - pmi (Holtzman et al. 2021, "Surface form competition"): each
//     candidate's likelihood is divided by its likelihood under a neutral
//     premise, the prompt with the input replaced by NeutralInput:
//     q(c) ∝ exp((s(c) − s₀(c)) / T).
//
// Both run the request and its reference inputs with the same backend,
// temperature and calibration; the reference inputs carry no media. Fields
// decoded through a trie (catalog fields) are left as they are.

// ContentFreeInputs are the inputs contextual calibration averages.
var ContentFreeInputs = []string{"N/A", "", "[MASK]"}

// NeutralInput is the premise of domain-conditional PMI.
const NeutralInput = "Answer:"

// Correction is what a normalisation did to one decision: the distribution
// before it and the reference it divided out.
type Correction struct {
	Method string `json:"method"`
	// RawProbabilities is the uncorrected distribution, per candidate.
	RawProbabilities []float64 `json:"raw_probabilities"`
	RawConfidence    float64   `json:"raw_confidence"`
	// PriorProbabilities (contextual) is the mean distribution on the
	// content-free inputs.
	PriorProbabilities []float64 `json:"prior_probabilities,omitempty"`
	// NeutralLogLikelihoods (pmi) are the candidates' log-likelihoods under
	// the neutral premise.
	NeutralLogLikelihoods []float64 `json:"neutral_log_likelihoods,omitempty"`
}

// ContextualCorrect divides distribution p by prior and renormalises.
func ContextualCorrect(p, prior []float64) []float64 {
	q := make([]float64, len(p))
	var sum float64
	for i := range p {
		q[i] = p[i] / math.Max(prior[i], 1e-300)
		sum += q[i]
	}
	for i := range q {
		q[i] /= sum
	}
	return q
}

// PMICorrect is the distribution of the log-likelihoods s less the neutral
// ones at temperature T.
func PMICorrect(s, neutral []float64, T float64) []float64 {
	d := make([]float64, len(s))
	for i := range s {
		d[i] = s[i] - neutral[i]
	}
	return Softmax(d, T)
}

// MeanDistribution averages distributions of the same candidates.
func MeanDistribution(ps [][]float64) []float64 {
	m := make([]float64, len(ps[0]))
	for _, p := range ps {
		for i, v := range p {
			m[i] += v / float64(len(ps))
		}
	}
	return m
}

// Confidence is 1 − the normalised entropy of p.
func Confidence(p []float64) float64 {
	if len(p) < 2 {
		return 1
	}
	var h float64
	for _, v := range p {
		if v > 0 {
			h -= v * math.Log(v)
		}
	}
	return 1 - h/math.Log(float64(len(p)))
}

func normalizeSource(method string) string {
	if method == NormalizeContextual {
		return "corrected by contextual calibration: each distribution divided by its mean on the content-free inputs \"N/A\", \"\" and \"[MASK]\", renormalised (Zhao et al. 2021)"
	}
	return "corrected by domain-conditional PMI: each candidate's log-likelihood less its log-likelihood with the input replaced by \"Answer:\" (Holtzman et al. 2021)"
}

// normalized scores the reference inputs, then the request, correcting every
// field (also those streamed to OnField).
func (sc *Scorer) normalized(ctx context.Context, s *Schema, input string, opt Options) (*Result, error) {
	method := opt.Normalize
	ref := opt
	ref.Normalize, ref.Media, ref.OnField, ref.OnStage, ref.OnPrefill, ref.OnCatalogStep, ref.TokenLogprobs = "", nil, nil, nil, nil, nil, false
	inputs := ContentFreeInputs
	if method == NormalizePMI {
		inputs = []string{NeutralInput}
	}
	start := time.Now()
	key, err := priorKey(s, method, ref)
	if err != nil {
		return nil, err
	}
	refs, ok := sc.priors.get(key)
	if !ok {
		for _, in := range inputs {
			r, err := sc.Score(ctx, s, in, ref)
			if err != nil {
				return nil, fmt.Errorf("scorer: %s reference input %q: %w", method, in, err)
			}
			refs = append(refs, r)
		}
		sc.priors.put(key, refs)
	}
	raw := opt
	raw.Normalize = ""
	if opt.OnField != nil {
		raw.OnField = func(f FieldResult) {
			if i := s.field(f.Name); i >= 0 {
				f.Decisions = cloneDecisions(f.Decisions)
				f.Labels = append([]LabelResult(nil), f.Labels...)
				correctField(&s.Fields[i], &f, refFields(refs, i), method)
			}
			opt.OnField(f)
		}
	}
	res, err := sc.Score(ctx, s, input, raw)
	if err != nil {
		return nil, err
	}
	res.RawAnswer = assemble(s, res.Fields)
	for i := range res.Fields {
		correctField(&s.Fields[i], &res.Fields[i], refFields(refs, i), method)
	}
	res.Answer = assemble(s, res.Fields)
	res.ProbabilitySource += "; " + normalizeSource(method)
	res.Timings.Total = Duration(time.Since(start)) // the reference requests included
	return res, nil
}

// priorKey identifies the reference results of a correction: the schema,
// the method and what changes their distributions (backend, temperature,
// calibration).
func priorKey(s *Schema, method string, opt Options) (string, error) {
	b, err := json.Marshal(struct {
		S    *Schema
		M, B string
		T    float64
		C    *Calibration
	}{s, method, opt.Backend, opt.Temperature, opt.Calibration})
	if err != nil {
		return "", fmt.Errorf("scorer: %w", err)
	}
	return string(b), nil
}

// priorCache keeps the reference results of the latest corrections, most
// recent first (they depend on the schema, not on the input).
type priorCache struct {
	mu   sync.Mutex
	max  int
	keys []string
	refs map[string][]*Result
}

func newPriorCache(max int) *priorCache {
	return &priorCache{max: max, refs: map[string][]*Result{}}
}

func (c *priorCache) get(key string) ([]*Result, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.refs[key]
	if ok {
		c.touch(key)
	}
	return r, ok
}

func (c *priorCache) put(key string, refs []*Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.refs[key]; !ok {
		c.keys = append(c.keys, key)
	}
	c.refs[key] = refs
	c.touch(key)
	for len(c.keys) > c.max {
		delete(c.refs, c.keys[len(c.keys)-1])
		c.keys = c.keys[:len(c.keys)-1]
	}
}

// touch moves key to the front.
func (c *priorCache) touch(key string) {
	i := slices.Index(c.keys, key)
	copy(c.keys[1:i+1], c.keys[:i])
	c.keys[0] = key
}

func (c *priorCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.refs)
}

func refFields(refs []*Result, i int) []FieldResult {
	out := make([]FieldResult, len(refs))
	for k, r := range refs {
		out[k] = r.Fields[i]
	}
	return out
}

func cloneDecisions(ds []Decision) []Decision {
	out := make([]Decision, len(ds))
	for i, d := range ds {
		out[i] = d
		out[i].Candidates = append([]Candidate(nil), d.Candidates...)
	}
	return out
}

// correctField applies method to every decision of fr with the reference
// results of the same field, then recomputes the field's summary. Fields a
// trie decoded are left alone.
func correctField(f *Field, fr *FieldResult, refs []FieldResult, method string) {
	if fr.Steps != nil || len(fr.Decisions) == 0 {
		return
	}
	for k := range fr.Decisions {
		d := &fr.Decisions[k]
		n := len(d.Candidates)
		p, s := make([]float64, n), make([]float64, n)
		for j, c := range d.Candidates {
			p[j], s[j] = c.Probability, c.LogLikelihood
		}
		corr := &Correction{Method: method, RawProbabilities: p, RawConfidence: d.Confidence}
		var q []float64
		if method == NormalizeContextual {
			var ps [][]float64
			for _, r := range refs {
				ps = append(ps, probabilities(r.Decisions[k]))
			}
			corr.PriorProbabilities = MeanDistribution(ps)
			q = ContextualCorrect(p, corr.PriorProbabilities)
		} else {
			for _, c := range refs[0].Decisions[k].Candidates {
				corr.NeutralLogLikelihoods = append(corr.NeutralLogLikelihoods, c.LogLikelihood)
			}
			q = PMICorrect(s, corr.NeutralLogLikelihoods, d.Temperature)
		}
		for j := range d.Candidates {
			d.Candidates[j].Probability = q[j]
		}
		d.Confidence = Confidence(q)
		d.Correction = corr
	}
	summarize(f, fr)
}

func probabilities(d Decision) []float64 {
	p := make([]float64, len(d.Candidates))
	for j, c := range d.Candidates {
		p[j] = c.Probability
	}
	return p
}

// summarize recomputes a field's winner, expected level, p_true, labels and
// confidence from its decisions' distributions.
func summarize(f *Field, fr *FieldResult) {
	fr.Confidence = 1
	for k, d := range fr.Decisions {
		fr.Confidence = math.Min(fr.Confidence, d.Confidence)
		switch f.Kind {
		case Choice, Score:
			best := 0
			for j, c := range d.Candidates {
				if c.Probability > d.Candidates[best].Probability {
					best = j
				}
			}
			fr.Winner = d.Candidates[best].Value
			if f.Kind == Score {
				var e float64
				for j, c := range d.Candidates {
					e += c.Probability * f.Options[j].Value
				}
				fr.ExpectedLevel = &e
			}
		case Bool:
			p := d.Candidates[0].Probability
			fr.PTrue = &p
		case Independent:
			fr.Labels[k].PYes = d.Candidates[0].Probability
			fr.Labels[k].Confidence = d.Confidence
		}
	}
}
