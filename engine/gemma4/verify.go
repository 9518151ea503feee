package gemma4

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"verdict/engine/weights"
)

// TolF32 is the default tolerance of the reference checks, for the float32
// fixtures (a fixture's meta.json "tolerances" replace it for the checks they
// name).
//
// The float32 fixtures' references are transformers' float32 run on the GPU;
// this decoder is float32 too (kernels.go), with a different summation order,
// so the two differ by float32 rounding carried through 6 layers. The f64
// fixture measures that carry for transformers itself: its float32 lies
// 1.0e-5 from float64 on the logits and 1.2e-5 (scaled) on the hidden states;
// this decoder lies 5.4e-6 and 6.7e-6 from float64, and at most 5.5e-6 /
// 7.5e-6 from the float32 references. TolF32 = 2.5e-5 is 2.5 times
// transformers' own float32 error and 3 times ours, and still 15 times below
// the smallest top-2 logit margin (3.8e-4 tiny, 1.2e-3 moe), so that argmax
// and greedy stay exact. Logits (soft-capped), router probabilities and
// per-layer inputs are O(1) here, so this is both an absolute and a relative
// bound; hidden states are compared scaled by max(1, the layer's largest
// |reference|), as the Gemma 3n checks do. A real mistake (a norm weight off
// by 1%, a window off by one, a wrong RoPE fraction) moves these by 1e-4 or
// more: TestChecksCanFail.
const TolF32 = 2.5e-5

// Check is one comparison of the decoder against a fixture's reference.
type Check struct {
	Name string
	// MaxErr is the largest absolute error (hidden states: scaled by
	// max(1, |reference|)); for the exact checks (argmax, top-k indices,
	// greedy tokens, decode against prefill) a count of mismatches or 0.
	MaxErr float64
	Tol    float64
	Note   string
}

// OK reports whether the check passes (a NaN error never does).
func (c Check) OK() bool { return c.MaxErr <= c.Tol }

// FixtureMeta is the part of a Gemma 4 fixture's meta.json the checks read.
type FixtureMeta struct {
	Family       string        `json:"family"`
	Variant      string        `json:"variant"`
	DType        string        `json:"dtype"`
	IDs          []int         `json:"text_prompt_ids"`
	Greedy8      []int         `json:"greedy_8"`
	ExtraPrompts []ExtraPrompt `json:"extra_prompts"`
	// Tolerances are the fixture's own, by check name; they replace TolF32.
	Tolerances map[string]float64 `json:"tolerances"`
	// LogitsPositions are the prompt positions whose logits a full-size
	// fixture stores (expected.safetensors "logits_at", one row each) in
	// place of every position's ("logits").
	LogitsPositions []int `json:"logits_positions"`
}

// ExtraPrompt is one of meta.json's extra_prompts: its ids, the name of its
// logits in expected.safetensors and its greedy continuation.
type ExtraPrompt struct {
	Name    string `json:"name"`
	IDs     []int  `json:"input_ids"`
	Logits  string `json:"logits"`
	Greedy8 []int  `json:"greedy_8"`
}

// scoringIDs is scoring_ids.json: log-likelihood sums of candidate ids after
// a prefix and a field.
type scoringIDs struct {
	Prefix []int `json:"prefix_ids"`
	Fields []struct {
		Name        string    `json:"name"`
		FieldIDs    []int     `json:"field_ids"`
		Candidates  [][]int   `json:"candidate_ids"`
		LogprobSums []float64 `json:"logprob_sums"`
	} `json:"fields"`
}

// refTensor is one tensor of expected.safetensors: F32 as f, I32 as i.
type refTensor struct {
	shape []int
	f     []float32
	i     []int
}

// Fixture is a Gemma 4 reference fixture folder
// (build/fixtures/make_gemma4_fixtures.py): config.json, the weights,
// meta.json, expected.safetensors and, optionally, scoring_ids.json. The
// weights are model.safetensors or, where it is absent (the full-size
// fixtures), recipe.json (and buffers.safetensors), which regenerates them.
type Fixture struct {
	Dir  string
	Cfg  *Config
	Meta FixtureMeta

	store   weights.Store
	exp     map[string]refTensor
	scoring *scoringIDs
}

