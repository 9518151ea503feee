// Package sched runs the requests of many callers on one model: each step
// one forward pass over a batch of ragged rows gathered from every running
// request (prompt chunks of newly admitted ones beside decode and branch
// rows of the others), under a row budget, interactive requests before
// bulk ones. A request is admitted only once the key/value pool can promise
// every block it can take, so that no admitted request runs out halfway;
// one that could never fit is refused at once with the sizes named. A row's
// result does not depend on the batch it runs in, so every request's
// results are the bits it would get alone.
package sched

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"verdict/engine/model"
	"verdict/native"
)

// Priority orders requests: lower first.
type Priority int

const (
	// Interactive is the app's own runs and API calls.
	Interactive Priority = iota
	// Bulk is dataset work (score-file, the app's datasets).
	Bulk
	numPriorities
)

// ErrQueueFull refuses a request when MaxWaiting requests already wait
// for admission: the caller may try again later.
var ErrQueueFull = errors.New("sched: the queue is full")

// ErrClosed refuses requests once the scheduler is closed.
var ErrClosed = errors.New("sched: the scheduler is closed")

// NeverFitsError refuses a request whose blocks exceed the whole pool.
type NeverFitsError struct{ KV *model.KVError }

func (e *NeverFitsError) Error() string {
	return fmt.Sprintf("sched: the request needs %d %s key/value blocks of %d positions, the whole pool holds %d",
		e.KV.Need, e.KV.Kind, model.KVBlock, e.KV.Free)
}

func (e *NeverFitsError) Unwrap() error { return e.KV }

// Options are a scheduler's settings.
type Options struct {
	// StepRows is the most rows one step runs (0, or more than an Exec
	// takes: an Exec's rows).
	StepRows int
	// MaxWaiting is the most requests that wait for admission at once
	// (0: DefaultMaxWaiting); more are refused with ErrQueueFull.
	MaxWaiting int
	// Reclaim, when set, frees blocks held outside any request (kept
	// prefixes) when a request cannot be admitted while none runs; it
	// reports whether it freed any.
	Reclaim func() bool
}

// DefaultMaxWaiting is the admission queue's default bound.
const DefaultMaxWaiting = 1024

// Stats describe a scheduler's work so far.
type Stats struct {
	Steps     int64 // forward passes run
	Rows      int64 // rows in them
	Passes    int64 // requests' passes they merged
	MaxPasses int   // most passes merged in one step
	Admitted  int64 // requests admitted
	Waited    int64 // admitted after waiting for blocks
	Refused   int64 // refused (never fits, queue full)
	Alone     int64 // passes rerun alone after a merged step failed
	Running   int   // requests admitted and not ended
	Waiting   int   // requests waiting for admission
	Queued    int   // passes waiting for a step
}

// Scheduler runs many requests' forward passes on one model, merged into
// one batch a step. It is safe for concurrent use.
type Scheduler struct {
	m    model.Model
	x    model.Exec
	opt  Options
	rows int

	mu      sync.Mutex
	queue   [numPriorities][]*pass
	waiting [numPriorities][]*waiter
	running int
	closed  bool
	stats   Stats
	wake    chan struct{}
	done    chan struct{}
}

// pass is one Run of a request, waiting for or in a step; or a solo
// step (a device loop) that has the Exec to itself.
type pass struct {
	b     *model.Batch
	then  func(x model.Exec, h native.Tensor) error
	solo  func(x model.Exec) error
	err   chan error
	taken bool
}

// alone reports whether p runs in a step of its own.
func (p *pass) alone() bool { return p.solo != nil || p.b.Hook != nil }

// rows is the rows p adds to a step.
func (p *pass) rows() int {
	if p.solo != nil {
		return 1
	}
	return len(p.b.Rows)
}

// waiter is a request waiting for admission.
type waiter struct {
	need  [2]int
	first bool // the request's first admission: it starts running
	tk    chan model.Ticket
	err   chan error
}

