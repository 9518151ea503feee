package app

import (
	"sync"
	"time"
)

// throttle calls flush at most once per interval however often it is poked:
// the first poke after a quiet period flushes at once, later pokes are
// coalesced into one flush at the end of the interval. Flushes never overlap,
// so events leave in the order their state was taken.
type throttle struct {
	interval time.Duration
	flush    func()

	mu      sync.Mutex
	last    time.Time
	pending bool
	seq     uint64 // identifies the scheduled flush

	flushMu sync.Mutex
}

func newThrottle(interval time.Duration, flush func()) *throttle {
	return &throttle{interval: interval, flush: flush}
}

// poke asks for a flush within the interval.
func (t *throttle) poke() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending {
		return
	}
	t.pending = true
	t.seq++
	seq := t.seq
	wait := t.interval - time.Since(t.last)
	if wait < 0 {
		wait = 0
	}
	time.AfterFunc(wait, func() { t.fire(seq) })
}

func (t *throttle) fire(seq uint64) {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	t.mu.Lock()
	if !t.pending || t.seq != seq {
		t.mu.Unlock()
		return
	}
	t.pending = false
	t.last = time.Now()
	t.mu.Unlock()
	t.flush()
}

// now flushes as soon as the interval allows (for a stream's last event),
// replacing a pending flush; it returns after the flush.
func (t *throttle) now() {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	t.mu.Lock()
	if wait := t.interval - time.Since(t.last); wait > 0 {
		t.mu.Unlock()
		time.Sleep(wait)
		t.mu.Lock()
	}
	t.pending = false
	t.seq++
	t.last = time.Now()
	t.mu.Unlock()
	t.flush()
}
