package app

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// LogInterval is the shortest time between two log:entries events.
const LogInterval = 250 * time.Millisecond

// LogCapacity is how many entries the log viewer keeps.
const LogCapacity = 2000

// LogEntry is one log line as the log viewer shows it.
type LogEntry struct {
	Seq     int64             `json:"seq"`
	TimeMs  int64             `json:"time_ms"` // Unix milliseconds
	Level   string            `json:"level"`
	Message string            `json:"message"`
	Fields  map[string]string `json:"fields,omitempty"`
}

// Logs is the log service: it keeps the latest entries of a logrus logger
// for the viewer, streams new ones (coalesced) and sets the level.
type Logs struct {
	log  *logrus.Logger
	emit Emitter
	th   *throttle

	mu      sync.Mutex
	ring    []LogEntry // oldest first, at most LogCapacity
	seq     int64
	pending []LogEntry
}

// NewLogs attaches the service to l; new entries go to e as log:entries.
func NewLogs(l *logrus.Logger, e Emitter) *Logs {
	s := &Logs{log: l, emit: e}
	s.th = newThrottle(LogInterval, s.flush)
	l.AddHook(logHook{s})
	return s
}

type logHook struct{ s *Logs }

func (logHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h logHook) Fire(e *logrus.Entry) error {
	h.s.add(e)
	return nil
}

func (s *Logs) add(e *logrus.Entry) {
	le := LogEntry{TimeMs: e.Time.UnixMilli(), Level: e.Level.String(), Message: e.Message}
	if len(e.Data) > 0 {
		le.Fields = make(map[string]string, len(e.Data))
		for k, v := range e.Data {
			if err, ok := v.(error); ok {
				le.Fields[k] = err.Error()
				continue
			}
			le.Fields[k] = fmt.Sprint(v)
		}
	}
	s.mu.Lock()
	s.seq++
	le.Seq = s.seq
	if len(s.ring) >= LogCapacity {
		copy(s.ring, s.ring[1:])
		s.ring = s.ring[:len(s.ring)-1]
	}
	s.ring = append(s.ring, le)
	s.pending = append(s.pending, le)
	if len(s.pending) > LogCapacity {
		s.pending = s.pending[len(s.pending)-LogCapacity:]
	}
	s.mu.Unlock()
	s.th.poke()
}

func (s *Logs) flush() {
	s.mu.Lock()
	p := s.pending
	s.pending = nil
	s.mu.Unlock()
	if len(p) > 0 {
		s.emit.Emit(EventLogEntries, p)
	}
}

// Entries returns up to limit entries (0: all kept) with a sequence number
// above after, oldest first.
func (s *Logs) Entries(after int64, limit int) []LogEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.ring), func(i int) bool { return s.ring[i].Seq > after })
	out := s.ring[i:]
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return append([]LogEntry{}, out...)
}

// Level returns the logger's level ("info", "debug", ...).
func (s *Logs) Level() string { return s.log.GetLevel().String() }

// Levels lists the levels SetLevel accepts, most severe first.
func (s *Logs) Levels() []string {
	return []string{"error", "warning", "info", "debug", "trace"}
}

// SetLevel changes the logger's level.
func (s *Logs) SetLevel(level string) error {
	l, err := logrus.ParseLevel(level)
	if err != nil {
		return fmt.Errorf("log level %q: use one of error, warning, info, debug, trace", level)
	}
	if s.log.GetLevel() != l {
		s.log.SetLevel(l)
		s.log.WithField("level", l.String()).Info("log level changed")
	}
	return nil
}

// Clear forgets the kept entries.
func (s *Logs) Clear() {
	s.mu.Lock()
	s.ring = nil
	s.mu.Unlock()
}