// OpenFixture reads the fixture folder dir. Close releases its weights.
func OpenFixture(dir string) (*Fixture, error) {
	fx := &Fixture{Dir: dir}
	js, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("gemma4: fixture: %w", err)
	}
	if fx.Cfg, err = ParseConfig(js); err != nil {
		return nil, fmt.Errorf("gemma4: fixture: config.json: %w", err)
	}
	mj, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return nil, fmt.Errorf("gemma4: fixture: %w", err)
	}
	if err := json.Unmarshal(mj, &fx.Meta); err != nil {
		return nil, fmt.Errorf("gemma4: fixture: meta.json: %w", err)
	}
	if fx.Meta.Family != "" && fx.Meta.Family != "gemma4" {
		return nil, fmt.Errorf("gemma4: fixture: meta.json family is %q, not gemma4", fx.Meta.Family)
	}
	if len(fx.Meta.IDs) == 0 {
		return nil, errors.New("gemma4: fixture: meta.json has no text_prompt_ids")
	}
	for k, v := range fx.Meta.Tolerances {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("gemma4: fixture: meta.json tolerances: %s is %v, want a finite number >= 0", k, v)
		}
	}
	if fx.exp, err = readExpected(filepath.Join(dir, "expected.safetensors")); err != nil {
		return nil, fmt.Errorf("gemma4: fixture: %w", err)
	}
	sj, err := os.ReadFile(filepath.Join(dir, "scoring_ids.json"))
	switch {
	case err == nil:
		fx.scoring = &scoringIDs{}
		if err := json.Unmarshal(sj, fx.scoring); err != nil {
			return nil, fmt.Errorf("gemma4: fixture: scoring_ids.json: %w", err)
		}
		if err := fx.scoring.check(); err != nil {
			return nil, fmt.Errorf("gemma4: fixture: scoring_ids.json: %w", err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("gemma4: fixture: %w", err)
	}
	if err := fx.checkPositions(); err != nil {
		return nil, err
	}
	if fx.store, err = openFixtureWeights(dir); err != nil {
		return nil, fmt.Errorf("gemma4: fixture: %w", err)
	}
	return fx, nil
}

// openFixtureWeights opens a fixture's weights: model.safetensors, else
// the PRNG recipe (recipe.json, with buffers.safetensors when present).
func openFixtureWeights(dir string) (weights.Store, error) {
	st := filepath.Join(dir, "model.safetensors")
	_, err := os.Stat(st)
	if err == nil {
		return weights.OpenSafetensors(st)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "recipe.json")); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errors.New("no weights: neither model.safetensors nor recipe.json")
		}
		return nil, err
	}
	return weights.OpenRecipe(dir)
}

// checkPositions checks the stored logits against the prompt: every
// position's ("logits"), or those of meta.json's logits_positions
// ("logits_at", a row each), each position inside the prompt and named once.
func (fx *Fixture) checkPositions() error {
	n := len(fx.Meta.IDs)
	_, full := fx.exp["logits"]
	at, some := fx.exp["logits_at"]
	pos := fx.Meta.LogitsPositions
	switch {
	case full && some:
		return errors.New("gemma4: fixture: expected.safetensors holds both logits and logits_at")
	case full:
		return nil
	case !some:
		return errors.New("gemma4: fixture: expected.safetensors has no logits (or logits_at)")
	case len(pos) == 0:
		return errors.New("gemma4: fixture: expected.safetensors holds logits_at but meta.json has no logits_positions")
	case len(at.shape) != 2 || at.shape[0] != len(pos):
		return fmt.Errorf("gemma4: fixture: logits_at has shape %v, want [%d, vocab] for meta.json's %d logits_positions", at.shape, len(pos), len(pos))
	}
	seen := make(map[int]bool, len(pos))
	for _, p := range pos {
		if p < 0 || p >= n {
			return fmt.Errorf("gemma4: fixture: meta.json logits_positions: %d is outside the prompt of %d tokens", p, n)
		}
		if seen[p] {
			return fmt.Errorf("gemma4: fixture: meta.json logits_positions: %d appears twice", p)
		}
		seen[p] = true
	}
	return nil
}

// logitRows is the rows of logits [n, V] at positions pos, in their order.
func logitRows(logits []float32, pos []int, V int) []float32 {
	out := make([]float32, 0, len(pos)*V)
	for _, p := range pos {
		out = append(out, logits[p*V:(p+1)*V]...)
	}
	return out
}

