package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"

	"verdict/engine/safefile"
	"verdict/engine/scorer"
	"verdict/engine/session"
)

// GenerationSettings tune the generation side of a run.
type GenerationSettings struct {
	MaxTokens   int     `json:"max_tokens"`
	Temperature float64 `json:"temperature"` // 0: greedy
	TopK        int     `json:"top_k"`       // 0: off
	TopP        float64 `json:"top_p"`       // 1: off
	Seed        uint64  `json:"seed"`
	// Prompt is "schema" (the scorer's prompt: the model writes the JSON
	// answer) or "chat" (the input alone as the user's message).
	Prompt string `json:"prompt"`
}

// Override replaces the settings a request gives (nil: kept).
func (g *GenerationSettings) Override(maxTokens *int, temperature *float64, topK *int, topP *float64, seed *uint64) {
	if maxTokens != nil {
		g.MaxTokens = *maxTokens
	}
	if temperature != nil {
		g.Temperature = *temperature
	}
	if topK != nil {
		g.TopK = *topK
	}
	if topP != nil {
		g.TopP = *topP
	}
	if seed != nil {
		g.Seed = *seed
	}
}

// Sampling is g as the session's sampling settings.
func (g GenerationSettings) Sampling() session.Sampling {
	return session.Sampling{MaxTokens: g.MaxTokens, Temperature: g.Temperature, TopK: g.TopK, TopP: g.TopP, Seed: g.Seed}
}

// ScorerSettings tune the scorer side of a run.
type ScorerSettings struct {
	BranchBatch int     `json:"branch_batch"` // 1..64
	Temperature float64 `json:"temperature"`  // > 0
	// Calibration is a calibration file (verdict calibrate) whose fitted
	// temperatures replace Temperature; empty for none.
	Calibration string `json:"calibration,omitempty"`
	// Backend is json (candidate likelihoods; empty means json), cached
	// (single-token answer codes) or catalog (choice fields decoded through
	// their option tries).
	Backend string `json:"backend,omitempty"`
	// Normalize is a scoring correction: none (or empty), contextual or pmi.
	Normalize string `json:"normalize,omitempty"`
}

// RunSettings are the settings a run uses.
type RunSettings struct {
	Generation GenerationSettings `json:"generation"`
	Scorer     ScorerSettings     `json:"scorer"`
}

// Preferences are everything the settings service keeps.
type Preferences struct {
	Run      RunSettings `json:"run"`
	LogLevel string      `json:"log_level"`
	// Device is the compute backend models load on: auto (the GPU when the
	// CUDA library opens and finds one, else the CPU), cpu, cuda or cuda:N;
	// empty means auto.
	Device string `json:"device"`
}

// Validate checks the run settings and the device.
func (p Preferences) Validate() error {
	if err := p.Run.Validate(); err != nil {
		return err
	}
	if err := CheckDevice(p.Device); p.Device != "" && err != nil {
		return &SettingsError{"device", err.Error()}
	}
	return nil
}

// Generation prompt modes.
const (
	PromptSchema = "schema"
	PromptChat   = "chat"
)

// DefaultPreferences are the one-click defaults.
func DefaultPreferences() Preferences {
	return Preferences{
		Run: RunSettings{
			Generation: GenerationSettings{MaxTokens: 96, Temperature: 0, TopK: 64, TopP: 0.95, Seed: 0, Prompt: PromptSchema},
			Scorer:     ScorerSettings{BranchBatch: scorer.DefaultBranchBatch, Temperature: 1},
		},
		LogLevel: "info",
		Device:   DeviceAuto,
	}
}

// SettingsError is a setting out of its range.
type SettingsError struct{ Setting, Msg string }

func (e *SettingsError) Error() string { return "setting " + e.Setting + ": " + e.Msg }

