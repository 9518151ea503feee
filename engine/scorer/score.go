package scorer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"verdict/engine/model"
	"verdict/engine/prefix"
	"verdict/engine/prompt"
	"verdict/native"
)

// Scorer scores schemas on inputs with one model. It is safe for concurrent
// use; every request has its own prefix cache.
type Scorer struct {
	m      model.Model
	tok    Tokenizer
	cache  *schemaCache
	priors *priorCache // the reference results of corrections (normalize.go)
	// prefixes keeps text prefixes across requests: a later request forks
	// the longest it shares (a schema's instructions, a dataset's common
	// lead) instead of computing it again.
	prefixes *prefix.Cache
}

// CompiledSchemas is the capacity of the compiled-schema LRU.
const CompiledSchemas = 8

// New returns a scorer over model m with its tokenizer.
func New(m model.Model, tok Tokenizer) *Scorer {
	positions, _ := m.KVPool()
	return &Scorer{m: m, tok: tok, cache: newSchemaCache(CompiledSchemas), priors: newPriorCache(CompiledSchemas),
		prefixes: prefix.New(PrefixBudget(positions))}
}

// PrefixBudget is the blocks the prefixes kept across requests may
// reference in a pool of positions positions of each kind: a quarter of
// its blocks.
func PrefixBudget(positions int) int {
	return 2 * positions / model.KVBlock / 4
}

// Options tune one request.
type Options struct {
	// BranchBatch is the number of branch rows run together (1..64; 0:
	// the device's default, BranchBatchFor).
	BranchBatch int
	// Temperature divides the log-likelihoods before normalising (0 means 1).
	// A calibration's fitted temperatures replace it.
	Temperature float64
	Calibration *Calibration
	// TokenLogprobs adds every scored token's log-probability to the result.
	TokenLogprobs bool
	// NoGather runs every suffix token through the KV-sharing layers (for
	// checking the gathered path, which gives the same result).
	NoGather bool
	// OnField, when set, receives each field's result as soon as all its
	// decisions are scored.
	OnField func(FieldResult)
	// OnStage, when set, hears each stage as it ends: "input" (preparation),
	// "prefill", and "batch" after every branch batch, with the time since
	// the request began.
	OnStage func(stage string, elapsed time.Duration)
	// OnPrefill, when set, hears the shared prefix's prefill: decoder
	// layers done of those it runs, after each.
	OnPrefill func(done, total int)
	// Media, when set, computes the request's image and audio soft tokens;
	// it runs inside the request and counts as input preparation.
	Media func() (*Media, error)
	// OnCatalogStep, when set, hears every step of a trie decode as it is
	// chosen: the field, the names emitted so far and the step.
	OnCatalogStep func(field string, names []string, step CatalogStep)
	// CatalogCheckDense computes the dense output head too at every step of
	// a trie decode, cross-checks it and times it beside the sparse head.
	CatalogCheckDense bool
	// Backend is "json" (the default: candidate likelihoods), "cached"
	// (single-token answer codes, see cached.go), "catalog" (choice fields
	// decoded through their option tries) or "head" (json rescored by Head).
	// Catalog fields are decoded under any.
	Backend string
	// Normalize corrects the distributions: "" or "none", "contextual" or
	// "pmi" (see normalize.go).
	Normalize string
	// Head is the trained decision head of the head backend.
	Head DecisionHead
	// Runner, when set, runs the request's forward passes (a scheduler's
	// request; nil: an Exec of the request's own). The results are the same
	// bits either way.
	Runner model.Runner
	// Admit, when set, admits the request once it knows the key/value
	// blocks it can take (model.KV.Need of its sequences), before its
	// first forward pass: a scheduler waits there until the pool can promise
	// them. Its sequences' blocks come out of the ticket, released when the
	// request ends.
	Admit func(need [2]int) (model.Ticket, error)
}

// admit is opt.Admit of need, or no ticket.
func admit(opt Options, need [2]int) (model.Ticket, error) {
	if opt.Admit == nil {
		return nil, nil
	}
	return opt.Admit(need)
}

// releaseTicket gives back tk (nil: no ticket).
func releaseTicket(tk model.Ticket) {
	if tk != nil {
		tk.Release()
	}
}

// runner is the request's Runner and what gives it back.
func (sc *Scorer) runner(opt Options) (model.Runner, func(), error) {
	if opt.Runner != nil {
		return opt.Runner, func() {}, nil
	}
	x, err := sc.m.Acquire()
	if err != nil {
		return nil, nil, err
	}
	return x, x.Release, nil
}

// Media is a request's media: the soft tokens the decoder merges, and a
// caption for each image ("" for none).
type Media struct {
	model.Media
	Captions []string
}

// DefaultBranchBatch is the default number of branch rows per batch on
// the CPU, whose passes cost by the row; a GPU's cost by the pass, so there
// the default is MaxBranchBatch (BranchBatchFor).
const DefaultBranchBatch = 8

