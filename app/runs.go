package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sirupsen/logrus"

	"verdict/app/inputs"
	"verdict/engine/gemma3n"
	"verdict/engine/generate"
	"verdict/engine/models"
	"verdict/engine/prompt"
	"verdict/engine/scorer"
	"verdict/engine/tokenizer"
	"verdict/media"
)

// UpdateInterval is the shortest time between two run:update events: at most
// 20 a second, whatever the token rate.
const UpdateInterval = 50 * time.Millisecond

// HistoryCapacity is how many finished runs Runs keeps.
const HistoryCapacity = 100

// MaxInputBytes bounds a request's text (the scorer's token limit is the
// real bound; this one stops a huge paste before tokenizing it).
const MaxInputBytes = 1 << 20

// The sides of a run.
const (
	SideScorer    = "scorer"
	SideGenerator = "generator"
)

// Side states.
const (
	StatusPreparing  = "preparing"
	StatusPrefilling = "prefilling"
	StatusScoring    = "scoring"
	StatusDecoding   = "decoding"
	StatusDone       = "done"
	StatusCancelled  = "cancelled"
	StatusError      = "error"
)

// ContentionNote is shown with the timings of a run whose two sides ran
// together.
const ContentionNote = "The scorer and the generator ran at the same time on the same CPU cores: each side's timings include contention with the other."

// RunRequest is one input and schema for a run.
type RunRequest struct {
	Input string `json:"input"`
	// Schema is the schema in the scorer's JSON format (see scorer.ParseSchema).
	Schema     json.RawMessage `json:"schema,omitempty"`
	SchemaName string          `json:"schema_name,omitempty"`
	// Files describe the attached files (their text is already in Input).
	Files []InputFile `json:"files,omitempty"`
	// Media are the ids of the media items (Media.Items) the run takes, in
	// the order the prompt gives them: images, then a video's frames, then
	// the audio.
	Media []string `json:"media,omitempty"`
	// Settings override the saved settings for this run.
	Settings *RunSettings `json:"settings,omitempty"`
}

// RunStarted is what Start returns at once.
type RunStarted struct {
	ID            string `json:"id"`
	StartedMs     int64  `json:"started_ms"` // Unix milliseconds
	Scorer        bool   `json:"scorer"`
	Generator     bool   `json:"generator"`
	Concurrent    bool   `json:"concurrent"`
	Model         string `json:"model"`
	RandomWeights bool   `json:"random_weights"`
}

// FieldRef names a field of a run's schema, in schema order.
type FieldRef struct {
	Name string      `json:"name"`
	Type scorer.Kind `json:"type"`
}

// RunAnnounce is the run:started event: every page showing the app can follow
// a run, whoever started it.
type RunAnnounce struct {
	Run    RunStarted `json:"run"`
	Fields []FieldRef `json:"fields"`
}

// SideTiming is one side's timing breakdown. StartMs is measured from the
// run's start; FirstTokenMs, FirstDecisionMs and TotalMs from the side's
// start; the others are durations.
type SideTiming struct {
	StartMs         float64   `json:"start_ms"`
	InputPrepMs     float64   `json:"input_preparation_ms"`
	PrefillMs       float64   `json:"prefill_ms"`
	PrefillTPS      float64   `json:"prefill_tokens_per_second"`
	PromptTokens    int       `json:"prompt_tokens"`
	FirstTokenMs    float64   `json:"first_token_ms,omitempty"`
	FirstDecisionMs float64   `json:"first_decision_ms,omitempty"`
	BatchesMs       []float64 `json:"branch_batches_ms,omitempty"`
	DecodeMs        float64   `json:"decode_ms,omitempty"`
	DecodeTPS       float64   `json:"decode_tokens_per_second,omitempty"`
	OutputTokens    int       `json:"output_tokens,omitempty"`
	TotalMs         float64   `json:"total_ms"`

	// PrefillDone of PrefillLayers decoder layers have run on the prompt
	// (live progress of a long prefill).
	PrefillDone   int `json:"prefill_done,omitempty"`
	PrefillLayers int `json:"prefill_layers,omitempty"`
}