// Validate checks every value's range.
func (r RunSettings) Validate() error {
	g, s := r.Generation, r.Scorer
	bad := func(name, f string, a ...any) error { return &SettingsError{name, fmt.Sprintf(f, a...)} }
	switch {
	case g.MaxTokens < 1 || g.MaxTokens > 4096:
		return bad("generation.max_tokens", "%d is outside 1..4096", g.MaxTokens)
	case !(g.Temperature >= 0 && g.Temperature <= 5):
		return bad("generation.temperature", "%v is outside 0..5 (0 is greedy)", g.Temperature)
	case g.TopK < 0 || g.TopK > 1000:
		return bad("generation.top_k", "%d is outside 0..1000 (0 is off)", g.TopK)
	case !(g.TopP >= 0 && g.TopP <= 1):
		return bad("generation.top_p", "%v is outside 0..1", g.TopP)
	case g.Prompt != PromptSchema && g.Prompt != PromptChat:
		return bad("generation.prompt", "%q is not one of schema, chat", g.Prompt)
	case s.BranchBatch < 1 || s.BranchBatch > 64:
		return bad("scorer.branch_batch", "%d is outside 1..64", s.BranchBatch)
	case !(s.Temperature > 0 && s.Temperature <= 100) || math.IsInf(s.Temperature, 0):
		return bad("scorer.temperature", "%v must be above 0 and at most 100", s.Temperature)
	case scorer.CheckBackend(s.Backend) != nil:
		return bad("scorer.backend", "%q is not one of %s", s.Backend, strings.Join(scorer.Backends, ", "))
	case scorer.CheckNormalize(s.Normalize) != nil:
		return bad("scorer.normalize", "%q is not one of %s", s.Normalize, strings.Join(scorer.Normalizations, ", "))
	}
	return nil
}

// MaxSettingsBytes bounds the settings file.
const MaxSettingsBytes = 1 << 20

// Settings is the settings service. With a path it keeps the preferences in
// that JSON file; without one, in memory only.
type Settings struct {
	path string
	logs *Logs
	log  *logrus.Logger
	emit Emitter

	// onDevice, when set, hears a changed device setting (the models
	// service loads the model again on it).
	onDevice func(device string) error

	mu sync.Mutex
	p  Preferences
}

// NewSettings loads the preferences at path (defaults when it is missing or
// unreadable) and applies the log level.
func NewSettings(path string, logs *Logs, log *logrus.Logger, e Emitter) *Settings {
	s := &Settings{path: path, logs: logs, log: log, emit: e, p: DefaultPreferences()}
	if path != "" {
		b, err := safefile.ReadFile(path, MaxSettingsBytes)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			log.WithError(err).Warn("settings: cannot read; using defaults")
		default:
			p := DefaultPreferences()
			if err := json.Unmarshal(b, &p); err != nil {
				log.WithError(err).WithField("path", path).Warn("settings: invalid file; using defaults")
			} else if err := p.Validate(); err != nil {
				log.WithError(err).WithField("path", path).Warn("settings: invalid value; using defaults")
			} else {
				s.p = p
			}
		}
	}
	if err := logs.SetLevel(s.p.LogLevel); err != nil {
		s.p.LogLevel = DefaultPreferences().LogLevel
		logs.SetLevel(s.p.LogLevel)
	}
	if s.p.Device == "" {
		s.p.Device = DeviceAuto
	}
	return s
}

// Get returns the current preferences.
func (s *Settings) Get() Preferences {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p
}

// Defaults returns the default preferences.
func (s *Settings) Defaults() Preferences { return DefaultPreferences() }

// Set validates and stores p, returning what is now in effect. A changed
// device loads the model again on it.
func (s *Settings) Set(p Preferences) (Preferences, error) {
	if p.Device == "" {
		p.Device = DeviceAuto
	}
	if err := p.Validate(); err != nil {
		return s.Get(), err
	}
	if err := s.logs.SetLevel(p.LogLevel); err != nil {
		return s.Get(), &SettingsError{"log_level", err.Error()}
	}
	s.mu.Lock()
	changed := s.p.Device != p.Device
	s.p = p
	err := s.save()
	on := s.onDevice
	s.mu.Unlock()
	s.emit.Emit(EventSettings, p)
	if changed && on != nil {
		if derr := on(p.Device); derr != nil {
			s.log.WithError(derr).Warn("settings: the model did not load again on the new device")
		}
	}
	if err != nil {
		return p, fmt.Errorf("settings apply but were not saved: %w", err)
	}
	return p, nil
}

// SetDevice sets the device setting alone (the --device flag of serve and
// window), as Set does.
func (s *Settings) SetDevice(device string) (Preferences, error) {
	p := s.Get()
	p.Device = device
	return s.Set(p)
}

// Reset restores the defaults.
func (s *Settings) Reset() (Preferences, error) { return s.Set(DefaultPreferences()) }

// Path is the settings file ("" when kept in memory).
func (s *Settings) Path() string { return s.path }

func (s *Settings) save() error {
	if s.path == "" {
		return nil
	}
	b, err := json.MarshalIndent(s.p, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.path)
}

// DefaultSettingsPath is the per-user settings file.
func DefaultSettingsPath() string {
	d, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "verdict", "settings.json")
}