// MaxBranchBatch is the most branch rows per batch.
const MaxBranchBatch = 64

// BranchBatchFor returns the default branch batch of a model's device.
func BranchBatchFor(m model.Model) int {
	if costsByPass(m) {
		return MaxBranchBatch
	}
	return DefaultBranchBatch
}

// costsByPass reports whether m's passes cost by the pass more than by the
// row (a GPU's; the CPU's cost by the row).
var costsByPass = func(m model.Model) bool { return m.Backend().Name() != "cpu" }

// leadInPrefix reports whether the key rows' common lead of lead tokens
// runs in the passes of a prefix of n rows (rows a pass), computed once:
// always where passes cost by the row, else where it adds no pass to them
// (a pass costs a decode step on a GPU; the key rows take it then, each
// its copy, in their one pass).
func leadInPrefix(n, lead, rows int, byPass bool) bool {
	if lead <= 0 || rows <= 0 {
		return false
	}
	return !byPass || (n+lead+rows-1)/rows == (n+rows-1)/rows
}

// Candidate is one allowed value of a decision with its probability.
type Candidate struct {
	Value       string  `json:"value"`
	Probability float64 `json:"probability"`
	// LogLikelihood is s(c), the summed log-probability of the value's tokens.
	LogLikelihood float64   `json:"log_likelihood"`
	TokenLogprobs []float64 `json:"token_logprobs,omitempty"`
}

// Decision is one primitive decision's distribution.
type Decision struct {
	Name       string      `json:"name"`
	Candidates []Candidate `json:"candidates"`
	// Confidence is 1 − normalised entropy of the distribution: how
	// concentrated it is, not how often it is right.
	Confidence float64 `json:"confidence"`
	// AllowedTokenMass is the model's total probability on the allowed values
	// (Σ exp s(c)).
	AllowedTokenMass float64 `json:"allowed_token_mass"`
	Temperature      float64 `json:"temperature"`
	// Boundary notes a fix-up made when the values were tokenized with the
	// key ("", "merged", "terminated").
	Boundary string `json:"boundary,omitempty"`
	// Correction holds the uncorrected distribution and the prior that
	// --normalize divided out (nil: none applied).
	Correction *Correction `json:"correction,omitempty"`
}

// LabelResult is one label of an Independent field.
type LabelResult struct {
	Label            string  `json:"label"`
	PYes             float64 `json:"p_yes"`
	Confidence       float64 `json:"confidence"`
	AllowedTokenMass float64 `json:"allowed_token_mass"`
}

// FieldResult is the answer to one field.
type FieldResult struct {
	Name string `json:"name"`
	Type Kind   `json:"type"`
	// Winner is the most probable value (Choice, Score).
	Winner string `json:"winner,omitempty"`
	// PTrue is the probability of true (Bool).
	PTrue *float64 `json:"p_true,omitempty"`
	// Labels hold the yes-probability of every label (Independent).
	Labels []LabelResult `json:"labels,omitempty"`
	// ExpectedLevel is the probability-weighted level value (Score).
	ExpectedLevel *float64 `json:"expected_level,omitempty"`
	// Confidence and AllowedTokenMass summarise the field (for Independent:
	// the least confident label and the smallest mass).
	Confidence       float64    `json:"confidence"`
	AllowedTokenMass float64    `json:"allowed_token_mass"`
	Decisions        []Decision `json:"decisions"`
	// Names are the entries a trie decode emitted, in order (Catalog, and
	// Choice under the catalog backend), Steps its distributions and
	// PathProbability the product of its chosen tokens' probabilities.
	Names           []string       `json:"names,omitempty"`
	Steps           []CatalogStep  `json:"steps,omitempty"`
	PathProbability *float64       `json:"path_probability,omitempty"`
	CatalogTiming   *CatalogTiming `json:"catalog_timing,omitempty"`
	Elapsed         Duration       `json:"elapsed_ms"`
}

// Duration marshals as milliseconds.
type Duration time.Duration

// MarshalJSON writes milliseconds with microsecond precision.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64)), nil
}

// Timings break a request down.
type Timings struct {
	InputPreparation Duration   `json:"input_preparation_ms"`
	Prefill          Duration   `json:"prefill_ms"`
	PrefillTPS       float64    `json:"prefill_tokens_per_second"`
	Batches          []Duration `json:"branch_batches_ms"`
	// PrefixReused counts the leading prompt tokens taken from an earlier
	// request's prefix (the schema's instructions, say) instead of computed.
	PrefixReused  int      `json:"prefix_reused_tokens"`
	FirstDecision Duration `json:"first_decision_ms"`
	Total         Duration `json:"total_ms"`
}

