// The two sides of a run: the scorer and ordinary generation.

package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"verdict/engine/scorer"
	"verdict/engine/session"
)

// catalogLiveTokens is how many of a live catalog step's legal tokens an
// update carries (the field's result has them all).
const catalogLiveTokens = 8

func (r *run) scorerSide(ctx context.Context, l *loaded, schema *scorer.Schema, input string, opt scorer.Options, prep *sharedPrep) {
	start := time.Now()
	r.mu.Lock()
	sc := r.rec.Scorer
	sc.Timing.StartMs = ms(start.Sub(r.t0))
	r.scorerChanged(true)
	r.mu.Unlock()
	r.th.poke()

	if prep != nil {
		opt.Media = func() (*scorer.Media, error) {
			p, err := prep.wait(ctx)
			if err != nil {
				return nil, err
			}
			return &p.Media, nil
		}
	}
	// Live stages: input preparation, prefill, then every branch batch.
	var last time.Duration
	opt.OnStage = func(stage string, elapsed time.Duration) {
		r.mu.Lock()
		switch stage {
		case "input":
			sc.Status = StatusPrefilling
			sc.Timing.InputPrepMs = ms(elapsed)
		case "prefill":
			sc.Status = StatusScoring
			sc.Timing.PrefillMs = ms(elapsed - last)
		case "batch":
			sc.Timing.BatchesMs = append(sc.Timing.BatchesMs, ms(elapsed-last))
		}
		last = elapsed
		r.scorerChanged(true)
		r.mu.Unlock()
		r.th.poke()
	}

	opt.OnCatalogStep = func(field string, names []string, st scorer.CatalogStep) {
		if len(st.Tokens) > catalogLiveTokens {
			st.Tokens = st.Tokens[:catalogLiveTokens] // the most probable
		}
		r.mu.Lock()
		r.scorerChanged(false)
		r.up.Scorer.Catalog = append(r.up.Scorer.Catalog, CatalogLive{field, names, st})
		r.mu.Unlock()
		r.th.poke()
	}
	opt.OnPrefill = func(done, total int) {
		r.mu.Lock()
		sc.Timing.PrefillDone, sc.Timing.PrefillLayers = done, total
		r.scorerChanged(true)
		r.mu.Unlock()
		r.th.poke()
	}
	opt.OnField = func(f scorer.FieldResult) {
		r.mu.Lock()
		sc.Fields = append(sc.Fields, f)
		first := sc.Timing.FirstDecisionMs == 0
		if first {
			sc.Timing.FirstDecisionMs = ms(time.Since(start))
		}
		r.scorerChanged(first)
		r.up.Scorer.Fields = append(r.up.Scorer.Fields, f)
		r.mu.Unlock()
		r.th.poke()
	}
	res, err := l.s.Score(ctx, schema, input, opt)

	r.mu.Lock()
	defer func() {
		r.scorerChanged(true)
		r.mu.Unlock()
		r.th.poke()
	}()
	sc.Timing.TotalMs = ms(time.Since(start))
	if err != nil {
		sc.Status, sc.Error = sideError(ctx, err)
		return
	}
	t := res.Timings
	sc.Status = StatusDone
	sc.Fields = res.Fields
	sc.Answer, sc.RawAnswer = res.Answer, res.RawAnswer
	sc.ProbabilitySource, sc.Calibration, sc.Note = res.ProbabilitySource, res.Calibration, res.Note
	sc.Decisions, sc.BranchRows, sc.BranchBatch, sc.CachedSchema = res.Decisions, res.BranchRows, res.BranchBatch, res.CachedSchema
	sc.Timing.InputPrepMs = msD(t.InputPreparation)
	sc.Timing.PrefillMs = msD(t.Prefill)
	sc.Timing.PromptTokens = res.PromptTokens
	sc.Timing.PrefixReused = min(t.PrefixReused, res.PromptTokens)
	sc.Timing.PrefillTPS = computedRate(res.PromptTokens-sc.Timing.PrefixReused, time.Duration(t.Prefill))
	sc.Timing.FirstDecisionMs = msD(t.FirstDecision)
	sc.Timing.BatchesMs = nil
	for _, b := range t.Batches {
		sc.Timing.BatchesMs = append(sc.Timing.BatchesMs, msD(b))
	}
	sc.Timing.TotalMs = msD(t.Total)
}

