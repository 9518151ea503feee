package scorer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"verdict/engine/model"
)

// BackendHead scores with a trained decision head (package head): the json
// backend runs first, then the head replaces every likelihood-scored
// decision's distribution with its own.
const BackendHead = "head"

// DecisionHead rescores a json result: it sets the Probability of every
// candidate of the decisions it scores (package head implements it).
type DecisionHead interface {
	// Check refuses a head trained for another model or schema.
	Check(sc *Scorer, s *Schema) error
	// Rescore returns, per decision name, one score per candidate (in the
	// result's candidate order), normalised by softmax, and a sentence for
	// the result's probability source.
	Rescore(ctx context.Context, sc *Scorer, s *Schema, input string, res *Result) (map[string][]float64, string, error)
}

// ErrNoHead is the head backend asked for without a head.
var ErrNoHead = errors.New("scorer: the head backend needs a trained decision head (verdict train-head, then --head FILE)")

// Model returns the scorer's model.
func (sc *Scorer) Model() model.Model { return sc.m }

// DecisionTokens is one likelihood-scored decision as the json backend
// compiles it: the tokens every candidate shares after the prompt (its JSON
// key and any common leading value tokens) and each candidate's rest.
type DecisionTokens struct {
	Name   string // "field" or "field.label"
	Field  int    // index in Schema.Fields
	Values []string
	Shared []int32
	// Key is the number of Shared's tokens that are the JSON key (the
	// rest are value tokens all candidates begin with).
	Key   int
	Cands [][]int32
}

// Tokens compiles s for a text input: the prompt's token ids and every
// decision the json backend scores by likelihood (catalog fields excluded).
func (sc *Scorer) Tokens(s *Schema, input string) ([]int32, []DecisionTokens, error) {
	if err := s.Validate(); err != nil {
		return nil, nil, err
	}
	comp, _, err := sc.compileCached(s.MediaPrompt(input, nil, false, sc.m.Chat()), s.decisions())
	if err != nil {
		return nil, nil, err
	}
	out := make([]DecisionTokens, len(comp.decisions))
	for i, d := range comp.decisions {
		key := commonPrefix(d.shared, sc.tok.EncodePlain(d.key))
		out[i] = DecisionTokens{Name: d.name, Field: d.field, Values: d.values, Shared: d.shared, Key: max(key, 1), Cands: d.cands}
	}
	return comp.prefixIDs, out, nil
}

// ExampleLabels pairs an example's labels with the decisions of a json
// result of its text: the index of the right candidate, per decision name.
func ExampleLabels(s *Schema, res *Result, e Example) (map[string]int, error) {
	obs, err := observe(s, res, e)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(obs))
	for _, o := range obs {
		out[o.name] = o.y
	}
	return out, nil
}

// scoreHead is the head backend: the json result, its distributions
// replaced by the head's.
func (sc *Scorer) scoreHead(ctx context.Context, s *Schema, input string, opt Options) (*Result, error) {
	start := time.Now()
	if opt.Head == nil {
		return nil, ErrNoHead
	}
	if opt.Media != nil {
		return nil, fmt.Errorf("scorer: the head backend scores text inputs only (no image, audio or video)")
	}
	if opt.Calibration != nil {
		return nil, fmt.Errorf("scorer: a calibration does not apply to the head backend (a head is trained on labels already)")
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if err := opt.Head.Check(sc, s); err != nil {
		return nil, err
	}
	jopt := opt
	jopt.Backend, jopt.Head, jopt.OnField = BackendJSON, nil, nil
	res, err := sc.Score(ctx, s, input, jopt)
	if err != nil {
		return nil, err
	}
	scores, source, err := opt.Head.Rescore(ctx, sc, s, input, res)
	if err != nil {
		return nil, err
	}
	T := opt.Temperature
	if T == 0 {
		T = 1
	}
	if err := res.redistribute(s, scores, T); err != nil {
		return nil, err
	}
	res.ProbabilitySource = source
	res.Answer = assemble(s, res.Fields)
	res.Timings.Total = Duration(time.Since(start))
	if opt.OnField != nil {
		for _, f := range res.Fields {
			opt.OnField(f)
		}
	}
	return res, nil
}

// redistribute sets every scored decision's probabilities to softmax(s/T)
// of its head scores and recomputes the field summaries and confidences.
// Decoded (catalog) fields are left as they are.
func (r *Result) redistribute(s *Schema, scores map[string][]float64, T float64) error {
	for fi := range r.Fields {
		fr := &r.Fields[fi]
		field := s.Fields[fi]
		if field.Kind == Catalog {
			continue
		}
		for di := range fr.Decisions {
			d := &fr.Decisions[di]
			sc, ok := scores[d.Name]
			if !ok || len(sc) != len(d.Candidates) {
				return fmt.Errorf("scorer: the head gave %d scores for decision %q of %d candidates", len(sc), d.Name, len(d.Candidates))
			}
			p := Softmax(sc, T)
			var ent float64
			for j := range d.Candidates {
				d.Candidates[j].Probability = p[j]
				if p[j] > 0 {
					ent -= p[j] * math.Log(p[j])
				}
			}
			d.Temperature, d.Confidence = T, 1
			if len(p) > 1 {
				d.Confidence = 1 - ent/math.Log(float64(len(p)))
			}
		}
		summarize(&field, fr) // the allowed token masses stay the json backend's
	}
	return nil
}