// ScorerSide is the scorer's part of a run.
type ScorerSide struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	// Fields are the finished fields: in finishing order while running, in
	// schema order once done.
	Fields            []scorer.FieldResult     `json:"fields"`
	FieldsTotal       int                      `json:"fields_total"`
	Answer            json.RawMessage          `json:"answer,omitempty"`
	ProbabilitySource string                   `json:"probability_source,omitempty"`
	Calibration       scorer.CalibrationStatus `json:"calibration"`
	Note              string                   `json:"note,omitempty"`
	Decisions         int                      `json:"decisions,omitempty"`
	BranchRows        int                      `json:"branch_rows,omitempty"`
	BranchBatch       int                      `json:"branch_batch,omitempty"`
	CachedSchema      bool                     `json:"cached_schema"`
	Timing            SideTiming               `json:"timing"`
}

// GeneratorSide is the generation's part of a run.
type GeneratorSide struct {
	Status  string     `json:"status"`
	Error   string     `json:"error,omitempty"`
	Text    string     `json:"text"`
	Stopped bool       `json:"stopped"` // ended on a stop token (not the token limit)
	Prompt  string     `json:"prompt_mode"`
	Timing  SideTiming `json:"timing"`
	// Parsed is the JSON object found in Text, when there is one.
	Parsed     json.RawMessage `json:"parsed,omitempty"`
	ParseError string          `json:"parse_error,omitempty"`
}

// InputSummary describes a run's input.
type InputSummary struct {
	Text  string      `json:"text"`
	Chars int         `json:"chars"`
	Files []InputFile `json:"files,omitempty"`
	Media []MediaRef  `json:"media,omitempty"`
}

// RunMedia is a run's media preparation. The vision and audio towers run
// once per run; both sides receive the same soft tokens.
type RunMedia struct {
	Status string `json:"status"` // preparing, done, error or cancelled
	// Done of Total items (images, video frames, the audio clip) have been
	// through their tower; Stage names the one in its tower now.
	Done       int     `json:"done"`
	Total      int     `json:"total"`
	Stage      string  `json:"stage,omitempty"`
	Images     int     `json:"images"` // images and video frames
	Audio      bool    `json:"audio"`
	SoftTokens int     `json:"soft_tokens"`
	TowerMs    float64 `json:"tower_ms,omitempty"`
	Error      string  `json:"error,omitempty"`
	Note       string  `json:"note"`
	// The item in its tower now: its tower is being loaded (Loading) or has
	// done Block of Blocks steps, ItemMs after the item started, with about
	// LeftMs to go (0: not known yet).
	Loading bool    `json:"loading,omitempty"`
	Block   int     `json:"block,omitempty"`
	Blocks  int     `json:"blocks,omitempty"`
	ItemMs  float64 `json:"item_ms,omitempty"`
	LeftMs  float64 `json:"left_ms,omitempty"`
	// Items are the finished items with their tower time.
	Items []RunMediaItem `json:"items"`
}

// RunMediaItem is one image, video frame or clip's tower pass.
type RunMediaItem struct {
	What string  `json:"what"`
	Ms   float64 `json:"ms"`
	// Cached: its output came from the tower cache (the same input on the
	// same model before).
	Cached bool `json:"cached"`
}

// MediaNote explains the input preparation of a run with media.
const MediaNote = "The vision and audio towers ran once for this run: both sides received the same soft tokens, and each side's input preparation includes its wait for them."

// RunRecord is a run: live while it runs, final in run:done and History.
type RunRecord struct {
	ID            string          `json:"id"`
	StartedMs     int64           `json:"started_ms"`
	Model         string          `json:"model"`
	RandomWeights bool            `json:"random_weights"`
	Input         InputSummary    `json:"input"`
	SchemaName    string          `json:"schema_name,omitempty"`
	Schema        json.RawMessage `json:"schema,omitempty"`
	Settings      RunSettings     `json:"settings"`
	Concurrent    bool            `json:"concurrent"`
	Note          string          `json:"note,omitempty"`
	Media         *RunMedia       `json:"media,omitempty"`
	Scorer        *ScorerSide     `json:"scorer,omitempty"`
	Generator     *GeneratorSide  `json:"generator,omitempty"`
	TotalMs       float64         `json:"total_ms"`
}

// ScorerUpdate is what changed on the scorer side since the last update.
type ScorerUpdate struct {
	Status string               `json:"status"`
	Error  string               `json:"error,omitempty"`
	Fields []scorer.FieldResult `json:"fields,omitempty"` // newly finished
	// Catalog holds the trie-decode steps chosen since the last update.
	Catalog []CatalogLive `json:"catalog,omitempty"`
	Done    int           `json:"done"`
	Total   int           `json:"total"`
	Timing  *SideTiming   `json:"timing,omitempty"`
}

