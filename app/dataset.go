// The dataset service: a file of records scored in bulk on the loaded model.

package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"

	"verdict/engine/dataset"
	"verdict/engine/scorer"
)

// EventDataset carries DatasetState: after every change, at most one per
// UpdateInterval while a run goes.
const EventDataset = "dataset:state"

// MaxDatasetBytes bounds a dataset loaded into the app (the CLI's
// score-file takes files of any size).
const MaxDatasetBytes = 64 << 20

// Dataset states.
const (
	DatasetEmpty   = "empty"   // nothing loaded
	DatasetLoaded  = "loaded"  // a file, not scored yet
	DatasetRunning = "running" // scoring
	DatasetDone    = "done"    // every record scored
	DatasetStopped = "stopped" // stopped part way: the results so far stay
	DatasetFailed  = "failed"  // stopped by an error (Error says which)
)

// DatasetState is the loaded dataset and its run.
type DatasetState struct {
	State  string `json:"state"`
	Name   string `json:"name,omitempty"`
	Format string `json:"format,omitempty"`
	// Records is the file's record count, Invalid those that cannot be
	// scored (bad JSON, no text): they become error rows.
	Records int `json:"records"`
	Invalid int `json:"invalid"`
	// Done, Errors and Total are the run's records so far.
	Done      int     `json:"done"`
	Errors    int     `json:"errors"`
	Total     int     `json:"total"`
	Rate      float64 `json:"rate"` // records per second
	ElapsedMS float64 `json:"elapsed_ms"`
	LeftMS    float64 `json:"left_ms"`
	Error     string  `json:"error,omitempty"`
	// Summary counts the answers of the records scored so far.
	Summary dataset.Summary `json:"summary"`
}

// DatasetRow is one record's outcome in the results table.
type DatasetRow struct {
	ID        string          `json:"id"`
	Line      int             `json:"line"`
	Answer    json.RawMessage `json:"answer,omitempty"`
	Error     string          `json:"error,omitempty"`
	ElapsedMS float64         `json:"elapsed_ms"`
}

// Dataset is the dataset service: Load a file's text, Start scoring it
// with a schema on the loaded model, watch EventDataset, read Results,
// Export them. One dataset and one run at a time; a run goes beside the
// interactive runs, on the same model.
type Dataset struct {
	models   *Models
	settings *Settings
	emit     Emitter
	log      *logrus.Logger

	mu      sync.Mutex
	st      DatasetState
	content string
	format  dataset.Format
	recs    []dataset.Record
	head    *dataset.Header // what scored recs (nil before a run)
	counts  dataset.Counter
	cancel  context.CancelFunc
	done    chan struct{} // closed when the run ends
	thr     *throttle
}

func newDataset(m *Models, st *Settings, e Emitter, log *logrus.Logger) *Dataset {
	d := &Dataset{models: m, settings: st, emit: e, log: log, st: DatasetState{State: DatasetEmpty}}
	d.thr = newThrottle(UpdateInterval, d.announce)
	m.whenSwapped(func() { d.stop() })
	return d
}

// ErrDatasetBusy is returned while a dataset run is in progress.
var ErrDatasetBusy = errors.New("the dataset is being scored: stop the run first")

func (d *Dataset) scan() func(func(dataset.Item) error) error {
	content, f := d.content, d.format
	return func(fn func(dataset.Item) error) error { return dataset.Scan(strings.NewReader(content), f, fn) }
}