// Result is a scored request.
type Result struct {
	// Answer is the JSON answer, assembled in code, following the schema.
	Answer json.RawMessage `json:"answer"`
	// RawAnswer is the answer before a normalisation (absent without one).
	RawAnswer         json.RawMessage   `json:"raw_answer,omitempty"`
	Fields            []FieldResult     `json:"fields"`
	ProbabilitySource string            `json:"probability_source"`
	Calibration       CalibrationStatus `json:"calibration"`
	Note              string            `json:"note"`
	PromptTokens      int               `json:"prompt_tokens"`
	Decisions         int               `json:"decisions"`
	BranchRows        int               `json:"branch_rows"`
	BranchBatch       int               `json:"branch_batch"`
	CachedSchema      bool              `json:"cached_schema"`
	Timings           Timings           `json:"timings"`
}

const (
	probabilitySource = "candidate likelihood: log-probabilities of complete JSON values, normalised over the allowed values"
	resultNote        = "confidence (1 - normalised entropy) and allowed_token_mass describe the model's distribution; neither is an accuracy estimate. Fields are scored independently: no field sees another's answer."
)

// branch is one row that continues the shared prefix (or its decision's
// key row): its own tokens, of which the last Outputs are scored.
type branch struct {
	IDs     []int32
	Outputs int
}

// row is one branch row of a decision and the trie nodes its outputs score.
type row struct {
	dec   int
	nodes []int // node of each output, in order
	b     branch
}

// trie holds a decision's candidates as paths of tokens. A node is a token
// path ending at an output position; every candidate's scored tokens are
// the edges from the node at its score start down to its leaf. Each node's
// output is computed once.
type trie struct {
	ids      map[string]int
	children [][]int32   // per node: the tokens scored at its output
	lp       [][]float64 // per node, per child: log-probability
	paths    [][]int     // per candidate: its nodes
}

// plan builds the decision's trie and its rows: a key row holding the tokens
// all candidates share (the JSON key and common value tokens), and one row
// per candidate that extends it with the candidate's tokens before its last,
// unless all its nodes were reached before (a single remaining token, or
// one shared with an earlier candidate); they fork the key row's sequence.
func (d *compiledDecision) plan(dec int) (*trie, row, []row) {
	t := &trie{ids: map[string]int{}}
	node := func(path []int32, next int32) (id int, fresh bool) {
		k := fmt.Sprint(path)
		id, ok := t.ids[k]
		if !ok {
			id = len(t.children)
			t.ids[k] = id
			t.children = append(t.children, nil)
		}
		if !slices.Contains(t.children[id], next) {
			t.children[id] = append(t.children[id], next)
		}
		return id, !ok
	}
	key := row{dec: dec, b: branch{IDs: d.shared}}
	var rows []row
	for _, c := range d.cands {
		full := append(append([]int32(nil), d.shared...), c...)
		var path, fresh []int
		for p := d.scoreFrom - 1; p < len(full)-1; p++ {
			id, isNew := node(full[:p+1], full[p+1])
			path = append(path, id)
			if isNew && p >= len(d.shared) {
				fresh = append(fresh, id)
			} else if isNew {
				key.nodes = append(key.nodes, id)
			}
		}
		t.paths = append(t.paths, path)
		if len(fresh) > 0 { // fresh nodes are the last ones of the path
			rows = append(rows, row{dec: dec, nodes: fresh,
				b: branch{IDs: c[:len(c)-1], Outputs: len(fresh)}})
		}
	}
	key.b.Outputs = len(key.nodes)
	t.lp = make([][]float64, len(t.children))
	return t, key, rows
}