func (s *scoringIDs) check() error {
	if len(s.Fields) == 0 {
		return errors.New("no fields")
	}
	for _, f := range s.Fields {
		if len(s.Prefix)+len(f.FieldIDs) == 0 {
			return fmt.Errorf("field %q: no prefix or field ids to score after", f.Name)
		}
		if len(f.LogprobSums) != len(f.Candidates) {
			return fmt.Errorf("field %q: %d logprob_sums for %d candidates", f.Name, len(f.LogprobSums), len(f.Candidates))
		}
	}
	return nil
}

// Close releases the fixture's weights.
func (fx *Fixture) Close() error {
	if fx.store == nil {
		return nil
	}
	return fx.store.Close()
}

// Load loads the fixture's decoder.
func (fx *Fixture) Load() (*Model, error) { return Load(fx.Cfg, fx.store) }

// Tolerance is the fixture's tolerance of a check: meta.json's when it names
// the check (fromMeta), else TolF32 (0 for argmax_all, an exact check).
func (fx *Fixture) Tolerance(name string) (tol float64, fromMeta bool) {
	if v, ok := fx.Meta.Tolerances[name]; ok {
		return v, true
	}
	if name == "argmax_all" {
		return 0, false
	}
	return TolF32, false
}

// VerifyFixture runs every check of the Gemma 4 fixture folder dir on the
// CPU. An error means a check could not run (a missing or malformed file or
// reference); a check that runs and misses its tolerance is a Check that is
// not OK.
func VerifyFixture(dir string) ([]Check, error) {
	return withFixture(dir, func(fx *Fixture, m *Model) ([]Check, error) { return fx.Run(m) })
}

// withFixture opens the fixture folder dir, loads its decoder and runs
// checks on them.
func withFixture(dir string, checks func(*Fixture, *Model) ([]Check, error)) ([]Check, error) {
	fx, err := OpenFixture(dir)
	if err != nil {
		return nil, err
	}
	defer fx.Close()
	m, err := fx.Load()
	if err != nil {
		return nil, err
	}
	return checks(fx, m)
}

// Run runs m over the fixture's prompts and compares everything the fixture
// holds: the prompt's logits at every position, their logsumexp and argmax,
// the hidden states of each layer, the per-layer inputs (PLE), the router's
// probabilities, top-k indices and weights (MoE), the logits of a cached
// decode (against the references and bit for bit against the prefill),
// greedy_8, each extra prompt's logits and greedy continuation, and
// scoring_ids.json's log-likelihood sums. It returns an error only for a
// failure to run.
func (fx *Fixture) Run(m *Model) ([]Check, error) { return fx.run(refPasses{m}) }

// passes are what the checks run: the reference decoder (refPasses), or
// a Decoder behind the engine's interface (decPasses, verify_decoder.go).
type passes interface {
	config() *Config
	// forward returns the logits of every position of ids, continuing the
	// cache c (one of newCache's; nil: a fresh one), with the hidden states
	// in tr when it is set (and, when traced, the per-layer inputs and
	// router outputs).
	forward(ids []int, c any, tr *Trace) ([]float32, error)
	newCache() any
	freeCache(c any)
	generate(ids []int, n int) ([]int, error)
	traced() bool
}

// refPasses runs the checks on the reference decoder.
type refPasses struct{ m *Model }

func (p refPasses) config() *Config { return p.m.Cfg }
func (p refPasses) forward(ids []int, c any, tr *Trace) ([]float32, error) {
	cache, _ := c.(*Cache)
	return p.m.Forward(ids, cache, tr)
}
func (p refPasses) newCache() any                            { return p.m.NewCache() }
func (p refPasses) freeCache(any)                            {}
func (p refPasses) generate(ids []int, n int) ([]int, error) { return p.m.Generate(ids, n) }
func (p refPasses) traced() bool                             { return true }

