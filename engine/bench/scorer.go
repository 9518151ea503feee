package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"verdict/engine/model"
	"verdict/engine/scorer"
)

// ScorerReport measures one scorer request and its alternatives.
type ScorerReport struct {
	Model          string  `json:"model"`
	PromptTokens   int     `json:"prompt_tokens"`
	Fields         int     `json:"fields"`
	Decisions      int     `json:"decisions"`
	Candidates     int     `json:"candidates"`
	BranchRows     int     `json:"branch_rows"`
	TotalSeconds   float64 `json:"total_seconds"`
	PrefillSeconds float64 `json:"prefill_seconds"`
	// PrefixReused counts the prompt tokens the measured request took from
	// an earlier one: 0, as every timed request first drops what the
	// scorer kept (Scorer.DropKept), so that each prefills its prefix.
	PrefixReused  int     `json:"prefix_reused_tokens"`
	PrefillShare  float64 `json:"prefill_share"`
	DecisionsPerS float64 `json:"decisions_per_second"`
	// FullPass* time scoring every candidate with its own forward pass over
	// prompt + key + value; FullPassMeasured of them were timed and the
	// total extrapolated from their mean.
	FullPassSeconds  float64 `json:"full_pass_seconds"`
	FullPassMeasured int     `json:"full_pass_measured"`
	SpeedupVsFull    float64 `json:"speedup_vs_full_passes"`
	// TotalOverPrefill is the request's time over the prefix prefill alone.
	TotalOverPrefill float64       `json:"total_over_prefill"`
	Sweep            []SweepResult `json:"branch_batch_sweep"`
	// Backends compares the other scoring backends with json on the same
	// schema and input.
	Backends []BackendComparison `json:"backends,omitempty"`
	Machine  Machine             `json:"machine"`
}

// SweepResult is one branch-batch size's request time.
type SweepResult struct {
	BranchBatch  int     `json:"branch_batch"`
	TotalSeconds float64 `json:"total_seconds"`
	BranchSecs   float64 `json:"branch_seconds"`
}

func (r ScorerReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d-token prompt, %d fields, %d decisions, %d candidates, %d branch rows\n",
		r.Model, r.PromptTokens, r.Fields, r.Decisions, r.Candidates, r.BranchRows)
	fmt.Fprintf(&b, "request %.3fs (prefill %.3fs = %.0f%%), %.1f decisions/s, %.2fx the prefill alone\n",
		r.TotalSeconds, r.PrefillSeconds, 100*r.PrefillShare, r.DecisionsPerS, r.TotalOverPrefill)
	fmt.Fprintf(&b, "one full forward pass per candidate: %.3fs (%d of %d timed) -> branches are %.1fx faster\n",
		r.FullPassSeconds, r.FullPassMeasured, r.Candidates, r.SpeedupVsFull)
	for _, s := range r.Sweep {
		fmt.Fprintf(&b, "  branch batch %2d: %.3fs (branches %.3fs)\n", s.BranchBatch, s.TotalSeconds, s.BranchSecs)
	}
	for _, c := range r.Backends {
		fmt.Fprintf(&b, "  backends: %s\n", c)
	}
	fmt.Fprintf(&b, "machine: %s", r.Machine)
	return b.String()
}

// words of varied length for candidate labels: 1 to 3 tokens each.
var labelWords = [][]string{
	{"low", "medium", "high", "critical"},
	{"billing", "shipping", "technical support", "returns desk"},
	{"red", "green", "light blue", "dark purple"},
	{"cat", "dog", "horse", "guinea pig"},
	{"north", "south", "east", "far west coast"},
	{"none", "some", "many", "almost all of them"},
	{"spring", "summer", "autumn", "winter"},
	{"yes", "no", "maybe", "cannot tell"},
}

// ScorerSchema is the benchmark's schema: n choice fields of 4 candidates.
func ScorerSchema(n int) *scorer.Schema {
	s := &scorer.Schema{}
	for i := 0; i < n; i++ {
		f := scorer.Field{Name: fmt.Sprintf("field_%d", i+1), Question: fmt.Sprintf("Question number %d about the text?", i+1), Kind: scorer.Choice}
		for _, w := range labelWords[i%len(labelWords)] {
			f.Options = append(f.Options, scorer.Option{Name: w})
		}
		s.Fields = append(s.Fields, f)
	}
	return s
}

