package app

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"

	"verdict/media/availability"
	"verdict/media/capture"
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
	// Open opens a model (OpenWith(models.Options{}) when nil; tests
	// replace it).
	Open OpenFunc
	// Capture selects the capture drivers: "hardware" (cameras and
	// microphones) or "synthetic" (mediadevices' VideoTest and AudioTest, for
	// tests and demos); empty reads VERDICT_CAPTURE, then means hardware.
	Capture string
	// OpenSpeaker opens the audio output (media/playback when nil; tests
	// replace it).
	OpenSpeaker func(timeout time.Duration) (Speaker, error)
	// CheckMedia reports which media features work (media/availability when
	// nil; tests replace it).
	CheckMedia func(ctx context.Context, d *capture.Devices) availability.Report
	// OnFrontendReady runs (on its own goroutine) each time a page reports
	// that it is ready.
	OnFrontendReady func()
	// Devices, when set (serve --devices), are the devices a model loads
	// on, one replica each with requests spread over them, in place of the
	// device setting.
	Devices []string
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
	Media     *Media
	Dataset   *Dataset
	Library   *Library

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
	s.Library = NewLibrary(o.Emitter, log, recentPathFor(o.SettingsPath))
	s.Models = NewModels(o.Open, s.Library.watch(o.Emitter), log)
	s.Models.device = s.Settings.Get().Device
	s.Models.devices = o.Devices
	s.Settings.onDevice = s.Models.setDevice
	s.Media = newMedia(o, s.Models, log)
	s.Runs = NewRuns(s.Models, s.Settings, o.Emitter, log)
	s.Runs.media = s.Media
	s.Scorer = &Scorer{runs: s.Runs}
	s.Generator = &Generator{runs: s.Runs}
	s.Dataset = newDataset(s.Models, s.Settings, o.Emitter, log)
	s.System = &System{mode: o.Mode, dialogs: o.Dialogs, settings: s.Settings, media: s.Media, log: log, onReady: o.OnFrontendReady}
	return s
}

// Bound lists the services the window binds and the browser mode serves;
// each is named by its type (Models, Scorer, ...).
func (s *Services) Bound() []any {
	return []any{s.Models, s.Scorer, s.Generator, s.Runs, s.Settings, s.Logs, s.System, s.Media, s.Dataset, s.Library}
}

// MediaFiles serves the media previews under /media/ (see Media.Files).
func (s *Services) MediaFiles() http.Handler { return s.Media.Files() }

// Uploader takes the files the page uploads (the browser mode's
// POST /api/upload).
type Uploader interface {
	// Add adds one uploaded file, read from r.
	Add(name string, r io.Reader) MediaResult
	// Done announces the media after a batch of uploads.
	Done()
}

type uploader struct{ m *Media }

func (u uploader) Add(name string, r io.Reader) MediaResult { return u.m.addUpload(name, r) }
func (u uploader) Done()                                    { u.m.changed() }

// Uploads is the Uploader of the media service.
func (s *Services) Uploads() Uploader { return uploader{s.Media} }

// Logger is the services' logger.
func (s *Services) Logger() *logrus.Logger { return s.log }

// Shutdown stops the camera, the recording and the playback, cancels the run
// in progress, waits for it and closes the model.
func (s *Services) Shutdown() {
	s.Library.shutdown()
	s.Media.shutdown()
	s.Runs.cancelActive("shutting down")
	s.Dataset.shutdown()
	s.Runs.wait()
	s.Models.close()
}