// CatalogLive is one step of a field's trie decode as it happens: the names
// emitted so far and the step's distribution over its legal tokens.
type CatalogLive struct {
	Field string             `json:"field"`
	Names []string           `json:"names"`
	Step  scorer.CatalogStep `json:"step"`
}

// GeneratorUpdate is what changed on the generation side since the last
// update.
type GeneratorUpdate struct {
	Status string      `json:"status"`
	Error  string      `json:"error,omitempty"`
	Delta  string      `json:"delta,omitempty"` // text since the last update
	Tokens int         `json:"tokens"`
	Timing *SideTiming `json:"timing,omitempty"`
}

// RunUpdate is one coalesced run:update event.
type RunUpdate struct {
	ID        string           `json:"id"`
	ElapsedMs float64          `json:"elapsed_ms"`
	Scorer    *ScorerUpdate    `json:"scorer,omitempty"`
	Generator *GeneratorUpdate `json:"generator,omitempty"`
	Media     *RunMedia        `json:"media,omitempty"`
}

// Runs runs the scorer and the generator side by side: both start together
// on the same input, each on its own goroutine with its own KV cache, and
// their progress is streamed as coalesced run:update events.
type Runs struct {
	models   *Models
	settings *Settings
	media    *Media
	// prepare runs the towers (inputs.PrepareContext; tests count calls).
	prepare  func(ctx context.Context, m *models.Model, in *media.Input, progress inputs.Progress) (*inputs.Prepared, error)
	emit     Emitter
	log      *logrus.Logger
	interval time.Duration

	mu      sync.Mutex
	n       int
	active  *run
	history []RunRecord
	wg      sync.WaitGroup
}

// NewRuns returns the run service.
func NewRuns(m *Models, st *Settings, e Emitter, log *logrus.Logger) *Runs {
	r := &Runs{models: m, settings: st, emit: e, log: log, interval: UpdateInterval, prepare: inputs.PrepareContext}
	m.whenSwapped(func() { r.cancelActive("the model was replaced") })
	return r
}

// ErrBusy is returned by Start while a run is in progress.
var ErrBusy = errors.New("a run is in progress: stop it or wait for it to finish")

// Start starts the scorer and the generator together on req and returns at
// once.
func (s *Runs) Start(req RunRequest) (RunStarted, error) { return s.start(req, true, true) }

// Cancel stops side ("scorer", "generator", or "" for both) of run id.
// Results finished so far are kept.
func (s *Runs) Cancel(id, side string) error {
	s.mu.Lock()
	r := s.active
	s.mu.Unlock()
	if r == nil || r.id != id {
		return fmt.Errorf("run %q is not running", id)
	}
	switch side {
	case "":
		r.cancelPrep()
		r.cancelScorer()
		r.cancelGen()
	case SideScorer:
		r.cancelScorer()
	case SideGenerator:
		r.cancelGen()
	default:
		return fmt.Errorf("unknown side %q (scorer, generator or empty for both)", side)
	}
	what := side
	if what == "" {
		what = "both"
	}
	s.log.WithFields(logrus.Fields{"run": id, "side": what}).Info("run cancelled")
	return nil
}

// Active returns the run in progress, if any.
func (s *Runs) Active() *RunStarted {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == nil {
		return nil
	}
	st := s.active.started
	return &st
}

// Current returns the record of the run in progress (nil if none), as
// complete as it is now: for a page that connects in the middle of a run.
func (s *Runs) Current() *RunRecord {
	s.mu.Lock()
	r := s.active
	s.mu.Unlock()
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.snapshot()
	return &rec
}

// History returns the finished runs, oldest first.
func (s *Runs) History() []RunRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]RunRecord{}, s.history...)
}

// Get returns a finished run.
func (s *Runs) Get(id string) (RunRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.history {
		if r.ID == id {
			return r, nil
		}
	}
	return RunRecord{}, fmt.Errorf("no finished run %q", id)
}