// Score answers every field of s about the input text.
func (sc *Scorer) Score(ctx context.Context, s *Schema, input string, opt Options) (*Result, error) {
	start := time.Now()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if res, ok, err := sc.route(ctx, s, input, opt); ok {
		return res, err
	}
	if err := opt.Calibration.CheckSchema(s); err != nil {
		return nil, err
	}
	md, captions, err := sc.media(opt)
	if err != nil {
		return nil, err
	}
	switch opt.Backend {
	case "", BackendJSON, BackendCatalog:
	case BackendHead:
		return sc.scoreHead(ctx, s, input, opt)
	default:
		return nil, fmt.Errorf("scorer: unknown backend %q (json, catalog or head)", opt.Backend)
	}
	p, err := sized(s.MediaPrompt(input, captions, md != nil && md.Audio != nil, sc.m.Chat()), sc.m.Chat(), md)
	if err != nil {
		return nil, err
	}
	decoded, err := sc.decodedFields(s, opt.Backend, func(text string) ([]int32, bool) { return after(sc.tok, promptTail(sc.m.Chat()), text) })
	if err != nil {
		return nil, err
	}
	var ds []decision
	for _, d := range s.decisions() {
		if !slices.ContainsFunc(decoded, func(df decodedField) bool { return df.field == d.field }) {
			ds = append(ds, d)
		}
	}
	comp, cached, err := sc.compileCached(p, ds)
	if err != nil {
		return nil, err
	}
	res := &Result{
		ProbabilitySource: probabilitySource, Note: resultNote, PromptTokens: len(comp.prefixIDs),
		Decisions: len(comp.decisions) + len(decoded), CachedSchema: cached, Calibration: opt.Calibration.status(opt.Temperature),
	}
	if len(decoded) > 0 {
		res.ProbabilitySource += "; " + catalogSource
		if len(comp.decisions) == 0 {
			res.ProbabilitySource = catalogSource
		}
	}
	decisionsLeft := map[int]int{}
	for _, d := range comp.decisions {
		decisionsLeft[d.field]++
	}
	res.Fields = make([]FieldResult, len(s.Fields))
	var after [][]int32
	for _, df := range decoded {
		after = append(after, df.key)
	}
	r, err := sc.execute(ctx, comp, md, opt, start, after, func(r *run, dec int) {
		f := comp.decisions[dec].field
		decisionsLeft[f]--
		if decisionsLeft[f] == 0 {
			res.Fields[f] = fieldResult(s, comp, f, r, opt)
			res.Fields[f].Elapsed = Duration(time.Since(start))
			if opt.OnField != nil {
				opt.OnField(res.Fields[f])
			}
		}
	})
	if err != nil {
		return nil, err
	}
	defer r.cache.Free()
	if len(decoded) > 0 {
		for i := range decoded { // the prefix holds their lead
			decoded[i].key = decoded[i].key[r.lead:]
		}
		if err := sc.decode(ctx, s, decoded, r.cache, res, opt, func(f *FieldResult) {
			f.Elapsed = Duration(time.Since(start))
			if r.timings.FirstDecision == 0 {
				r.timings.FirstDecision = f.Elapsed
			}
			if opt.OnField != nil {
				opt.OnField(*f)
			}
		}); err != nil {
			return nil, err
		}
	}
	res.Timings, res.BranchRows, res.BranchBatch = r.timings, r.rows, r.batch
	res.Answer = assemble(s, res.Fields)
	res.Timings.Total = Duration(time.Since(start))
	return res, nil
}

// media computes a request's media (opt.Media; nil, nil without) and checks
// its image soft tokens against its captions.
func (sc *Scorer) media(opt Options) (*model.Media, []string, error) {
	if opt.Media == nil {
		return nil, nil, nil
	}
	in, err := opt.Media()
	if err != nil {
		return nil, nil, err
	}
	md := &in.Media
	D := sc.m.Config().Hidden
	if md.ImageTokens == nil {
		if per := sc.m.Chat().Media.VisionTokens * D; len(md.Image) != per*len(in.Captions) {
			return nil, nil, fmt.Errorf("scorer: %d image soft-token values for %d images", len(md.Image), len(in.Captions))
		}
		return md, in.Captions, nil
	}
	// Per-image counts (Gemma 4): one a caption, adding up to the rows.
	if len(md.ImageTokens) != len(in.Captions) {
		return nil, nil, fmt.Errorf("scorer: %d image soft-token counts for %d images", len(md.ImageTokens), len(in.Captions))
	}
	sum := 0
	for _, n := range md.ImageTokens {
		sum += max(n, 0)
	}
	if len(md.Image) != sum*D {
		return nil, nil, fmt.Errorf("scorer: %d image soft-token values for images of %v soft tokens of width %d", len(md.Image), md.ImageTokens, D)
	}
	return md, in.Captions, nil
}

// sized gives p's media runs md's per-item soft-token counts (Gemma 4's
// vary by image and clip; prompt.Prompt.Sized).
func sized(p prompt.Prompt, ch model.Chat, md *model.Media) (prompt.Prompt, error) {
	if md == nil {
		return p, nil
	}
	p, err := p.Sized(ch.Media, md.ImageTokens, md.AudioTokens)
	if err != nil {
		return nil, fmt.Errorf("scorer: %w", err)
	}
	return p, nil
}

// DecisionSpec is a primitive decision given directly: the JSON text before
// the value, and each candidate value as its exact JSON text (with its
// leading space, strings with their closing quote).
type DecisionSpec struct {
	Name   string
	Key    string
	Values []string
	Texts  []string
}

