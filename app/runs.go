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
	"verdict/engine/scorer"
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
const ContentionNote = "The scorer and the generator ran at the same time on the same compute device: each side's timings include contention with the other."

// Runs runs the scorer and the generator side by side: both start together
// on the same input, each on its own goroutine with its own KV cache, and
// their progress is streamed as coalesced run:update events.
type Runs struct {
	models   *Models
	settings *Settings
	media    *Media
	// prepare runs the towers (inputs.PrepareContext; tests count calls).
	prepare  func(ctx context.Context, t inputs.Towers, in *media.Input, progress inputs.Progress) (*inputs.Prepared, error)
	emit     Emitter
	log      *logrus.Logger
	interval time.Duration

	mu      sync.Mutex
	n       int
	active  *run
	directs map[*Direct]struct{} // programs' requests in progress (Direct)
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
	s.cancelDirect()
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
		mc, done := s.models.mediaCounts()
		r.rec.Media = &RunMedia{Status: StatusPreparing, Total: total, Images: images, Audio: sound, Note: MediaNote,
			SoftTokens: mc.inputTokens(in), Items: []RunMediaItem{}}
		done()
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
			r.prepareMedia(ctxP, s.prepare, s.media, l, in, prep)
			s.models.towersChanged(l)
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
				Backend: set.Scorer.Backend, Normalize: set.Scorer.Normalize, CatalogCheckDense: true,
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