// Delete forgets a finished run.
func (s *Runs) Delete(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range s.history {
		if r.ID == id {
			s.history = append(s.history[:i], s.history[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("no finished run %q", id)
}

// ClearHistory forgets every finished run.
func (s *Runs) ClearHistory() {
	s.mu.Lock()
	s.history = nil
	s.mu.Unlock()
}

func (s *Runs) cancelActive(why string) {
	s.mu.Lock()
	r := s.active
	s.mu.Unlock()
	if r != nil {
		s.log.WithField("run", r.id).Info("cancelling run: " + why)
		r.cancelPrep()
		r.cancelScorer()
		r.cancelGen()
	}
}

// wait blocks until every run has ended (at shutdown, after cancelling).
func (s *Runs) wait() { s.wg.Wait() }

// run is one run in progress.
type run struct {
	id      string
	t0      time.Time
	started RunStarted
	th      *throttle
	emit    Emitter

	cancelScorer, cancelGen context.CancelFunc
	cancelPrep              context.CancelFunc // the towers; set before the run is active

	mu    sync.Mutex
	rec   RunRecord
	up    RunUpdate
	dirty bool
}

func (s *Runs) start(req RunRequest, doScorer, doGen bool) (RunStarted, error) {
	var in *media.Input
	var refs []MediaRef
	if len(req.Media) > 0 {
		if s.media == nil {
			return RunStarted{}, errors.New("media input is not available")
		}
		var err error
		if in, refs, err = s.media.input(req.Media); err != nil {
			return RunStarted{}, err
		}
	}
	hasMedia := in != nil && !in.Empty()
	if strings.TrimSpace(req.Input) == "" && !hasMedia {
		return RunStarted{}, errors.New("the input is empty: type or drop some text, or add an image, audio or video")
	}
	if len(req.Input) > MaxInputBytes {
		return RunStarted{}, &scorer.LimitError{What: "input bytes", Value: len(req.Input), Max: MaxInputBytes}
	}
	if !utf8.ValidString(req.Input) {
		return RunStarted{}, errors.New("the input is not valid UTF-8 text")
	}
	set := s.settings.Get().Run
	if req.Settings != nil {
		set = *req.Settings
	}
	if err := set.Validate(); err != nil {
		return RunStarted{}, err
	}
	var schema *scorer.Schema
	if doScorer || (doGen && set.Generation.Prompt == PromptSchema) {
		if len(bytes.TrimSpace(req.Schema)) == 0 {
			return RunStarted{}, &scorer.SchemaError{Msg: "no schema: add at least one field"}
		}
		sc, err := scorer.ParseSchema(req.Schema)
		if err != nil {
			return RunStarted{}, err
		}
		schema = sc
	}
	var calib *scorer.Calibration
	if doScorer && set.Scorer.Calibration != "" {
		c, err := scorer.LoadCalibration(set.Scorer.Calibration)
		if err != nil {
			return RunStarted{}, fmt.Errorf("calibration: %w", err)
		}
		calib = c
	}
	l, release, err := s.models.acquire()
	if err != nil {
		return RunStarted{}, err
	}
	if hasMedia {
		if err := canTake(l, in); err != nil {
			release()
			return RunStarted{}, err
		}
	}

	s.mu.Lock()
	if s.active != nil {
		s.mu.Unlock()
		release()
		return RunStarted{}, ErrBusy
	}
	s.n++
	t0 := time.Now()
	r := &run{id: fmt.Sprintf("run-%d", s.n), t0: t0, emit: s.emit}
	r.started = RunStarted{
		ID: r.id, StartedMs: t0.UnixMilli(), Scorer: doScorer, Generator: doGen, Concurrent: doScorer && doGen,
		Model: l.info.Name, RandomWeights: l.info.RandomWeights,
	}
	r.rec = RunRecord{
		ID: r.id, StartedMs: t0.UnixMilli(), Model: l.info.Name, RandomWeights: l.info.RandomWeights,
		Input:      InputSummary{Text: req.Input, Chars: utf8.RuneCountInString(req.Input), Files: req.Files, Media: refs},
		SchemaName: req.SchemaName, Settings: set, Concurrent: doScorer && doGen,
	}
	if schema != nil {
		r.rec.Schema = append(json.RawMessage{}, req.Schema...)
	}
	if r.rec.Concurrent {
		r.rec.Note = ContentionNote
	}
	var prep *sharedPrep
	if hasMedia {
		_, _, sound := in.Sound()
		images := len(in.Images)
		if in.Video != nil {
			images += len(in.Video.Frames)
		}
		total := images
		if sound {
			total++
		}
		img, aud := s.models.mediaTokens()
		r.rec.Media = &RunMedia{Status: StatusPreparing, Total: total, Images: images, Audio: sound, Note: MediaNote,
			SoftTokens: images * img, Items: []RunMediaItem{}}
		if sound {
			r.rec.Media.SoftTokens += aud
		}
		prep = &sharedPrep{done: make(chan struct{})}
	}
	r.up.ID = r.id
	r.th = newThrottle(s.interval, r.flush)
	ctxS, cancelS := context.WithCancel(context.Background())
	ctxG, cancelG := context.WithCancel(context.Background())
	r.cancelScorer, r.cancelGen = cancelS, cancelG
	ctxP, prepCancel := context.WithCancel(context.Background())
	r.cancelPrep = prepCancel
	s.active = r
	s.wg.Add(1)
	s.mu.Unlock()

	s.log.WithFields(logrus.Fields{
		"run": r.id, "scorer": doScorer, "generator": doGen, "model": l.info.Name, "input_chars": r.rec.Input.Chars,
		"media": len(refs),
	}).Info("run started")

	if prep != nil {
		go func() {
			defer close(prep.done)
			r.prepareMedia(ctxP, s.prepare, l, in, prep)
		}()
	}

	var sides sync.WaitGroup
	gate := make(chan struct{}) // opens both sides at the same moment
	if doScorer {
		r.rec.Scorer = &ScorerSide{Status: StatusPreparing, FieldsTotal: len(schema.Fields), Fields: []scorer.FieldResult{}}
		sides.Add(1)
		go func() {
			defer sides.Done()
			<-gate
			r.scorerSide(ctxS, l, schema, req.Input, scorer.Options{
				BranchBatch: set.Scorer.BranchBatch, Temperature: set.Scorer.Temperature, Calibration: calib,
				Backend: set.Scorer.Backend, CatalogCheckDense: true,
			}, prep)
		}()
	}
	if doGen {
		r.rec.Generator = &GeneratorSide{Status: StatusPreparing, Prompt: set.Generation.Prompt}
		sides.Add(1)
		go func() {
			defer sides.Done()
			<-gate
			r.generatorSide(ctxG, l, schema, req.Input, set.Generation, prep)
		}()
	}
	ann := RunAnnounce{Run: r.started, Fields: []FieldRef{}}
	if schema != nil {
		for _, f := range schema.Fields {
			ann.Fields = append(ann.Fields, FieldRef{f.Name, f.Kind})
		}
	}
	s.emit.Emit(EventRunStarted, ann)
	close(gate)
	go func() {
		defer s.wg.Done()
		sides.Wait()
		// Both sides are over: a tower pass nobody waits for stops within
		// a block, and ends before the model is released.
		prepCancel()
		if prep != nil {
			<-prep.done
		}
		release()
		cancelS()
		cancelG()
		r.mu.Lock()
		r.rec.TotalMs = ms(time.Since(r.t0))
		r.mu.Unlock()
		r.th.now()
		r.mu.Lock()
		rec := r.snapshot()
		r.mu.Unlock()
		s.mu.Lock()
		s.active = nil
		s.history = append(s.history, rec)
		if len(s.history) > HistoryCapacity {
			s.history = s.history[len(s.history)-HistoryCapacity:]
		}
		s.mu.Unlock()
		f := logrus.Fields{"run": rec.ID, "total_ms": int(rec.TotalMs)}
		if rec.Scorer != nil {
			f["scorer"] = rec.Scorer.Status
		}
		if rec.Generator != nil {
			f["generator"] = rec.Generator.Status
		}
		s.log.WithFields(f).Info("run finished")
		s.emit.Emit(EventRunDone, rec)
	}()
	return r.started, nil
}

// snapshot copies the record (r.mu held).
func (r *run) snapshot() RunRecord {
	rec := r.rec
	if r.rec.Scorer != nil {
		sc := *r.rec.Scorer
		sc.Fields = append([]scorer.FieldResult{}, sc.Fields...)
		sc.Timing.BatchesMs = append([]float64(nil), sc.Timing.BatchesMs...)
		rec.Scorer = &sc
	}
	if r.rec.Generator != nil {
		g := *r.rec.Generator
		rec.Generator = &g
	}
	if r.rec.Media != nil {
		m := *r.rec.Media
		m.Items = append([]RunMediaItem{}, m.Items...)
		rec.Media = &m
	}
	return rec
}

// sharedPrep is a run's media preparation, computed once for both sides.
type sharedPrep struct {
	done chan struct{} // closed when p or err is set
	p    *inputs.Prepared
	err  error
}

// wait returns the prepared media once they are ready, or ctx's error.
func (sp *sharedPrep) wait(ctx context.Context) (*inputs.Prepared, error) {
	select {
	case <-sp.done:
		return sp.p, sp.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// prepareMedia runs the towers once, reporting each item as it starts and
// each of its tower's steps.
func (r *run) prepareMedia(ctx context.Context, prepare func(context.Context, *models.Model, *media.Input, inputs.Progress) (*inputs.Prepared, error), l *loaded, in *media.Input, sp *sharedPrep) {
	start := time.Now()
	var item string
	var itemStart time.Time
	p, err := prepare(ctx, l.m, in, func(st inputs.Step) {
		now := time.Now()
		if st.What != item {
			item, itemStart = st.What, now
		}
		r.mu.Lock()
		m := r.rec.Media
		m.Done, m.Total, m.Stage = st.Done, st.Total, st.What
		m.Loading, m.Block, m.Blocks, m.LeftMs = st.Loading, st.Block, st.Blocks, 0
		m.ItemMs = 0
		if st.What != "" {
			m.ItemMs = ms(now.Sub(itemStart))
		}
		if !st.Loading && st.Block > 0 && st.Blocks > st.Block {
			m.LeftMs = m.ItemMs * float64(st.Blocks-st.Block) / float64(st.Block)
		}
		m.Items = mediaItems(st.Items)
		r.mediaChanged()
		r.mu.Unlock()
		r.th.poke()
	})
	sp.p, sp.err = p, err
	r.mu.Lock()
	m := r.rec.Media
	m.TowerMs = ms(time.Since(start))
	m.Stage, m.Loading, m.Block, m.Blocks, m.ItemMs, m.LeftMs = "", false, 0, 0, 0, 0
	if p != nil {
		m.Items = mediaItems(p.Items)
	}
	switch {
	case err == nil:
		m.Status, m.Done = StatusDone, m.Total
	case errors.Is(err, context.Canceled):
		m.Status, m.Error = StatusCancelled, "stopped"
	default:
		m.Status, m.Error = StatusError, err.Error()
	}
	r.mediaChanged()
	r.mu.Unlock()
	r.th.poke()
}

// mediaChanged marks the media preparation for the next update (r.mu held).
func (r *run) mediaChanged() {
	m := *r.rec.Media
	m.Items = append([]RunMediaItem{}, m.Items...)
	r.up.Media = &m
	r.dirty = true
}

func mediaItems(its []inputs.Item) []RunMediaItem {
	out := make([]RunMediaItem, len(its))
	for i, it := range its {
		out[i] = RunMediaItem{What: it.What, Ms: ms(it.Duration), Cached: it.Cached}
	}
	return out
}

// canTake checks that the model has the towers the media need.
func canTake(l *loaded, in *media.Input) error {
	vision, audio := l.m.Inputs()
	_, _, sound := in.Sound()
	switch {
	case (len(in.Images) > 0 || in.Video != nil) && !vision:
		return fmt.Errorf("%s has no vision tower: it cannot take images or video", l.info.Name)
	case sound && !audio:
		return fmt.Errorf("%s has no audio tower: it cannot take audio", l.info.Name)
	}
	return nil
}

// flush emits the pending update, if any.
func (r *run) flush() {
	r.mu.Lock()
	if !r.dirty {
		r.mu.Unlock()
		return
	}
	u := r.up
	u.ElapsedMs = ms(time.Since(r.t0))
	r.up = RunUpdate{ID: r.id}
	r.dirty = false
	r.mu.Unlock()
	r.emit.Emit(EventRunUpdate, u)
}

// scorerChanged marks the scorer side for the next update (r.mu held).
func (r *run) scorerChanged(timing bool) {
	sc := r.rec.Scorer
	if r.up.Scorer == nil {
		r.up.Scorer = &ScorerUpdate{}
	}
	u := r.up.Scorer
	u.Status, u.Error, u.Done, u.Total = sc.Status, sc.Error, len(sc.Fields), sc.FieldsTotal
	if timing {
		t := sc.Timing
		t.BatchesMs = append([]float64(nil), t.BatchesMs...)
		u.Timing = &t
	}
	r.dirty = true
}

// generatorChanged marks the generation side for the next update (r.mu held).
func (r *run) generatorChanged(timing bool) {
	g := r.rec.Generator
	if r.up.Generator == nil {
		r.up.Generator = &GeneratorUpdate{}
	}
	u := r.up.Generator
	u.Status, u.Error, u.Tokens = g.Status, g.Error, g.Timing.OutputTokens
	if timing {
		t := g.Timing
		u.Timing = &t
	}
	r.dirty = true
}

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
	res, err := l.sc.Score(ctx, schema, input, opt)

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
	sc.Answer = res.Answer
	sc.ProbabilitySource, sc.Calibration, sc.Note = res.ProbabilitySource, res.Calibration, res.Note
	sc.Decisions, sc.BranchRows, sc.BranchBatch, sc.CachedSchema = res.Decisions, res.BranchRows, res.BranchBatch, res.CachedSchema
	sc.Timing.InputPrepMs = msD(t.InputPreparation)
	sc.Timing.PrefillMs = msD(t.Prefill)
	sc.Timing.PrefillTPS = t.PrefillTPS
	sc.Timing.PromptTokens = res.PromptTokens
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
	var ids []int32
	var md *gemma3n.Media
	var perr error
	switch {
	case media != nil:
		p, err := media.wait(ctx)
		if err != nil {
			fail(err)
			return
		}
		md = &p.Media.Media
		if set.Prompt == PromptChat {
			ids, perr = inputs.ChatPrompt(l.m, p, "", input).Encode(l.tok, l.m.Special)
		} else {
			ids, perr = schema.MediaPrompt(input, p.Captions, p.Audio != nil, l.m.Special).Encode(l.tok, l.m.Special)
		}
	case set.Prompt == PromptChat:
		if perr = prompt.CheckMediaText(input, l.m.Special, l.tok); perr == nil {
			ids = l.tok.EncodeChat([]tokenizer.Turn{{Role: "user", Content: input}}, true)
		}
	default:
		ids, perr = schema.MediaPrompt(input, nil, false, l.m.Special).Encode(l.tok, l.m.Special)
	}
	if perr != nil {
		fail(perr)
		return
	}
	if len(ids) > scorer.MaxInputTokens {
		fail(&scorer.LimitError{What: "input tokens", Value: len(ids), Max: scorer.MaxInputTokens})
		return
	}
	if err := ctx.Err(); err != nil {
		fail(err)
		return
	}
	prep := time.Since(start)
	r.mu.Lock()
	g.Status = StatusPrefilling
	g.Timing.InputPrepMs = ms(prep)
	g.Timing.PromptTokens = len(ids)
	r.generatorChanged(true)
	r.mu.Unlock()
	r.th.poke()

	stops := map[int32]bool{}
	for _, id := range l.tok.StopIDs() {
		stops[id] = true
	}
	dec := l.tok.NewStreamDecoder()
	var text strings.Builder
	opt := generate.Options{
		MaxTokens: set.MaxTokens, Temperature: set.Temperature, TopK: set.TopK, TopP: set.TopP, Seed: set.Seed,
		Stop: l.tok.StopIDs(), Media: md,
		OnPrefill: func(done, total int) {
			r.mu.Lock()
			g.Timing.PrefillDone, g.Timing.PrefillLayers = done, total
			r.generatorChanged(true)
			r.mu.Unlock()
			r.th.poke()
		},
	}
	res, err := generate.Run(ctx, l.m.Model, ids, opt, func(t generate.Token) error {
		now := time.Now()
		var piece string
		if !stops[t.ID] {
			piece = dec.Add(t.ID)
		}
		r.mu.Lock()
		first := g.Timing.OutputTokens == 0
		g.Timing.OutputTokens++
		if first {
			g.Status = StatusDecoding
			g.Timing.FirstTokenMs = ms(now.Sub(start))
			g.Timing.PrefillMs = ms(now.Sub(start) - prep)
			if g.Timing.PrefillMs > 0 {
				g.Timing.PrefillTPS = float64(len(ids)) / (g.Timing.PrefillMs / 1000)
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
	tail := dec.Flush()

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

// Scorer is the scorer service: a run of the scorer side alone, schema
// checks, presets and the prompt the model is given.
type Scorer struct{ runs *Runs }

// Start runs the scorer alone on req and returns at once.
func (s *Scorer) Start(req RunRequest) (RunStarted, error) { return s.runs.start(req, true, false) }

// Cancel stops the scorer side of run id.
func (s *Scorer) Cancel(id string) error { return s.runs.Cancel(id, SideScorer) }

// SchemaCheck is the outcome of checking a schema.
type SchemaCheck struct {
	OK        bool   `json:"ok"`
	Error     string `json:"error,omitempty"`
	Field     string `json:"field,omitempty"` // the field the error is about
	Fields    int    `json:"fields"`
	Decisions int    `json:"decisions"`
}

// Check parses and validates a schema as a run would.
func (s *Scorer) Check(schema json.RawMessage) SchemaCheck {
	sc, err := scorer.ParseSchema(schema)
	if err != nil {
		c := SchemaCheck{Error: err.Error()}
		var se *scorer.SchemaError
		if errors.As(err, &se) {
			c.Field = se.Field
		}
		return c
	}
	return SchemaCheck{OK: true, Fields: len(sc.Fields), Decisions: sc.Decisions()}
}

// Limits are the serving limits the UI shows.
type Limits struct {
	MaxFields      int `json:"max_fields"`
	MaxDecisions   int `json:"max_decisions"`
	MaxInputTokens int `json:"max_input_tokens"`
	MaxInputBytes  int `json:"max_input_bytes"`
}

// Limits returns the serving limits.
func (s *Scorer) Limits() Limits {
	return Limits{scorer.MaxFields, scorer.MaxDecisions, scorer.MaxInputTokens, MaxInputBytes}
}

// PromptPreview is the prompt the model receives for an input.
type PromptPreview struct {
	// Text is the prompt with each media run written as <image 1>, <audio>.
	Text   string `json:"text"`
	Tokens int    `json:"tokens"` // 0 when no model is loaded
	// MediaTokens are the soft tokens of the media (256 per image or video
	// frame, 188 for the audio), part of Tokens.
	MediaTokens int  `json:"media_tokens"`
	Images      int  `json:"images"` // images and video frames
	Audio       bool `json:"audio"`
	MaxTokens   int  `json:"max_tokens"`
}

// Prompt returns the shared prefix the scorer (and the generator in schema
// mode) gives the model for input.
func (s *Scorer) Prompt(schema json.RawMessage, input string) (PromptPreview, error) {
	return s.PromptMedia(schema, input, nil)
}

// PromptMedia is Prompt with the media items whose ids are given: the
// prompt's media placeholders and the token count against the limit.
func (s *Scorer) PromptMedia(schema json.RawMessage, input string, mediaIDs []string) (PromptPreview, error) {
	sc, err := scorer.ParseSchema(schema)
	if err != nil {
		return PromptPreview{}, err
	}
	p := PromptPreview{MaxTokens: scorer.MaxInputTokens}
	var captions []string
	if len(mediaIDs) > 0 && s.runs.media != nil {
		in, _, err := s.runs.media.input(mediaIDs)
		if err != nil {
			return PromptPreview{}, err
		}
		captions = inputs.Captions(in)
		_, _, p.Audio = in.Sound()
	}
	img, aud := s.runs.models.mediaTokens()
	p.Images = len(captions)
	p.MediaTokens = p.Images * img
	if p.Audio {
		p.MediaTokens += aud
	}
	l, release, err := s.runs.models.acquire()
	if err != nil {
		p.Text = sc.MediaPrompt(input, captions, p.Audio, gemma3nSpecial(img, aud)).String()
		return p, nil
	}
	defer release()
	pr := sc.MediaPrompt(input, captions, p.Audio, l.m.Special)
	p.Text = pr.String()
	ids, err := pr.Encode(l.tok, l.m.Special)
	if err != nil {
		return PromptPreview{}, err
	}
	p.Tokens = len(ids)
	return p, nil
}

// gemma3nSpecial is a placeholder Special for rendering a prompt without a
// model (only the soft-token counts matter to String).
func gemma3nSpecial(img, aud int) gemma3n.Special {
	return gemma3n.Special{VisionTokens: img, AudioTokens: aud}
}

// Presets returns the built-in schemas with sample inputs.
func (s *Scorer) Presets() []Preset { return presets() }

// Generator is the generation service: a run of the generation side alone.
type Generator struct{ runs *Runs }

// Start runs generation alone on req and returns at once.
func (g *Generator) Start(req RunRequest) (RunStarted, error) { return g.runs.start(req, false, true) }

// Cancel stops the generation side of run id.
func (g *Generator) Cancel(id string) error { return g.runs.Cancel(id, SideGenerator) }