// ScoreDecisions scores decisions that each continue prompt, a complete
// Gemma chat prompt written as text (special tokens included), and returns
// their distributions at opt.Temperature with the prompt's token ids.
func (sc *Scorer) ScoreDecisions(ctx context.Context, prompt string, specs []DecisionSpec, opt Options) ([]Decision, []int32, error) {
	ds := make([]decision, len(specs))
	for i, sp := range specs {
		if len(sp.Texts) < 2 || len(sp.Values) != len(sp.Texts) {
			return nil, nil, &SchemaError{Field: sp.Name, Msg: "needs at least 2 candidates, each with a value and a text"}
		}
		ds[i] = decision{field: i, label: -1, name: sp.Name, key: sp.Key, values: sp.Values, texts: sp.Texts}
	}
	comp, _, err := sc.compileCached(textPrompt(prompt), ds)
	if err != nil {
		return nil, nil, err
	}
	r, err := sc.execute(ctx, comp, nil, opt, time.Now(), nil, nil)
	if err != nil {
		return nil, nil, err
	}
	r.cache.Free()
	T := opt.Temperature
	if T == 0 {
		T = 1
	}
	out := make([]Decision, len(ds))
	for i := range comp.decisions {
		out[i] = makeDecision(&comp.decisions[i], r.scores[i], T)
		for j := range out[i].Candidates {
			out[i].Candidates[j].TokenLogprobs = r.tokLP[i][j]
		}
	}
	return out, comp.prefixIDs, nil
}

// CompiledTokens returns, for a decision of ScoreDecisions' form, each
// candidate's complete tokens after the prompt (key and value).
func (sc *Scorer) CompiledTokens(prompt string, spec DecisionSpec) ([][]int32, error) {
	comp, _, err := sc.compileCached(textPrompt(prompt), []decision{{label: -1, name: spec.Name, key: spec.Key, values: spec.Values, texts: spec.Texts}})
	if err != nil {
		return nil, err
	}
	d := comp.decisions[0]
	out := make([][]int32, len(d.cands))
	for i, c := range d.cands {
		out[i] = append(append([]int32(nil), d.shared...), c...)
	}
	return out, nil
}

func textPrompt(s string) prompt.Prompt { return prompt.Prompt{{Text: s}} }

func (sc *Scorer) compileCached(p prompt.Prompt, ds []decision) (*compiled, bool, error) {
	key := cacheKey(p, ds)
	if c, ok := sc.cache.get(key); ok {
		return c, true, nil
	}
	c, err := compile(sc.tok, p, ds, sc.m.Chat())
	if err != nil {
		return nil, false, err
	}
	sc.cache.put(key, c)
	return c, false, nil
}

// run is one execution's raw scores.
type run struct {
	cache   model.Cache   // the shared prefix and the key rows' common lead
	lead    int           // the lead's tokens (at the cache's end)
	scores  [][]float64   // per decision, per candidate: s(c)
	tokLP   [][][]float64 // per decision, per candidate: each scored token
	timings Timings
	rows    int
	batch   int
}

