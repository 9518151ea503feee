package app

import (
	"io"

	"github.com/sirupsen/logrus"

	"verdict/engine/models"
)

// Options configure the services.
type Options struct {
	// Emitter receives every event (required).
	Emitter Emitter
	// Logger is the application's logger (a new one writing to LogOutput
	// when nil).
	Logger    *logrus.Logger
	LogOutput io.Writer
	// SettingsPath is the settings file ("" keeps settings in memory).
	SettingsPath string
	// Dialogs are the window's native dialogs (nil in the browser mode).
	Dialogs Dialogs
	// Mode is "desktop" or "browser".
	Mode string
	// Open opens a model (models.Open when nil; tests replace it).
	Open func(spec string) (*models.Model, error)
	// OnFrontendReady runs (on its own goroutine) each time a page reports
	// that it is ready.
	OnFrontendReady func()
}

// Services are every bound service, wired together.
type Services struct {
	Models    *Models
	Scorer    *Scorer
	Generator *Generator
	Runs      *Runs
	Settings  *Settings
	Logs      *Logs
	System    *System

	log *logrus.Logger
}

// New wires the services.
func New(o Options) *Services {
	log := o.Logger
	if log == nil {
		log = logrus.New()
		if o.LogOutput != nil {
			log.SetOutput(o.LogOutput)
		}
	}
	if o.Mode == "" {
		o.Mode = "browser"
	}
	s := &Services{log: log}
	s.Logs = NewLogs(log, o.Emitter)
	s.Settings = NewSettings(o.SettingsPath, s.Logs, log, o.Emitter)
	s.Models = NewModels(o.Open, o.Emitter, log)
	s.Runs = NewRuns(s.Models, s.Settings, o.Emitter, log)
	s.Scorer = &Scorer{runs: s.Runs}
	s.Generator = &Generator{runs: s.Runs}
	s.System = &System{mode: o.Mode, dialogs: o.Dialogs, settings: s.Settings, log: log, onReady: o.OnFrontendReady}
	return s
}

// Bound lists the services the window binds and the browser mode serves;
// each is named by its type (Models, Scorer, ...).
func (s *Services) Bound() []any {
	return []any{s.Models, s.Scorer, s.Generator, s.Runs, s.Settings, s.Logs, s.System}
}

// Logger is the services' logger.
func (s *Services) Logger() *logrus.Logger { return s.log }

// Shutdown cancels the run in progress, waits for it and closes the model.
func (s *Services) Shutdown() {
	s.Runs.cancelActive("shutting down")
	s.Runs.wait()
	s.Models.close()
}