func (fx *Fixture) run(m passes) ([]Check, error) {
	c := m.config()
	V, D, L := c.Vocab, c.Hidden, c.Layers
	var out []Check
	add := func(name string, err, tol float64, note string) {
		out = append(out, Check{name, err, tol, note})
	}
	// addTol adds a check whose tolerance is the fixture's (tolerance key).
	addTol := func(name, key string, err float64, note string) {
		tol, own := fx.Tolerance(key)
		if own {
			note = joinNote(note, "tolerance from the fixture's meta.json")
		}
		add(name, err, tol, note)
	}
	ref := func(name string) (refTensor, error) {
		r, ok := fx.exp[name]
		if !ok {
			return refTensor{}, fmt.Errorf("gemma4: fixture: expected.safetensors has no %s", name)
		}
		return r, nil
	}
	diff := func(name string, got []float32, ref string) (float64, error) {
		want, err := fx.refF32(ref)
		if err != nil {
			return 0, err
		}
		e, err := maxAbs(got, want)
		if err != nil {
			return 0, fmt.Errorf("gemma4: fixture: %s: %w", name, err)
		}
		return e, nil
	}

	ids := fx.Meta.IDs
	n := len(ids)
	var tr Trace
	logits, err := m.forward(ids, nil, &tr)
	if err != nil {
		return nil, err
	}
	// The stored logits: every position's, or (a full-size fixture) those
	// of logits_positions; lgName names both the reference and its check.
	lgName, atRows := "logits", func(lg []float32) []float32 { return lg }
	if _, full := fx.exp["logits"]; !full {
		pos := fx.Meta.LogitsPositions
		lgName, atRows = "logits_at", func(lg []float32) []float32 { return logitRows(lg, pos, V) }
	}
	if len(logits) != n*V {
		return nil, fmt.Errorf("gemma4: fixture: the prompt of %d tokens gave %d logits, want %d", n, len(logits), n*V)
	}
	e, err := diff(lgName, atRows(logits), lgName)
	if err != nil {
		return nil, err
	}
	where := fmt.Sprintf("%d positions", n)
	if lgName == "logits_at" {
		where = fmt.Sprintf("positions %v of %d", fx.Meta.LogitsPositions, n)
	}
	addTol(lgName, lgName, e, fmt.Sprintf("%s × %d, max |ref| %.3g", where, V, maxMag(fx.exp[lgName].f)))

	// logsumexp_all, in float64 from the float32 logits.
	lse := make([]float32, n)
	am := make([]int, n)
	for i := range n {
		row := logits[i*V : (i+1)*V]
		lse[i] = float32(logSumExp(row))
		am[i] = argmax(row)
	}
	if e, err = diff("logsumexp_all", lse, "logsumexp_all"); err != nil {
		return nil, err
	}
	addTol("logsumexp_all", "logsumexp_all", e, "")
	wam, err := ref("argmax_all")
	if err != nil {
		return nil, err
	}
	if len(wam.i) != n {
		return nil, fmt.Errorf("gemma4: fixture: argmax_all: %d int32 values, want %d", len(wam.i), n)
	}
	addTol("argmax_all", "argmax_all", float64(mismatches(am, wam.i)), "mismatches")

	// hidden_states [L+1, 1, n, D], each layer scaled by max(1, max |ref|).
	hs, err := fx.refF32("hidden_states")
	if err != nil {
		return nil, err
	}
	if len(tr.Hidden) != L+1 || len(hs) != (L+1)*n*D {
		return nil, fmt.Errorf("gemma4: fixture: hidden_states: %d layers traced, the reference holds %d values, want %d", len(tr.Hidden), len(hs), (L+1)*n*D)
	}
	worst, per := 0.0, ""
	for k := range L + 1 {
		r := hs[k*n*D : (k+1)*n*D]
		e, err := maxAbs(tr.Hidden[k], r)
		if err != nil {
			return nil, fmt.Errorf("gemma4: fixture: hidden_states layer %d: %w", k-1, err)
		}
		e /= math.Max(1, maxMag(r))
		if math.IsNaN(e) || e > worst {
			worst = e
		}
		per += fmt.Sprintf(" %.2g", e)
	}
	addTol("hidden_states", "hidden_states", worst, "scaled, per layer:"+per)

	if _, ok := fx.exp["per_layer_inputs"]; ok && m.traced() {
		if e, err = diff("per_layer_inputs", tr.PerLayerInputs, "per_layer_inputs"); err != nil {
			return nil, err
		}
		addTol("per_layer_inputs", "per_layer_inputs", e, "")
	}
	if _, ok := fx.exp["moe_router_probs"]; ok && m.traced() {
		if len(tr.RouterProbs) != L || len(tr.TopKWeights) != L || len(tr.TopKIndex) != L {
			return nil, fmt.Errorf("gemma4: fixture: the fixture holds MoE router outputs, the model traced %d layers of them (is the config's MoE on?)", len(tr.RouterProbs))
		}
		var probs, weights []float32
		var index []int
		for l := range L {
			probs = append(probs, tr.RouterProbs[l]...)
			weights = append(weights, tr.TopKWeights[l]...)
			index = append(index, tr.TopKIndex[l]...)
		}
		if e, err = diff("moe_router_probs", probs, "moe_router_probs"); err != nil {
			return nil, err
		}
		addTol("moe_router_probs", "moe_router_probs", e, "")
		wi, err := ref("moe_top_k_index")
		if err != nil {
			return nil, err
		}
		if len(wi.i) != len(index) {
			return nil, fmt.Errorf("gemma4: fixture: moe_top_k_index: %d int32 values, want %d", len(wi.i), len(index))
		}
		add("moe_top_k_index", float64(mismatches(index, wi.i)), 0, "mismatches")
		if e, err = diff("moe_top_k_weights", weights, "moe_top_k_weights"); err != nil {
			return nil, err
		}
		addTol("moe_top_k_weights", "moe_top_k_weights", e, "")
	}

	// Decoding with the cache gives the prefill's logits: prefill n-8 (at
	// least one token), then one token at a time.
	if n >= 2 {
		cache := m.newCache()
		defer m.freeCache(cache)
		split := max(n-8, 1)
		dec, err := m.forward(ids[:split], cache, nil)
		if err != nil {
			return nil, err
		}
		for i := split; i < n; i++ {
			row, err := m.forward(ids[i:i+1], cache, nil)
			if err != nil {
				return nil, err
			}
			dec = append(dec, row...)
		}
		if len(dec) != n*V {
			return nil, fmt.Errorf("gemma4: fixture: the cached decode gave %d logits, want %d", len(dec), n*V)
		}
		if e, err = diff("logits (cached decode)", atRows(dec), lgName); err != nil {
			return nil, err
		}
		addTol("logits_decode", lgName, e, fmt.Sprintf("prefill %d then %d one by one", split, n-split))
		// …and bit for bit this decoder's own prefill (a token's arithmetic
		// does not depend on what runs beside it).
		e, _ = maxAbs(dec, logits)
		add("decode_vs_prefill", e, 0, "this decoder's cached decode against its own prefill")
	}

	if len(fx.Meta.Greedy8) > 0 {
		g, err := m.generate(ids, len(fx.Meta.Greedy8))
		if err != nil {
			return nil, err
		}
		// Exact, unless meta.json allows the steps after a near tie (a
		// full-size fixture whose top-2 margin is within its logits'
		// tolerance).
		tol, own := fx.Meta.Tolerances["greedy_8"]
		note := fmt.Sprint(g)
		if own {
			note = joinNote(note, "tolerance from the fixture's meta.json")
		}
		add("greedy_8", float64(mismatches(g, fx.Meta.Greedy8)), tol, note)
	}

	for _, x := range fx.Meta.ExtraPrompts {
		if len(x.IDs) == 0 || x.Logits == "" {
			return nil, fmt.Errorf("gemma4: fixture: meta.json extra prompt %q has no input_ids or logits", x.Name)
		}
		lg, err := m.forward(x.IDs, nil, nil)
		if err != nil {
			return nil, err
		}
		if e, err = diff(x.Logits, lg, x.Logits); err != nil {
			return nil, err
		}
		note := fmt.Sprintf("%d tokens", len(x.IDs))
		if len(x.IDs) > c.SlidingWindow {
			note += fmt.Sprintf(", past the window of %d", c.SlidingWindow)
		}
		addTol(x.Logits, x.Logits, e, note)
		if len(x.Greedy8) > 0 {
			g, err := m.generate(x.IDs, len(x.Greedy8))
			if err != nil {
				return nil, err
			}
			add(x.Name+"_greedy_8", float64(mismatches(g, x.Greedy8)), 0, fmt.Sprint(g))
		}
	}

	// scoring_ids.json: log-likelihood sums of candidate id sequences after
	// a prefix and a field, in float64 from the float32 logits.
	if s := fx.scoring; s != nil {
		for _, f := range s.Fields {
			worst := 0.0
			for ci, cand := range f.Candidates {
				seq := append(append(append([]int(nil), s.Prefix...), f.FieldIDs...), cand...)
				lg, err := m.forward(seq, nil, nil)
				if err != nil {
					return nil, fmt.Errorf("gemma4: fixture: scoring_ids.json field %q: %w", f.Name, err)
				}
				start := len(seq) - len(cand)
				var sum float64
				for k, tok := range cand {
					row := lg[(start+k-1)*V : (start+k)*V]
					sum += float64(row[tok]) - logSumExp(row)
				}
				if d := math.Abs(sum - f.LogprobSums[ci]); math.IsNaN(d) || d > worst {
					worst = d
				}
			}
			addTol("scoring_ids."+f.Name, "scoring_ids.logprob_sums", worst, fmt.Sprintf("%d candidates", len(f.Candidates)))
		}
	}
	return out, nil
}

