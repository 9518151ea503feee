// Package app is the Go side of Verdict's user interface: the services the
// window and the browser mode bind (models, scorer, generator, runs, settings,
// logs, system, media), the two worker streams of a side-by-side run and the events
// they stream.
//
// Services are plain structs with context-free logic. Every long call returns
// at once and reports through an Emitter: Wails' runtime in the window, a
// server-sent-events hub in the browser mode, a Recorder in tests. Nothing in
// this package calls Wails' runtime itself; that stays in app/desktop, behind
// the Emitter and Dialogs interfaces.
package app

import (
	"encoding/json"
	"sync"
	"time"
)

// Event names, with the payload each carries.
const (
	EventModel      = "model:state"      // ModelInfo
	EventRunStarted = "run:started"      // RunAnnounce: a run began (from any window or page)
	EventRunUpdate  = "run:update"       // RunUpdate, at most one per UpdateInterval
	EventRunDone    = "run:done"         // RunRecord
	EventLogEntries = "log:entries"      // []LogEntry, at most one per LogInterval
	EventFilesDrop  = "files:dropped"    // []InputFile (window only)
	EventSettings   = "settings:changed" // Preferences

	EventMedia             = "media:changed"      // []MediaItem: the input's media after a change
	EventMediaAvailability = "media:availability" // MediaAvailability
	EventCameraFrame       = "camera:frame"       // CameraFrame, about 3 a second while live
	EventCameraState       = "camera:state"       // CameraState
	EventMicState          = "mic:state"          // RecordingState, at most 10 a second
	EventPlayback          = "playback:state"     // PlaybackState
)

// Emitter sends one event to the user interface. Implementations must be safe
// for concurrent use and must not block for long.
type Emitter interface {
	Emit(event string, data any)
}

// EmitterFunc adapts a function to Emitter.
type EmitterFunc func(event string, data any)

// Emit calls f.
func (f EmitterFunc) Emit(event string, data any) { f(event, data) }

// SwitchEmitter forwards to an emitter that is set later (Wails hands its
// context over only at start-up); events before that are dropped.
type SwitchEmitter struct {
	mu sync.RWMutex
	to Emitter
}

// Set makes e the destination of later events (nil drops them).
func (s *SwitchEmitter) Set(e Emitter) {
	s.mu.Lock()
	s.to = e
	s.mu.Unlock()
}

// Emit forwards to the current destination, if any.
func (s *SwitchEmitter) Emit(event string, data any) {
	s.mu.RLock()
	to := s.to
	s.mu.RUnlock()
	if to != nil {
		to.Emit(event, data)
	}
}

// Multi sends every event to each of its emitters.
type Multi []Emitter

// Emit forwards to all.
func (m Multi) Emit(event string, data any) {
	for _, e := range m {
		e.Emit(event, data)
	}
}

// Recorded is one event a Recorder received, its payload as JSON.
type Recorded struct {
	Name string
	At   time.Time
	JSON json.RawMessage
}

// Recorder is the fake Emitter of tests: it keeps every event, encoded as
// the transports encode it, and lets a test wait for one.
type Recorder struct {
	mu     sync.Mutex
	events []Recorded
	notify chan struct{}
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{notify: make(chan struct{})} }

// Emit records the event.
func (r *Recorder) Emit(event string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"marshal_error": err.Error()})
	}
	r.mu.Lock()
	r.events = append(r.events, Recorded{Name: event, At: time.Now(), JSON: b})
	close(r.notify)
	r.notify = make(chan struct{})
	r.mu.Unlock()
}

// Events returns the events named name (all when name is "").
func (r *Recorder) Events(name string) []Recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Recorded
	for _, e := range r.events {
		if name == "" || e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// Wait blocks until an event named name satisfies ok (nil: any), or the
// timeout passes; it returns that event and whether it came.
func (r *Recorder) Wait(name string, timeout time.Duration, ok func(json.RawMessage) bool) (Recorded, bool) {
	deadline := time.After(timeout)
	seen := 0
	for {
		r.mu.Lock()
		evs := r.events[seen:]
		seen = len(r.events)
		ch := r.notify
		r.mu.Unlock()
		for _, e := range evs {
			if e.Name == name && (ok == nil || ok(e.JSON)) {
				return e, true
			}
		}
		select {
		case <-ch:
		case <-deadline:
			return Recorded{}, false
		}
	}
}