// execute computes the prefix once and runs every decision's branch rows in
// batches, calling done(dec) as each decision completes. after are the
// rows that go on from the prefix once it returns (the decoded fields'
// keys): the lead the prefix takes is one they start with too, short of
// their last token.
func (sc *Scorer) execute(ctx context.Context, comp *compiled, md *model.Media, opt Options, start time.Time, after [][]int32, done func(r *run, dec int)) (*run, error) {
	batch := opt.BranchBatch
	if batch == 0 {
		batch = BranchBatchFor(sc.m)
	}
	if batch < 1 || batch > MaxBranchBatch {
		return nil, fmt.Errorf("scorer: branch batch %d outside 1..64", batch)
	}
	if opt.Temperature < 0 || math.IsNaN(opt.Temperature) || math.IsInf(opt.Temperature, 0) {
		return nil, fmt.Errorf("scorer: temperature must be positive, got %v", opt.Temperature)
	}
	r := &run{batch: batch}
	r.timings.InputPreparation = Duration(time.Since(start))
	stage := func(name string) {
		if opt.OnStage != nil {
			opt.OnStage(name, time.Since(start))
		}
	}
	stage("input")

	tries := make([]*trie, len(comp.decisions))
	keys := make([]row, len(comp.decisions))
	cands := make([][]row, len(comp.decisions))
	for i := range comp.decisions {
		tries[i], keys[i], cands[i] = comp.decisions[i].plan(i)
		r.rows += 1 + len(cands[i])
	}
	// The shared prefix, computed once and only read by the branches, which
	// fork it: only its keys and values are needed (no output state). The
	// tokens every key row starts with (at least `{"`) that no decision
	// scores join it, in the same passes: computed once, not in every row,
	// and in no pass of their own. A branch row's outputs equal a full
	// forward pass over prefix and row, bit for bit, so nothing changes but
	// the work. The prefixes kept for later requests hold them too.
	// (Where it adds a pass to the prefix's on a GPU, the key rows keep it:
	// leadInPrefix.)
	lead := commonLead(comp.decisions, keys)
	for _, k := range after {
		if lead > 0 {
			lead = max(0, min(lead, len(k)-1, commonPrefix(k, keys[0].b.IDs)))
		}
	}
	seqs := []int{len(comp.prefixIDs) + lead} // the sequences the request can hold at once, at most
	for i := range keys {
		seqs = append(seqs, len(keys[i].b.IDs))
		for _, c := range cands[i] {
			seqs = append(seqs, len(c.b.IDs))
		}
	}
	tk, err := admit(opt, sc.m.Need(seqs...))
	if err != nil {
		return nil, err
	}
	defer releaseTicket(tk)
	x, release, err := sc.runner(opt)
	if err != nil {
		return nil, err
	}
	defer release()
	ids := comp.prefixIDs
	if leadInPrefix(len(ids), lead, x.Rows(), costsByPass(sc.m)) {
		r.lead = lead
		ids = append(slices.Clip(ids), keys[0].b.IDs[:lead]...)
		for i := range keys {
			keys[i].b.IDs = keys[i].b.IDs[lead:]
		}
	}

	t := time.Now()
	var cache model.Cache
	reused, split := 0, 0
	if md == nil {
		// The longest prefix an earlier request kept, forked; the
		// prompt's last token (and the lead after it) is computed here
		// whatever is kept.
		cache, reused, split = sc.prefixes.Lookup(ids, len(comp.prefixIDs)-1)
		if reused < minReuse && cache != nil {
			cache.Free()
			cache, reused = nil, 0
		}
		if split < minReuse || split <= reused {
			split = 0
		}
	}
	if cache == nil {
		cache = sc.m.NewCache()
	}
	cache.Bind(tk)
	r.timings.PrefixReused = reused
	cache.OnLayer(opt.OnPrefill)
	var b model.Batch
	if md == nil {
		b.Add(cache, ids[reused:], 0)
	} else if err := sc.m.AddMultimodal(&b, cache, comp.prefixIDs, *md, 0); err != nil {
		return nil, err
	} else {
		b.Add(cache, ids[len(comp.prefixIDs):], 0)
	}
	// In chunks of the Exec's rows, cut where this prompt parts from one
	// kept before (split): that much is kept on its own, for every later
	// request that shares it. After the first of several chunks a text
	// prefix is kept as it stands then too: its sliding-window keys are
	// all there still, so that later requests can fork it anywhere before.
	// Every chunk ends where the model allows (model.NextCut: not inside
	// a Gemma 4 bidirectional image block).
	for lo := 0; lo < len(b.Rows); {
		hi := len(b.Rows)
		if cut := split - reused; split > 0 && lo < cut && cut < hi {
			hi = cut
		}
		hi, err := model.NextCut(x, b.Rows, lo, hi)
		if err != nil {
			cache.Free()
			return nil, err
		}
		part := model.Batch{Rows: b.Rows[lo:hi], Embeds: b.Embeds}
		if err := x.Run(&part, nil); err != nil {
			cache.Free()
			return nil, err
		}
		if md == nil && hi < len(b.Rows) && (hi == split-reused || lo == 0) {
			sc.prefixes.Keep(ids[:reused+hi], cache)
		}
		lo = hi
	}
	r.cache = cache
	cache.OnLayer(nil)
	if md == nil {
		sc.prefixes.Keep(ids, cache)
	}
	r.timings.Prefill = Duration(time.Since(t))
	r.timings.PrefillTPS = float64(len(comp.prefixIDs)) / time.Since(t).Seconds()
	stage("prefill")

	r.scores = make([][]float64, len(comp.decisions))
	r.tokLP = make([][][]float64, len(comp.decisions))

	// forward runs one batch of rows, each in a fork of its parent's
	// sequence, and records their nodes' log-probabilities; it returns the
	// rows' sequences.
	var wantRow, wantCol []int32
	var sel, lse []float32
	forward := func(part []row, parents []model.Cache) ([]model.Cache, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t := time.Now()
		seqs := make([]model.Cache, len(part))
		b.Reset()
		for i, rw := range part {
			seqs[i] = parents[i].Clone()
			outs := rw.b.Outputs
			if opt.NoGather {
				outs = len(rw.b.IDs)
			}
			b.Add(seqs[i], rw.b.IDs, outs)
		}
		// The rows run in chunks of the Exec's rows (model.NextCut: the
		// branch rows are text, so any end is taken); each chunk's outputs
		// go through the head once.
		out := 0 // outputs of the rows before
		nodeAt := func(o int) (rw *row, node int, ok bool) {
			for i := range part {
				k := len(part[i].b.IDs)
				if opt.NoGather {
					if o < k {
						j := o - (k - part[i].b.Outputs)
						if j < 0 {
							return nil, 0, false
						}
						return &part[i], part[i].nodes[j], true
					}
					o -= k
					continue
				}
				if o < part[i].b.Outputs {
					return &part[i], part[i].nodes[o], true
				}
				o -= part[i].b.Outputs
			}
			return nil, 0, false
		}
		for lo, hi := 0, 0; lo < len(b.Rows); lo = hi {
			var err error
			if hi, err = model.NextCut(x, b.Rows, lo, len(b.Rows)); err != nil {
				for _, c := range seqs {
					c.Free()
				}
				return nil, err
			}
			chunk := model.Batch{Rows: b.Rows[lo:hi]}
			k := 0
			err = x.Run(&chunk, func(x model.Exec, h native.Tensor) error {
				k = h.Rows()
				if k == 0 {
					return nil
				}
				wantRow, wantCol = wantRow[:0], wantCol[:0]
				for o := 0; o < k; o++ {
					if rw, node, ok := nodeAt(out + o); ok {
						for _, id := range tries[rw.dec].children[node] {
							wantRow, wantCol = append(wantRow, int32(o)), append(wantCol, id)
						}
					}
				}
				sel, lse = append(sel[:0], make([]float32, len(wantRow))...), append(lse[:0], make([]float32, k)...)
				return x.SelectLogprobs(sel, lse, h, wantRow, wantCol)
			})
			if err != nil {
				for _, c := range seqs {
					c.Free()
				}
				return nil, err
			}
			if k == 0 {
				continue
			}
			j := 0
			for o := 0; o < k; o++ {
				if rw, node, ok := nodeAt(out + o); ok {
					tr := tries[rw.dec]
					for range tr.children[node] {
						tr.lp[node] = append(tr.lp[node], float64(sel[j])-float64(lse[o]))
						j++
					}
				}
			}
			out += k
		}
		r.timings.Batches = append(r.timings.Batches, Duration(time.Since(t)))
		stage("batch")
		return seqs, nil
	}
	finish := func(dec int) {
		r.scores[dec], r.tokLP[dec] = tries[dec].scores(&comp.decisions[dec])
		if r.timings.FirstDecision == 0 {
			r.timings.FirstDecision = Duration(time.Since(start))
		}
		if done != nil {
			done(r, dec)
		}
	}
	free := func(cs []model.Cache) {
		for _, c := range cs {
			c.Free()
		}
	}
	// Decisions go in groups of batch: their key rows in one batch, then
	// their candidate rows, batch rows at a time, extending the key rows.
	for lo := 0; lo < len(keys); lo += batch {
		group := keys[lo:min(lo+batch, len(keys))]
		parents := make([]model.Cache, len(group))
		for i := range parents {
			parents[i] = cache // the prefix, and the lead where it took it
		}
		keySeqs, err := forward(group, parents)
		if err != nil {
			return nil, err
		}
		var pending []row
		var from []model.Cache
		for g, k := range group {
			if len(cands[k.dec]) == 0 {
				finish(k.dec)
				continue
			}
			for _, c := range cands[k.dec] {
				pending, from = append(pending, c), append(from, keySeqs[g])
			}
		}
		for len(pending) > 0 {
			part := pending[:min(batch, len(pending))]
			pending = pending[len(part):]
			cs, err := forward(part, from[:len(part)])
			from = from[len(part):]
			if err != nil {
				free(keySeqs)
				return nil, err
			}
			free(cs)
			for i, c := range part {
				last := i == len(part)-1 || part[i+1].dec != c.dec
				if last && (len(pending) == 0 || pending[0].dec != c.dec) {
					finish(c.dec)
				}
			}
		}
		free(keySeqs)
	}
	return r, nil
}