// Load reads a dataset from its file name (for the format: .jsonl or
// .csv) and content, checks it (unique ids) and replaces the one loaded.
func (d *Dataset) Load(name, content string) (DatasetState, error) {
	if len(content) > MaxDatasetBytes {
		return DatasetState{}, fmt.Errorf("%s is %d MB, more than the app's limit of %d MB: score it with verdict score-file", name, len(content)>>20, MaxDatasetBytes>>20)
	}
	f, err := dataset.FormatOf(name, "")
	if err != nil {
		return DatasetState{}, err
	}
	d.mu.Lock()
	if d.cancel != nil {
		d.mu.Unlock()
		return DatasetState{}, ErrDatasetBusy
	}
	d.mu.Unlock()
	scan := func(fn func(dataset.Item) error) error { return dataset.Scan(strings.NewReader(content), f, fn) }
	plan, err := dataset.NewPlan(scan, dataset.All, nil)
	if err != nil {
		return DatasetState{}, fmt.Errorf("%s: %w", name, err)
	}
	if plan.Records == 0 {
		return DatasetState{}, fmt.Errorf("%s has no records", name)
	}
	invalid := 0
	scan(func(it dataset.Item) error {
		if it.Err != "" {
			invalid++
		}
		return nil
	})
	d.mu.Lock()
	if d.cancel != nil {
		d.mu.Unlock()
		return DatasetState{}, ErrDatasetBusy
	}
	d.content, d.format, d.recs, d.head, d.counts = content, f, nil, nil, dataset.Counter{}
	d.st = DatasetState{State: DatasetLoaded, Name: name, Format: string(f), Records: plan.Records, Invalid: invalid, Total: plan.Records}
	st := d.snapshot()
	d.mu.Unlock()
	d.log.WithFields(logrus.Fields{"dataset": name, "records": plan.Records, "invalid": invalid}).Info("dataset loaded")
	d.emit.Emit(EventDataset, st)
	return st, nil
}

// Start scores every record of the loaded dataset with schema on the
// loaded model, with the scorer settings of a run (branch batch,
// temperature, calibration, backend), and returns at once; EventDataset
// reports the progress.
func (d *Dataset) Start(schema json.RawMessage) (DatasetState, error) {
	s, err := scorer.ParseSchema(schema)
	if err != nil {
		return DatasetState{}, err
	}
	set := d.settings.Get().Run
	if err := set.Validate(); err != nil {
		return DatasetState{}, err
	}
	opt := scorer.Options{BranchBatch: set.Scorer.BranchBatch, Temperature: set.Scorer.Temperature, Backend: set.Scorer.Backend}
	if set.Scorer.Calibration != "" {
		if opt.Calibration, err = scorer.LoadCalibration(set.Scorer.Calibration); err != nil {
			return DatasetState{}, fmt.Errorf("calibration: %w", err)
		}
	}
	d.mu.Lock()
	st, err := d.begin(s, opt)
	d.mu.Unlock()
	if err != nil {
		return DatasetState{}, err
	}
	d.emit.Emit(EventDataset, st)
	return st, nil
}