func (r *run) generatorSide(ctx context.Context, l *loaded, schema *scorer.Schema, input string, set GenerationSettings, media *sharedPrep) {
	start := time.Now()
	r.mu.Lock()
	g := r.rec.Generator
	g.Timing.StartMs = ms(start.Sub(r.t0))
	r.generatorChanged(true)
	r.mu.Unlock()
	r.th.poke()

	fail := func(err error) {
		r.mu.Lock()
		g.Status, g.Error = sideError(ctx, err)
		g.Timing.TotalMs = ms(time.Since(start))
		r.generatorChanged(true)
		r.mu.Unlock()
		r.th.poke()
	}
	req := session.Request{
		Kind: session.PromptSchema, Input: input, Schema: schema,
		Sampling: set.Sampling(),
	}
	if set.Prompt == PromptChat {
		req.Kind = session.PromptChat
	}
	if media != nil {
		p, err := media.wait(ctx)
		if err != nil {
			fail(err)
			return
		}
		req.Media = &p.Media
	}
	var prep time.Duration
	prompted := false
	req.OnPrompt = func(tokens int) {
		prompted = true
		prep = time.Since(start)
		r.mu.Lock()
		g.Status = StatusPrefilling
		g.Timing.InputPrepMs = ms(prep)
		g.Timing.PromptTokens = tokens
		r.generatorChanged(true)
		r.mu.Unlock()
		r.th.poke()
	}
	req.OnPrefill = func(done, total int) {
		r.mu.Lock()
		g.Timing.PrefillDone, g.Timing.PrefillLayers = done, total
		r.generatorChanged(true)
		r.mu.Unlock()
		r.th.poke()
	}
	var text strings.Builder
	res, err := l.s.Generate(ctx, req, func(t session.Token) error {
		now := time.Now()
		piece := t.Piece
		r.mu.Lock()
		first := g.Timing.OutputTokens == 0
		g.Timing.OutputTokens++
		if first {
			g.Status = StatusDecoding
			g.Timing.FirstTokenMs = ms(now.Sub(start))
			g.Timing.PrefillMs = ms(now.Sub(start) - prep)
			if g.Timing.PrefillMs > 0 {
				g.Timing.PrefillTPS = float64(g.Timing.PromptTokens) / (g.Timing.PrefillMs / 1000)
			}
		} else if d := now.Sub(start).Seconds()*1000 - g.Timing.FirstTokenMs; d > 0 {
			g.Timing.DecodeMs = d
			g.Timing.DecodeTPS = float64(g.Timing.OutputTokens-1) / (d / 1000)
		}
		text.WriteString(piece)
		g.Text = text.String()
		r.generatorChanged(first || g.Timing.OutputTokens%8 == 0)
		r.up.Generator.Delta += piece
		r.mu.Unlock()
		r.th.poke()
		return nil
	})
	if !prompted { // the prompt was refused (or the run stopped before it)
		fail(err)
		return
	}
	tail := res.Tail

	r.mu.Lock()
	text.WriteString(tail)
	g.Text = text.String()
	if r.up.Generator == nil {
		r.generatorChanged(false)
	}
	r.up.Generator.Delta += tail
	g.Stopped = res.Stopped
	if res.Prefill > 0 {
		g.Timing.PrefillMs = ms(res.Prefill)
		g.Timing.PrefillTPS = res.PrefillTokensPerSec()
	}
	if len(res.IDs) > 0 {
		g.Timing.FirstTokenMs = ms(prep + res.FirstToken)
	}
	if res.Decode > 0 { // a stopped generation keeps the rates measured as it went
		g.Timing.DecodeMs = ms(res.Decode)
		g.Timing.DecodeTPS = res.DecodeTokensPerSec()
	}
	g.Timing.OutputTokens = len(res.IDs)
	g.Timing.TotalMs = ms(time.Since(start))
	if err != nil {
		g.Status, g.Error = sideError(ctx, err)
	} else {
		g.Status = StatusDone
	}
	var names []string
	if schema != nil {
		for _, f := range schema.Fields {
			names = append(names, f.Name)
		}
	}
	if obj, perr := ExtractAnswer(g.Text, names); perr == nil {
		g.Parsed = obj
	} else {
		g.ParseError = perr.Error()
	}
	r.generatorChanged(true)
	r.mu.Unlock()
	r.th.poke()
}

// sideError turns a side's error into its status and message.
func sideError(ctx context.Context, err error) (status, msg string) {
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, ctx.Err())) {
		return StatusCancelled, "stopped"
	}
	return StatusError, err.Error()
}

// ExtractJSON finds the JSON object a model wrote: the text itself, or the
// first {...} in it (e.g. inside a ```json fence), compacted.
func ExtractJSON(text string) (json.RawMessage, error) {
	t := strings.TrimSpace(text)
	if t == "" {
		return nil, errors.New("no text")
	}
	i := strings.IndexByte(t, '{')
	if i < 0 {
		return nil, errors.New("no JSON object in the text")
	}
	dec := json.NewDecoder(strings.NewReader(t[i:]))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func msD(d scorer.Duration) float64 { return ms(time.Duration(d)) }

// computedRate is the prefill's speed over the tokens it computed (the
// reused ones cost nothing): 0 when it computed none or took no time.
func computedRate(computed int, d time.Duration) float64 {
	if computed <= 0 || d <= 0 {
		return 0
	}
	return float64(computed) / d.Seconds()
}