// DropKept frees the prefixes kept for later requests (the key/value pool
// needs their blocks), reporting whether there were any.
func (sc *Scorer) DropKept() bool { return sc.prefixes.Drop() }

// PrefixStats reports the use of the prefixes kept across requests.
func (sc *Scorer) PrefixStats() prefix.Stats { return sc.prefixes.Stats() }

// minReuse is the fewest leading tokens worth taking from an earlier prefix.
const minReuse = 16

// commonLead is the number of leading tokens all key rows share that no
// decision scores (before every decision's first scored position).
func commonLead(ds []compiledDecision, keys []row) int {
	if len(keys) == 0 {
		return 0
	}
	n := len(keys[0].b.IDs)
	for i, k := range keys {
		n = min(n, ds[i].scoreFrom-1, commonPrefix(k.b.IDs, keys[0].b.IDs))
	}
	return max(n, 0)
}

// scores sums each candidate's log-probabilities along its path.
func (t *trie) scores(d *compiledDecision) ([]float64, [][]float64) {
	s := make([]float64, len(d.cands))
	steps := make([][]float64, len(d.cands))
	for c, path := range t.paths {
		full := append(append([]int32(nil), d.shared...), d.cands[c]...)
		for k, node := range path {
			v := t.lp[node][slices.Index(t.children[node], full[d.scoreFrom+k])]
			steps[c] = append(steps[c], v)
			s[c] += v
		}
	}
	return s, steps
}