// begin starts a run (d.mu held).
func (d *Dataset) begin(s *scorer.Schema, opt scorer.Options) (DatasetState, error) {
	switch {
	case d.cancel != nil:
		return DatasetState{}, ErrDatasetBusy
	case d.st.State == DatasetEmpty:
		return DatasetState{}, errors.New("load a dataset first")
	}
	l, release, err := d.models.acquire()
	if err != nil {
		return DatasetState{}, err
	}
	scan := d.scan()
	plan, err := dataset.NewPlan(scan, dataset.All, nil)
	if err != nil {
		release()
		return DatasetState{}, err
	}
	// The header of the export, as score-file writes it.
	id, err := l.s.Identity()
	if err != nil {
		release()
		return DatasetState{}, fmt.Errorf("the model's content hash: %w", err)
	}
	head, err := dataset.NewHeader(dataset.Scoring{Model: id.Name, ModelHash: id.Hash, Weights: string(id.Weights), Group: id.Group, Schema: s, Options: opt})
	if err != nil {
		release()
		return DatasetState{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel, d.done, d.recs, d.head, d.counts = cancel, make(chan struct{}), nil, &head, dataset.Counter{}
	d.st = DatasetState{State: DatasetRunning, Name: d.st.Name, Format: d.st.Format, Records: d.st.Records, Invalid: d.st.Invalid, Total: plan.Todo}
	st := d.snapshot()
	backend := opt.Backend
	if backend == "" {
		backend = scorer.BackendJSON
	}
	score := func(ctx context.Context, text string) (json.RawMessage, error) {
		res, err := l.s.Score(ctx, s, text, opt)
		if err != nil {
			return nil, err
		}
		// As verdict score prints it (and score-file logs it).
		return json.Marshal(struct {
			Model        string `json:"model"`
			RandomWeight bool   `json:"random_weights,omitempty"`
			Backend      string `json:"backend"`
			*scorer.Result
		}{l.s.Info().Name, l.s.Info().Builtin, backend, res})
	}
	go func() {
		defer close(d.done)
		defer release()
		pr, err := plan.Run(ctx, scan, score, nil, func(r dataset.Record) {
			d.mu.Lock()
			d.recs = append(d.recs, r)
			d.counts.Add(r)
			d.mu.Unlock()
		}, func(p dataset.Progress) {
			d.mu.Lock()
			d.progress(p)
			d.mu.Unlock()
			d.thr.poke()
		})
		d.mu.Lock()
		d.progress(pr)
		switch {
		case err == nil:
			d.st.State = DatasetDone
		case errors.Is(err, context.Canceled):
			d.st.State = DatasetStopped
		default:
			d.st.State, d.st.Error = DatasetFailed, err.Error()
		}
		d.cancel = nil
		d.log.WithFields(logrus.Fields{"dataset": d.st.Name, "state": d.st.State, "done": pr.Done, "errors": pr.Errors, "s": pr.Elapsed.Seconds()}).Info("dataset run ended")
		d.mu.Unlock()
		cancel()
		d.thr.now()
	}()
	return st, nil
}

// progress copies p into the state (d.mu held).
func (d *Dataset) progress(p dataset.Progress) {
	d.st.Done, d.st.Errors, d.st.Total = p.Done, p.Errors, p.Total
	d.st.Rate, d.st.ElapsedMS, d.st.LeftMS = p.Rate(), ms(p.Elapsed), ms(p.Left())
}

// announce emits the state with the answer counts so far.
func (d *Dataset) announce() { d.emit.Emit(EventDataset, d.State()) }

// State returns the dataset's state with its answer counts.
func (d *Dataset) State() DatasetState {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.snapshot()
}

// snapshot is the state with its counts (d.mu held).
func (d *Dataset) snapshot() DatasetState {
	st := d.st
	st.Summary = d.counts.Summary()
	return st
}

// Cancel stops the run in progress (its results so far stay) and waits
// for it to end; without a run it does nothing.
func (d *Dataset) Cancel() error {
	if done := d.stop(); done != nil {
		<-done
	}
	return nil
}

// stop cancels the run in progress, if any, and returns the channel closed
// when it has ended (nil without a run).
func (d *Dataset) stop() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancel == nil {
		return nil
	}
	d.cancel()
	return d.done
}

// Results returns up to limit rows (at most 1000) from offset, in input
// order.
func (d *Dataset) Results(offset, limit int) []DatasetRow {
	d.mu.Lock()
	defer d.mu.Unlock()
	limit = min(max(limit, 0), 1000)
	offset = min(max(offset, 0), len(d.recs))
	out := make([]DatasetRow, 0, min(limit, len(d.recs)-offset))
	for _, r := range d.recs[offset:min(offset+limit, len(d.recs))] {
		out = append(out, DatasetRow{ID: r.ID, Line: r.Line, Answer: r.Answer(), Error: r.Error, ElapsedMS: r.ElapsedMS})
	}
	return out
}

// Export returns the results so far as "jsonl" (the result log of
// verdict score-file, its header first) or "csv" (one column per answer
// value).
func (d *Dataset) Export(format string) (string, error) {
	d.mu.Lock()
	recs, head := d.recs, d.head
	d.mu.Unlock()
	var b strings.Builder
	var err error
	switch format {
	case "jsonl":
		err = dataset.WriteJSONL(&b, head, recs)
	case "csv":
		err = dataset.WriteCSV(&b, recs)
	default:
		return "", fmt.Errorf("export format %q: want jsonl or csv", format)
	}
	return b.String(), err
}

// Clear forgets the dataset and its results (not while it runs).
func (d *Dataset) Clear() error {
	d.mu.Lock()
	if d.cancel != nil {
		d.mu.Unlock()
		return ErrDatasetBusy
	}
	d.st, d.content, d.recs, d.head, d.counts = DatasetState{State: DatasetEmpty}, "", nil, nil, dataset.Counter{}
	st := d.snapshot()
	d.mu.Unlock()
	d.emit.Emit(EventDataset, st)
	return nil
}

// shutdown stops the run in progress and waits for it.
func (d *Dataset) shutdown() { d.Cancel() }