// refF32 is a float32 reference of expected.safetensors.
func (fx *Fixture) refF32(name string) ([]float32, error) {
	r, ok := fx.exp[name]
	if !ok {
		return nil, fmt.Errorf("gemma4: fixture: expected.safetensors has no %s", name)
	}
	if r.f == nil {
		return nil, fmt.Errorf("gemma4: fixture: expected.safetensors: %s is not F32", name)
	}
	return r.f, nil
}

// readExpected reads a safetensors file of F32 and I32 tensors (the weights
// stores read floats only).
func readExpected(file string) (map[string]refTensor, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	name := filepath.Base(file)
	if len(b) < 8 {
		return nil, fmt.Errorf("%s: too short", name)
	}
	hn := binary.LittleEndian.Uint64(b)
	if hn > uint64(len(b)-8) {
		return nil, fmt.Errorf("%s: header of %d bytes in a file of %d", name, hn, len(b))
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+hn], &hdr); err != nil {
		return nil, fmt.Errorf("%s: header: %w", name, err)
	}
	data := b[8+hn:]
	out := map[string]refTensor{}
	for tn, raw := range hdr {
		if tn == "__metadata__" {
			continue
		}
		var e struct {
			DType   string   `json:"dtype"`
			Shape   []int    `json:"shape"`
			Offsets [2]int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", name, tn, err)
		}
		if e.Offsets[0] < 0 || e.Offsets[1] < e.Offsets[0] || e.Offsets[1] > int64(len(data)) {
			return nil, fmt.Errorf("%s: %s: data_offsets %v outside the %d bytes of data", name, tn, e.Offsets, len(data))
		}
		count := 1
		for _, d := range e.Shape {
			if d < 0 || (d > 0 && count > len(data)/d) {
				return nil, fmt.Errorf("%s: %s: shape %v", name, tn, e.Shape)
			}
			count *= d
		}
		seg := data[e.Offsets[0]:e.Offsets[1]]
		if len(seg) != 4*count {
			return nil, fmt.Errorf("%s: %s: %d bytes for shape %v of %s", name, tn, len(seg), e.Shape, e.DType)
		}
		t := refTensor{shape: e.Shape}
		switch e.DType {
		case "F32":
			t.f = make([]float32, count)
			for k := range t.f {
				t.f[k] = math.Float32frombits(binary.LittleEndian.Uint32(seg[4*k:]))
			}
		case "I32":
			t.i = make([]int, count)
			for k := range t.i {
				t.i[k] = int(int32(binary.LittleEndian.Uint32(seg[4*k:])))
			}
		default:
			return nil, fmt.Errorf("%s: %s is %s, want F32 or I32", name, tn, e.DType)
		}
		out[tn] = t
	}
	return out, nil
}

// maxAbs is max |a-b| (+Inf where one is NaN); the lengths must agree.
func maxAbs(a, b []float32) (float64, error) {
	if len(a) != len(b) {
		return 0, fmt.Errorf("%d values, the reference holds %d", len(a), len(b))
	}
	var w float64
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(d) {
			return math.Inf(1), nil
		}
		w = math.Max(w, d)
	}
	return w, nil
}

// maxMag is max |a|.
func maxMag(a []float32) float64 {
	var w float64
	for _, v := range a {
		w = math.Max(w, math.Abs(float64(v)))
	}
	return w
}

// logSumExp of a row, in float64. It is taken about the row's largest value
// (not its largest magnitude), so that a row of negatives does not overflow.
func logSumExp(row []float32) float64 {
	mx := math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - mx)
	}
	return mx + math.Log(s)
}

func mismatches(a, b []int) int {
	n := 0
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || a[i] != b[i] {
			n++
		}
	}
	return n
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