// New starts a scheduler on m with an Exec of its own; Close stops it.
func New(m model.Model, opt Options) (*Scheduler, error) {
	x, err := m.Acquire()
	if err != nil {
		return nil, err
	}
	rows := x.Rows()
	if opt.StepRows > 0 && opt.StepRows < rows {
		rows = opt.StepRows
	}
	if opt.MaxWaiting <= 0 {
		opt.MaxWaiting = DefaultMaxWaiting
	}
	s := &Scheduler{m: m, x: x, opt: opt, rows: rows, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.loop()
	return s, nil
}

// Close stops the scheduler once the passes in its queue have run; later
// requests are refused with ErrClosed. Requests waiting for admission are
// refused too.
func (s *Scheduler) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return
	}
	s.closed = true
	for p := range s.waiting {
		for _, w := range s.waiting[p] {
			w.err <- ErrClosed
		}
		s.waiting[p] = nil
	}
	s.mu.Unlock()
	s.signal()
	<-s.done
	s.x.Release()
}

// Model is the model the scheduler runs.
func (s *Scheduler) Model() model.Model { return s.m }

// Stats reports the scheduler's work so far.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Running = s.running
	for p := range s.queue {
		st.Waiting += len(s.waiting[p])
		st.Queued += len(s.queue[p])
	}
	return st
}

