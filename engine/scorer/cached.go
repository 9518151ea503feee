package scorer

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"verdict/engine/model"
	"verdict/native"
)

// The cached backend: every option of a choice or score field gets a short
// code ("A", "B", … or "1", "2", … when the letters run out), the prompt
// lists the options with their codes, and a question is answered by one
// forward pass over its suffix ({"priority": ") from the shared prefix: its
// one output vector gives the log-probability of every code's token. A bool
// (and each label of an independent field) reads " true" and " false" the
// same way after its key. Every code is checked to be one token after its
// suffix that does not merge with it.

const cachedSource = "cached: single-token answer codes, all read from one output vector per question, normalised over the codes"

// codeSchemes are the code alphabets tried in order: letters for up to 26
// options, then numbers, then upper and lower case letters.
func codeSchemes(n int) [][]string {
	var out [][]string
	letters := func(s string) []string {
		var cs []string
		for _, r := range s {
			cs = append(cs, string(r))
		}
		return cs
	}
	upper := letters("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
	both := append(slices.Clone(upper), letters("abcdefghijklmnopqrstuvwxyz")...)
	if n <= len(upper) {
		out = append(out, upper[:n])
	}
	nums := make([]string, n)
	for i := range nums {
		nums[i] = fmt.Sprint(i + 1)
	}
	out = append(out, nums)
	if n > len(upper) && n <= len(both) {
		out = append(out, both[:n])
	}
	return out
}

// codedDecision is a decision of the cached backend: its suffix after the
// prompt and each candidate's code and code token.
type codedDecision struct {
	decision
	suffix []int32
	codes  []string // code text after the suffix, per candidate
	ids    []int32
}

// coded reports whether a field's options are answered by codes (choice and
// score fields); bools read their JSON value's token.
func coded(f *Field) bool { return f.Kind == Choice || f.Kind == Score }

// cachedCodes gives each coded field of s its codes, checked after the
// field's suffix.
func (sc *Scorer) cachedCodes(s *Schema) (map[int][]string, error) {
	out := map[int][]string{}
	for i := range s.Fields {
		f := &s.Fields[i]
		if !coded(f) {
			continue
		}
		suffix := "{" + jsonString(f.Name) + `: "`
		var tried []string
		for _, codes := range codeSchemes(len(f.Options)) {
			if _, _, err := sc.codeTokens(suffix, codes); err == nil {
				out[i] = codes
				break
			} else {
				tried = append(tried, err.Error())
			}
		}
		if out[i] == nil {
			return nil, &SchemaError{Field: f.Name, Msg: fmt.Sprintf("no single-token answer codes for its %d options (%s)", len(f.Options), strings.Join(tried, "; "))}
		}
	}
	return out, nil
}

// codeTokens tokenizes suffix and suffix+code for every code: each code must
// add exactly one token, distinct from the others, to the suffix's tokens.
func (sc *Scorer) codeTokens(suffix string, codes []string) ([]int32, []int32, error) {
	key, ok := after(sc.tok, promptTail(sc.m.Chat()), suffix)
	if !ok || !slices.Equal(key, sc.tok.EncodePlain(suffix)) {
		return nil, nil, fmt.Errorf("its suffix %s merges with the end of the prompt", suffix)
	}
	ids := make([]int32, len(codes))
	for i, c := range codes {
		full, ok := after(sc.tok, promptTail(sc.m.Chat()), suffix+c)
		if !ok || len(full) != len(key)+1 || !slices.Equal(full[:len(key)], key) {
			return nil, nil, fmt.Errorf("code %q is not one token after %s", strings.TrimSpace(c), suffix)
		}
		ids[i] = full[len(key)]
		if j := slices.Index(ids[:i], ids[i]); j >= 0 {
			return nil, nil, fmt.Errorf("codes %q and %q are the same token", codes[j], c)
		}
	}
	return key, ids, nil
}

// codedCriteria describes a field's allowed answers with their codes.
func codedCriteria(codes map[int][]string, s *Schema) func(*Field) string {
	return func(f *Field) string {
		i := slices.IndexFunc(s.Fields, func(g Field) bool { return g.Name == f.Name })
		cs, ok := codes[i]
		if !ok {
			return f.criteria()
		}
		parts := make([]string, len(f.Options))
		for j, o := range f.Options {
			v := jsonString(o.Name)
			if f.Kind == Score {
				v = levelText(o)
			}
			parts[j] = cs[j] + "=" + v
			if d := strings.TrimSpace(o.Description); d != "" {
				parts[j] += " (" + d + ")"
			}
		}
		order := "One of"
		if f.Kind == Score {
			order = "One of, from lowest to highest"
		}
		return order + " (answer its code): " + strings.Join(parts, ", ") + "."
	}
}

// codedDecisions compiles the cached backend's decisions of s.
func (sc *Scorer) codedDecisions(s *Schema, codes map[int][]string) ([]codedDecision, error) {
	var out []codedDecision
	for _, d := range s.decisions() {
		cd := codedDecision{decision: d}
		suffix := d.key
		if cs, ok := codes[d.field]; ok {
			suffix, cd.codes = d.key+` "`, cs
		} else {
			cd.codes = d.texts // " true", " false"
		}
		key, ids, err := sc.codeTokens(suffix, cd.codes)
		if err != nil {
			return nil, &SchemaError{Field: d.name, Msg: err.Error()}
		}
		cd.suffix, cd.ids = key, ids
		out = append(out, cd)
	}
	return out, nil
}

// scoreCached is Score under the cached backend.
func (sc *Scorer) scoreCached(ctx context.Context, s *Schema, input string, opt Options) (*Result, error) {
	start := time.Now()
	if err := opt.Calibration.CheckSchema(s); err != nil {
		return nil, err
	}
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
	md, captions, err := sc.media(opt)
	if err != nil {
		return nil, err
	}
	codes, err := sc.cachedCodes(s)
	if err != nil {
		return nil, err
	}
	ds, err := sc.codedDecisions(s, codes)
	if err != nil {
		return nil, err
	}
	decoded, err := sc.decodedFields(s, BackendJSON, func(text string) ([]int32, bool) { return after(sc.tok, promptTail(sc.m.Chat()), text) })
	if err != nil {
		return nil, err
	}
	p, err := sized(s.promptWith(input, captions, md != nil && md.Audio != nil, sc.m.Chat(), codedCriteria(codes, s)), sc.m.Chat(), md)
	if err != nil {
		return nil, err
	}
	comp, err := compile(sc.tok, p, nil, sc.m.Chat())
	if err != nil {
		return nil, err
	}
	res := &Result{
		ProbabilitySource: cachedSource, Note: resultNote, PromptTokens: len(comp.prefixIDs),
		Decisions: len(ds) + len(decoded), Calibration: opt.Calibration.status(opt.Temperature), BranchBatch: batch,
	}
	if len(decoded) > 0 {
		res.ProbabilitySource += "; " + catalogSource
		if len(ds) == 0 {
			res.ProbabilitySource = catalogSource
		}
	}
	res.Timings.InputPreparation = Duration(time.Since(start))
	stage := func(name string) {
		if opt.OnStage != nil {
			opt.OnStage(name, time.Since(start))
		}
	}
	stage("input")

	t := time.Now()
	seqs := []int{len(comp.prefixIDs)}
	for _, d := range ds {
		seqs = append(seqs, len(d.suffix))
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
	cache := sc.m.NewCache()
	defer cache.Free()
	cache.Bind(tk)
	cache.OnLayer(opt.OnPrefill)
	var b model.Batch
	if md == nil {
		b.Add(cache, comp.prefixIDs, 0)
	} else {
		err = sc.m.AddMultimodal(&b, cache, comp.prefixIDs, *md, 0)
	}
	if err == nil {
		err = model.RunAll(x, &b)
	}
	cache.OnLayer(nil)
	if err != nil {
		return nil, err
	}
	res.Timings.Prefill = Duration(time.Since(t))
	res.Timings.PrefillTPS = float64(len(comp.prefixIDs)) / time.Since(t).Seconds()
	stage("prefill")

	scores, err := sc.cachedScores(ctx, x, cache, ds, batch, func(d time.Duration) {
		res.Timings.Batches = append(res.Timings.Batches, Duration(d))
		stage("batch")
	})
	if err != nil {
		return nil, err
	}
	res.BranchRows = len(ds)
	// The results take the json backend's shape: each code's log-probability
	// stands for its candidate's log-likelihood.
	rc := &compiled{prefixIDs: comp.prefixIDs}
	r := &run{scores: scores, tokLP: make([][][]float64, len(ds))}
	for i, d := range ds {
		rc.decisions = append(rc.decisions, compiledDecision{decision: d.decision})
		for _, v := range scores[i] {
			r.tokLP[i] = append(r.tokLP[i], []float64{v})
		}
	}
	res.Fields = make([]FieldResult, len(s.Fields))
	for f := range s.Fields {
		if !slices.ContainsFunc(ds, func(d codedDecision) bool { return d.field == f }) {
			continue
		}
		res.Fields[f] = fieldResult(s, rc, f, r, opt)
		res.Fields[f].Elapsed = Duration(time.Since(start))
		if res.Timings.FirstDecision == 0 {
			res.Timings.FirstDecision = res.Fields[f].Elapsed
		}
		if opt.OnField != nil {
			opt.OnField(res.Fields[f])
		}
	}
	if len(decoded) > 0 {
		if err := sc.decode(ctx, s, decoded, cache, res, opt, func(f *FieldResult) {
			f.Elapsed = Duration(time.Since(start))
			if res.Timings.FirstDecision == 0 {
				res.Timings.FirstDecision = f.Elapsed
			}
			if opt.OnField != nil {
				opt.OnField(*f)
			}
		}); err != nil {
			return nil, err
		}
	}
	res.Answer = assemble(s, res.Fields)
	res.Timings.Total = Duration(time.Since(start))
	return res, nil
}

// cachedScores runs every decision's suffix from the prefix in cache (only
// read), batch suffixes per forward pass (each over its own fork of the
// prefix), and returns the log-probability of each code token at the
// suffix's last position. The tokens all suffixes begin with join a fork of
// the prefix first.
func (sc *Scorer) cachedScores(ctx context.Context, x model.Runner, cache model.Cache, ds []codedDecision, batch int, onBatch func(time.Duration)) ([][]float64, error) {
	out := make([][]float64, len(ds))
	if len(ds) == 0 {
		return out, nil
	}
	lead := len(ds[0].suffix) - 1
	for _, d := range ds {
		lead = min(lead, len(d.suffix)-1, commonPrefix(d.suffix, ds[0].suffix))
	}
	var b model.Batch
	base := cache
	if lead > 0 {
		base = cache.Clone()
		defer base.Free()
		b.Add(base, ds[0].suffix[:lead], 0)
		if err := model.RunAll(x, &b); err != nil {
			return nil, err
		}
	}
	var row, col []int32
	for lo := 0; lo < len(ds); lo += batch {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t := time.Now()
		part := ds[lo:min(lo+batch, len(ds))]
		b.Reset()
		forks := make([]model.Cache, len(part))
		row, col = row[:0], col[:0]
		for i, d := range part {
			forks[i] = base.Clone()
			b.Add(forks[i], d.suffix[lead:], 1)
			for _, id := range d.ids {
				row, col = append(row, int32(i)), append(col, id)
			}
		}
		err := func() error {
			defer func() {
				for _, f := range forks {
					f.Free()
				}
			}()
			if len(b.Rows) > x.Rows() {
				return fmt.Errorf("scorer: %d suffix tokens in one batch exceed the %d rows of a forward pass", len(b.Rows), x.Rows())
			}
			sel, lse := make([]float32, len(row)), make([]float32, len(part))
			err := x.Run(&b, func(x model.Exec, h native.Tensor) error {
				return x.SelectLogprobs(sel, lse, h, row, col)
			})
			if err != nil {
				return err
			}
			for j := range row {
				out[lo+int(row[j])] = append(out[lo+int(row[j])], float64(sel[j])-float64(lse[row[j]]))
			}
			return nil
		}()
		if err != nil {
			return nil, err
		}
		onBatch(time.Since(t))
	}
	return out, nil
}