// ScorerInput returns text whose complete prompt under s, in chat format c,
// is about n tokens.
func ScorerInput(tok scorer.Tokenizer, s *scorer.Schema, n int, c model.Chat) string {
	const sentence = "The customer wrote again about the delayed parcel and the damaged screen, asking for help. "
	text := ""
	for len(tok.Encode(s.Prompt(text, c))) < n {
		text += sentence
	}
	words := strings.Fields(text)
	for len(words) > 1 && len(tok.Encode(s.Prompt(strings.Join(words, " "), c))) > n {
		words = words[:len(words)-1]
	}
	return strings.Join(words, " ")
}

// Scorer runs the scorer benchmark: one request at the default batch size,
// the full-pass alternative (timing at most fullPasses candidates, 0: all),
// a sweep over branch-batch sizes, and json against each of backends.
// Every timed request prefills its whole prefix: the prefixes the scorer
// kept from the requests before are dropped first.
func Scorer(ctx context.Context, name string, m model.Model, tok scorer.Tokenizer, promptTokens, fields, fullPasses int, sweep []int, backends ...string) (ScorerReport, error) {
	s := ScorerSchema(fields)
	input := ScorerInput(tok, s, promptTokens, m.Chat())
	sc := scorer.New(m, tok)
	r := ScorerReport{Model: name, Fields: fields, Machine: ThisMachine()}
	if _, err := sc.Score(ctx, s, input, scorer.Options{}); err != nil { // warm: compile the schema
		return r, err
	}
	sc.DropKept()
	res, err := sc.Score(ctx, s, input, scorer.Options{})
	if err != nil {
		return r, err
	}
	r.PromptTokens, r.Decisions, r.BranchRows = res.PromptTokens, res.Decisions, res.BranchRows
	r.PrefixReused = res.Timings.PrefixReused
	r.TotalSeconds = time.Duration(res.Timings.Total).Seconds()
	r.PrefillSeconds = time.Duration(res.Timings.Prefill).Seconds()
	r.PrefillShare = r.PrefillSeconds / r.TotalSeconds
	r.TotalOverPrefill = r.TotalSeconds / r.PrefillSeconds
	r.DecisionsPerS = float64(r.Decisions) / r.TotalSeconds

	// The alternative: one forward pass per candidate over the whole text.
	prompt := s.Prompt(input, m.Chat())
	var texts []string
	for _, f := range s.Fields {
		for _, o := range f.Options {
			texts = append(texts, prompt+`{"`+f.Name+`": "`+o.Name+`"`)
		}
	}
	r.Candidates = len(texts)
	n := len(texts)
	if fullPasses > 0 && fullPasses < n {
		n = fullPasses
	}
	var spent time.Duration
	for _, t := range texts[:n] {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		start := time.Now()
		ids := tok.Encode(t)
		h, err := m.Forward(nil, ids, nil)
		if err != nil {
			return r, err
		}
		// The value's few tokens need their output rows.
		D := m.Config().Hidden
		if _, err := m.Logits(h[len(h)-4*D:], 4); err != nil {
			return r, err
		}
		spent += time.Since(start)
	}
	r.FullPassMeasured = n
	r.FullPassSeconds = spent.Seconds() / float64(n) * float64(len(texts))
	r.SpeedupVsFull = r.FullPassSeconds / r.TotalSeconds

	for _, b := range sweep {
		sc.DropKept()
		res, err := sc.Score(ctx, s, input, scorer.Options{BranchBatch: b})
		if err != nil {
			return r, err
		}
		var br time.Duration
		for _, d := range res.Timings.Batches {
			br += time.Duration(d)
		}
		r.Sweep = append(r.Sweep, SweepResult{BranchBatch: b, TotalSeconds: time.Duration(res.Timings.Total).Seconds(), BranchSecs: br.Seconds()})
	}
	for _, b := range backends {
		c, err := CompareBackends(ctx, sc, fmt.Sprintf("%d choice fields", fields), s, []string{input}, scorer.BackendJSON, b)
		if err != nil {
			return r, err
		}
		r.Backends = append(r.Backends, c)
	}
	return r, nil
}
