package dataset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// ScoreFunc scores one text. A returned error is the record's (written as
// its error line), except a context error, which stops the run.
type ScoreFunc func(ctx context.Context, text string) (json.RawMessage, error)

// DuplicateError reports an id used by two records.
type DuplicateError struct {
	ID          string
	First, Then int // their lines
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("id %q is on line %d and again on line %d: ids must be unique (results are resumed and merged by id)", e.ID, e.First, e.Then)
}

// Plan is what a run has to do: the records of its shard that are not yet
// in the log.
type Plan struct {
	Shard Shard
	// Concurrency is the most records Run scores at once (0 or 1: one at
	// a time); their results are still written in input order.
	Concurrency int
	// Records is the file's record count, Todo those of the shard still to
	// score, Done those of the shard already in the log.
	Records, Todo, Done int
	done                map[string]bool
}

// NewPlan reads the file's records (scan is Scan over it) and checks them:
// every id unique, and every record of the log at the same index and line
// as in the file (a log written for another file, or for the file before it
// was edited, is refused).
func NewPlan(scan func(fn func(Item) error) error, shard Shard, logged []Record) (*Plan, error) {
	p := &Plan{Shard: shard, done: map[string]bool{}}
	byID := make(map[string]Record, len(logged))
	for _, r := range logged {
		byID[r.ID] = r
	}
	lines := map[string]int{}
	err := scan(func(it Item) error {
		if first, ok := lines[it.ID]; ok {
			return &DuplicateError{it.ID, first, it.Line}
		}
		lines[it.ID] = it.Line
		p.Records++
		if !shard.Has(it.Index) {
			return nil
		}
		if r, ok := byID[it.ID]; ok {
			if r.Index != it.Index || r.Line != it.Line {
				return fmt.Errorf("the output's record %q is of line %d, but the input has it on line %d: the output was written for another input", it.ID, r.Line, it.Line)
			}
			p.done[it.ID] = true
			p.Done++
			return nil
		}
		p.Todo++
		return nil
	})
	if err != nil {
		return nil, err
	}
	for id := range byID {
		if _, ok := lines[id]; !ok {
			return nil, fmt.Errorf("the output has a record %q that the input does not: the output was written for another input", id)
		}
		if !shard.Has(byID[id].Index) {
			return nil, fmt.Errorf("the output has record %q of another shard than %s", id, shard)
		}
	}
	return p, nil
}

// Progress is a run's state after each record.
type Progress struct {
	Done, Total int // records of this run (not counting those resumed)
	Errors      int
	Elapsed     time.Duration
}

// Rate is records per second.
func (p Progress) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Done) / p.Elapsed.Seconds()
}

// Left estimates the time to the end (0 until a record is done).
func (p Progress) Left() time.Duration {
	if p.Done == 0 {
		return 0
	}
	return time.Duration(float64(p.Elapsed) * float64(p.Total-p.Done) / float64(p.Done))
}

// Run scores the plan's records (scan is Scan over the same file) with
// score, up to p.Concurrency at once (0 or 1: one at a time), writing each
// to w (when not nil) and to onRecord (when set) in input order, and tells
// onProgress (when set) after each. It stops at ctx's end with its error,
// every record before the first one left unscored written: a log never
// has a gap, so --resume goes on from where it ends. score must be safe
// for concurrent calls when p.Concurrency > 1.
func (p *Plan) Run(ctx context.Context, scan func(fn func(Item) error) error, score ScoreFunc, w *Writer, onRecord func(Record), onProgress func(Progress)) (Progress, error) {
	start := time.Now()
	pr := Progress{Total: p.Todo}
	n := max(p.Concurrency, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Slots in input order: the writer takes each when it is scored. The
	// channel's capacity bounds the records in flight and waiting.
	order := make(chan *slot, n-1)
	var werr error // the writer's, set before done closes
	done := make(chan struct{})
	go func() {
		defer close(done)
		stopped := false
		for sl := range order {
			<-sl.done
			if stopped || sl.cancelled || ctx.Err() != nil {
				stopped = true // nothing after a record left unscored
				continue
			}
			if w != nil {
				if err := w.Write(sl.rec); err != nil {
					werr, stopped = err, true
					cancel()
					continue
				}
			}
			if sl.rec.Error != "" {
				pr.Errors++
			}
			pr.Done++
			pr.Elapsed = time.Since(start)
			if onRecord != nil {
				onRecord(sl.rec)
			}
			if onProgress != nil {
				onProgress(pr)
			}
		}
	}()
	err := scan(func(it Item) error {
		if !p.Shard.Has(it.Index) || p.done[it.ID] {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		sl := &slot{rec: Record{ID: it.ID, Index: it.Index, Line: it.Line, Error: it.Err}, done: make(chan struct{})}
		select {
		case order <- sl:
		case <-ctx.Done():
			return ctx.Err()
		}
		if it.Err != "" {
			close(sl.done)
			return nil
		}
		go func() {
			defer close(sl.done)
			t := time.Now()
			res, err := score(ctx, it.Text)
			if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
				sl.cancelled = true
				return
			}
			sl.rec.ElapsedMS = float64(time.Since(t).Microseconds()) / 1000
			if err != nil {
				sl.rec.Error = err.Error()
			} else {
				sl.rec.Result = res
			}
		}()
		return nil
	})
	close(order)
	<-done
	pr.Elapsed = time.Since(start)
	if werr != nil {
		return pr, werr
	}
	if err == nil {
		err = ctx.Err() // a record cancelled after the scan ended
		if err != nil && errors.Is(err, context.Canceled) && pr.Done == p.Todo {
			err = nil
		}
	}
	return pr, err
}

// slot is one record of Run in flight: done closes once it is scored (or
// left unscored: cancelled).
type slot struct {
	rec       Record
	done      chan struct{}
	cancelled bool
}

// ScanReader adapts a reopenable source to NewPlan and Run: open is called
// for every pass.
func ScanReader(open func() (io.ReadCloser, error), f Format) func(fn func(Item) error) error {
	return func(fn func(Item) error) error {
		r, err := open()
		if err != nil {
			return err
		}
		defer r.Close()
		return Scan(r, f, fn)
	}
}