// fieldResult turns field f's decision scores into its result.
func fieldResult(s *Schema, comp *compiled, f int, r *run, opt Options) FieldResult {
	field := s.Fields[f]
	T := opt.Calibration.temperature(field.Name, opt.Temperature)
	fr := FieldResult{Name: field.Name, Type: field.Kind, Confidence: 1, AllowedTokenMass: math.Inf(1)}
	for i, d := range comp.decisions {
		if d.field != f {
			continue
		}
		dec := makeDecision(&d, r.scores[i], T)
		if opt.TokenLogprobs {
			for j := range dec.Candidates {
				dec.Candidates[j].TokenLogprobs = r.tokLP[i][j]
			}
		}
		fr.Decisions = append(fr.Decisions, dec)
		fr.Confidence = math.Min(fr.Confidence, dec.Confidence)
		fr.AllowedTokenMass = math.Min(fr.AllowedTokenMass, dec.AllowedTokenMass)
		switch field.Kind {
		case Choice, Score:
			best := 0
			for j, c := range dec.Candidates {
				if c.Probability > dec.Candidates[best].Probability {
					best = j
				}
			}
			fr.Winner = dec.Candidates[best].Value
			if field.Kind == Score {
				var e float64
				for j, c := range dec.Candidates {
					e += c.Probability * field.Options[j].Value
				}
				fr.ExpectedLevel = &e
			}
		case Bool:
			p := dec.Candidates[0].Probability
			fr.PTrue = &p
		case Independent:
			fr.Labels = append(fr.Labels, LabelResult{
				Label: field.Options[d.label].Name, PYes: dec.Candidates[0].Probability,
				Confidence: dec.Confidence, AllowedTokenMass: dec.AllowedTokenMass,
			})
		}
	}
	return fr
}

// makeDecision normalises log-likelihoods at temperature T.
func makeDecision(d *compiledDecision, s []float64, T float64) Decision {
	dec := Decision{Name: d.name, Temperature: T}
	switch {
	case d.fixed:
		dec.Boundary = "merged"
	case d.terminated:
		dec.Boundary = "terminated"
	}
	p := Softmax(s, T)
	var ent float64
	for j := range s {
		dec.Candidates = append(dec.Candidates, Candidate{Value: d.values[j], Probability: p[j], LogLikelihood: s[j]})
		dec.AllowedTokenMass += math.Exp(s[j])
		if p[j] > 0 {
			ent -= p[j] * math.Log(p[j])
		}
	}
	dec.Confidence = 1
	if len(s) > 1 {
		dec.Confidence = 1 - ent/math.Log(float64(len(s)))
	}
	return dec
}

// Softmax returns exp(s/T) normalised.
func Softmax(s []float64, T float64) []float64 {
	mx := math.Inf(-1)
	for _, v := range s {
		mx = math.Max(mx, v)
	}
	p := make([]float64, len(s))
	var sum float64
	for i, v := range s {
		p[i] = math.Exp((v - mx) / T)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// assemble writes the JSON answer in schema order: the winner of a Choice,
// the most probable level of a Score, true/false for a Bool, and an object of
// true/false per label (p_yes > 0.5) for an Independent field.
func assemble(s *Schema, fields []FieldResult) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(jsonString(f.Name) + ": ")
		switch f.Type {
		case Choice:
			b.WriteString(jsonString(f.Winner))
		case Catalog:
			b.WriteByte('[')
			for j, n := range f.Names {
				if j > 0 {
					b.WriteString(", ")
				}
				b.WriteString(jsonString(n))
			}
			b.WriteByte(']')
		case Score:
			for _, o := range s.Fields[i].Options {
				if o.Name == f.Winner {
					b.WriteString(levelText(o))
				}
			}
		case Bool:
			b.WriteString(strconv.FormatBool(*f.PTrue > 0.5))
		case Independent:
			b.WriteByte('{')
			for j, l := range f.Labels {
				if j > 0 {
					b.WriteString(", ")
				}
				b.WriteString(jsonString(l.Label) + ": " + strconv.FormatBool(l.PYes > 0.5))
			}
			b.WriteByte('}')
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

// Rows are the token rows a text input's scoring reads: the shared prefix
// and, per decision and candidate, the tokens after it (the key, any common
// lead and the candidate). A peer that scores the same rows does the same
// work (bench serve --dump-rows).
func (sc *Scorer) Rows(s *Schema, input string) (prefix []int32, rows [][][]int32, err error) {
	c, _, err := sc.compileCached(s.MediaPrompt(input, nil, false, sc.m.Chat()), s.decisions())
	if err != nil {
		return nil, nil, err
	}
	for _, d := range c.decisions {
		out := make([][]int32, len(d.cands))
		for i, cand := range d.cands {
			out[i] = append(append([]int32(nil), d.shared...), cand...)
		}
		rows = append(rows, out)
	}
	return c.prefixIDs, rows, nil
}