func (s *Scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Request is one request's handle: a model.Runner whose passes join the
// scheduler's steps, and its admission. A request runs its passes one at a
// time (a Runner's Run returns before the next); End ends it.
type Request struct {
	s        *Scheduler
	ctx      context.Context
	prio     Priority
	admitted bool
	ended    bool
	Waited   time.Duration // time spent waiting for admission
}

// Begin starts a request of priority prio; ctx cancels its waits.
func (s *Scheduler) Begin(ctx context.Context, prio Priority) *Request {
	if prio < 0 || prio >= numPriorities {
		prio = Bulk
	}
	return &Request{s: s, ctx: ctx, prio: prio}
}

// Rows reports the most rows one Run takes: the step's budget.
func (r *Request) Rows() int { return r.s.rows }

// CutChunk is where the scheduler's model lets a chunk of rows beginning
// at lo end, at most at hi (model.ChunkCutter, through model.NextCut on the
// scheduler's Exec): a request's callers cut their chunks as they would on
// an Exec of their own. Each pass's chunk then keeps what must share a
// Forward, and so does a step merging several passes.
func (r *Request) CutChunk(rows []model.Row, lo, hi int) (int, error) {
	return model.NextCut(r.s.x, rows, lo, hi)
}

// Admit waits until the pool can promise need blocks (model.KV.Need)
// and returns the ticket that holds them; the caller releases it. A request
// the whole pool could not hold is refused at once (*NeverFitsError), and
// so is one beyond the admission queue's bound (ErrQueueFull). A request
// may admit again once it has released its ticket (a scorer request that
// scores reference inputs first).
func (r *Request) Admit(need [2]int) (model.Ticket, error) {
	s := r.s
	if err := s.m.AdmitFits(need); err != nil {
		var kv *model.KVError
		if errors.As(err, &kv) {
			err = &NeverFitsError{kv}
		}
		s.mu.Lock()
		s.stats.Refused++
		s.mu.Unlock()
		return nil, err
	}
	start := time.Now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	ahead := 0
	for p := Priority(0); p <= r.prio; p++ {
		ahead += len(s.waiting[p])
	}
	if ahead == 0 {
		if tk, err := s.m.Admit(need); err == nil {
			r.running()
			s.stats.Admitted++
			s.mu.Unlock()
			return tk, nil
		}
	}
	total := 0
	for p := range s.waiting {
		total += len(s.waiting[p])
	}
	if total >= s.opt.MaxWaiting {
		s.stats.Refused++
		s.mu.Unlock()
		return nil, ErrQueueFull
	}
	w := &waiter{need: need, first: !r.admitted, tk: make(chan model.Ticket, 1), err: make(chan error, 1)}
	r.admitted = true // counted as running once its ticket comes
	s.waiting[r.prio] = append(s.waiting[r.prio], w)
	s.mu.Unlock()
	s.signal()
	select {
	case tk := <-w.tk:
		r.Waited += time.Since(start)
		return tk, nil
	case err := <-w.err:
		r.admitted = r.admitted && !w.first
		return nil, err
	case <-r.ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		if dropWaiter(s.waiting[r.prio], w, &s.waiting[r.prio]) {
			r.admitted = r.admitted && !w.first
			return nil, r.ctx.Err()
		}
		// Admitted meanwhile: give the ticket back (End ends the request).
		select {
		case tk := <-w.tk:
			tk.Release()
			go s.signal()
		case err := <-w.err:
			r.admitted = r.admitted && !w.first
			return nil, err
		}
		return nil, r.ctx.Err()
	}
}

// dropWaiter removes w from ws (stored back in dst), reporting whether it
// was there.
func dropWaiter(ws []*waiter, w *waiter, dst *[]*waiter) bool {
	for i, v := range ws {
		if v == w {
			*dst = append(ws[:i:i], ws[i+1:]...)
			return true
		}
	}
	return false
}

// running counts r as running from its first admission. Called with
// s.mu held.
func (r *Request) running() {
	if !r.admitted {
		r.admitted = true
		r.s.running++
	}
}

// End ends the request: its admission no longer counts, and waiting
// requests may take the blocks it freed. The caller frees its caches and
// releases its ticket first. End is idempotent.
func (r *Request) End() {
	if r.ended {
		return
	}
	r.ended = true
	if r.admitted {
		r.s.mu.Lock()
		r.s.running--
		r.s.mu.Unlock()
	}
	r.s.signal()
}

// GreedyLoops reports whether the scheduler's Exec decodes greedy tokens
// in device loops (model.Exec.GreedyLoops).
func (r *Request) GreedyLoops() bool { return r.s.x.GreedyLoops() }

// DecodeGreedy runs a greedy device loop (model.Exec.DecodeGreedy) as a
// step of its own while r is the only request running; with others it
// answers model.ErrBusy, so that the caller's tokens join the shared
// steps instead.
func (r *Request) DecodeGreedy(caches []model.Cache, next []int32, steps int, stop []int32) ([][]int32, error) {
	s := r.s
	s.mu.Lock()
	busy := s.running > 1 || len(s.waiting[Interactive])+len(s.waiting[Bulk]) > 0
	s.mu.Unlock()
	if busy {
		return nil, model.ErrBusy
	}
	var out [][]int32
	err := r.queue(&pass{solo: func(x model.Exec) error {
		var err error
		out, err = x.DecodeGreedy(caches, next, steps, stop)
		return err
	}, err: make(chan error, 1)})
	return out, err
}

// Run queues b for the next step with room and waits for it; then runs on
// the scheduler's Exec with b's outputs. A pass still queued when the
// request's context ends is dropped, and Run returns the context's error.
func (r *Request) Run(b *model.Batch, then func(x model.Exec, h native.Tensor) error) error {
	s := r.s
	if len(b.Rows) == 0 {
		return errors.New("sched: an empty batch")
	}
	if len(b.Rows) > s.rows {
		return fmt.Errorf("sched: a pass of %d rows exceeds the step's %d", len(b.Rows), s.rows)
	}
	return r.queue(&pass{b: b, then: then, err: make(chan error, 1)})
}

// queue queues p and waits for its step.
func (r *Request) queue(p *pass) error {
	s := r.s
	if err := r.ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.queue[r.prio] = append(s.queue[r.prio], p)
	s.mu.Unlock()
	s.signal()
	select {
	case err := <-p.err:
		return err
	case <-r.ctx.Done():
		s.mu.Lock()
		if !p.taken {
			for i, q := range s.queue[r.prio] {
				if q == p {
					s.queue[r.prio] = append(s.queue[r.prio][:i:i], s.queue[r.prio][i+1:]...)
					break
				}
			}
			s.mu.Unlock()
			return r.ctx.Err()
		}
		s.mu.Unlock()
		<-p.err // in a step: its caches are in use until it ends
		return r.ctx.Err()
	}
}

// loop runs steps while passes wait, and admits waiting requests as blocks
// come free.
func (s *Scheduler) loop() {
	defer close(s.done)
	var merged model.Batch
	for {
		s.mu.Lock()
		s.admitWaiting()
		step := s.take()
		closed := s.closed
		s.mu.Unlock()
		if len(step) == 0 {
			if closed {
				return
			}
			<-s.wake
			continue
		}
		s.run(&merged, step)
	}
}

// admitWaiting admits waiting requests in priority order, first come
// first served within a priority, while the pool can promise their
// blocks. When the first cannot be admitted and no request runs, blocks
// held outside requests are reclaimed. Called with s.mu held.
func (s *Scheduler) admitWaiting() {
	for p := range s.waiting {
		for len(s.waiting[p]) > 0 {
			w := s.waiting[p][0]
			tk, err := s.m.Admit(w.need)
			if err != nil && s.running == 0 {
				// Nothing runs that would free blocks: kept prefixes and
				// dropped caches hold them.
				if s.opt.Reclaim != nil {
					s.opt.Reclaim()
				}
				runtime.GC()
				tk, err = s.m.Admit(w.need)
				if err != nil {
					s.waiting[p] = s.waiting[p][1:]
					s.stats.Refused++
					w.err <- fmt.Errorf("sched: no request runs and the pool still cannot promise the blocks: %w", err)
					continue
				}
			}
			if err != nil {
				return // wait for blocks: nobody passes the first
			}
			s.waiting[p] = s.waiting[p][1:]
			if w.first {
				s.running++
			}
			s.stats.Admitted++
			s.stats.Waited++
			w.tk <- tk
		}
	}
}

// take removes the passes of the next step from the queue: interactive
// ones first, each queue in order, while the rows fit the budget. A pass
// with a hook, and a solo step, run alone. Called with s.mu held.
func (s *Scheduler) take() []*pass {
	var step []*pass
	rows := 0
	for p := range s.queue {
		q := s.queue[p]
		kept := q[:0]
		for _, ps := range q {
			n := ps.rows()
			if rows+n > s.rows || (ps.alone() && len(step) > 0) || (len(step) == 1 && step[0].alone()) {
				kept = append(kept, ps)
				continue
			}
			ps.taken = true
			step = append(step, ps)
			rows += n
		}
		clear(q[len(kept):])
		s.queue[p] = kept
	}
	return step
}

// run runs one step: the passes merged into one batch, their outputs handed
// to each pass's head in turn. When the merged pass fails, each pass runs
// alone, so that one request's bad input fails only that request.
func (s *Scheduler) run(merged *model.Batch, step []*pass) {
	x := s.x
	if p := step[0]; len(step) == 1 {
		s.count(step, p.rows())
		if p.solo != nil {
			p.err <- p.solo(x)
			return
		}
		p.err <- x.Run(p.b, p.then)
		return
	}
	merged.Reset()
	outs := make([]int, len(step))
	D := s.m.Config().Hidden
	for i, p := range step {
		lo, hi := embedRange(p.b)
		base := int32(len(merged.Embeds) / D)
		if hi > lo {
			merged.Embeds = append(merged.Embeds, p.b.Embeds[int(lo)*D:int(hi)*D]...)
		}
		for _, r := range p.b.Rows {
			if r.Embed >= 0 {
				r.Embed = r.Embed - lo + base
			}
			if r.Out {
				outs[i]++
			}
			merged.Rows = append(merged.Rows, r)
		}
	}
	s.count(step, len(merged.Rows))
	lens := map[model.Cache]int{}
	for _, r := range merged.Rows {
		lens[r.Cache] = r.Cache.Len()
	}
	h, err := x.Forward(merged)
	if err != nil {
		moved := false
		for c, n := range lens {
			moved = moved || c.Len() != n
		}
		if moved { // failed after the rows joined their sequences
			for _, p := range step {
				p.err <- err
			}
			return
		}
		s.mu.Lock()
		s.stats.Alone += int64(len(step))
		s.mu.Unlock()
		for _, p := range step {
			p.err <- x.Run(p.b, p.then)
		}
		return
	}
	off := 0
	for i, p := range step {
		var err error
		if p.then != nil {
			err = p.then(x, h.Slice(off, off+outs[i]))
		}
		off += outs[i]
		p.err <- err
	}
}

// embedRange is the rows of b.Embeds its rows take: [lo, hi).
func embedRange(b *model.Batch) (lo, hi int32) {
	lo, hi = -1, -1
	for _, r := range b.Rows {
		if r.Embed < 0 {
			continue
		}
		if lo < 0 || r.Embed < lo {
			lo = r.Embed
		}
		hi = max(hi, r.Embed+1)
	}
	if lo < 0 {
		return 0, 0
	}
	return lo, hi
}

func (s *Scheduler) count(step []*pass, rows int) {
	s.mu.Lock()
	s.stats.Steps++
	s.stats.Rows += int64(rows)
	s.stats.Passes += int64(len(step))
	s.stats.MaxPasses = max(s.stats.MaxPasses, len(step))
	s.mu.Unlock()
}
