// Package desktop is Verdict's window: a Wails v2 shell over the app
// services, with Wails' runtime kept behind the app.Emitter and app.Dialogs
// interfaces.
//
// The window is compiled only with Wails' build tags (desktop,production —
// plus webkit2_41 on distributions that ship WebKitGTK 4.1 — or dev, or
// bindings for `wails build`'s binding generation). Without them, Run returns
// ErrNoWindow, so a plain `go build` still gives a working headless binary.
package desktop

import (
	"errors"
	"io"
	"time"

	"verdict/app"
)

// Options configure the window.
type Options struct {
	// Model is loaded at start: "builtin", a Gemma 3n folder, or "none".
	Model string
	// SettingsPath is the settings file ("" keeps settings in memory).
	SettingsPath string
	// LogLevel overrides the saved log level when not empty.
	LogLevel string
	// Device, when not empty, becomes the device setting (auto, cpu, cuda,
	// cuda:N).
	Device string
	// Stderr receives the log.
	Stderr io.Writer
	// Demo runs the support-ticket preset once the window and the model are
	// ready (a first look, and the start-up check of build/test.sh); with
	// synthetic capture drivers, on a camera snapshot as well.
	Demo bool
}

// ErrNoWindow is returned by Run in a build without the window.
var ErrNoWindow = errors.New("this build of verdict has no window: build it with the tags desktop,production,webkit2_41 " +
	"(bash build/run.sh does), or run `verdict serve` and open the app in a browser")

// demo waits for the model and starts a run of the first preset with its
// sample input.
func demo(svc *app.Services) {
	log := svc.Logger()
	deadline := time.Now().Add(2 * time.Minute)
	for svc.Models.Info().State != app.ModelReady {
		if svc.Models.Info().State == app.ModelError || time.Now().After(deadline) {
			log.Warn("demo: no model to run")
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	ps := svc.Scorer.Presets()
	if len(ps) == 0 {
		return
	}
	p := ps[0]
	req := app.RunRequest{Input: p.Sample, Schema: p.Schema, SchemaName: p.ID}
	// With the synthetic camera (VERDICT_CAPTURE=synthetic, as the window
	// check runs it), the demo takes a snapshot and runs on it too.
	if svc.Media.Drivers() == "synthetic" {
		if r := svc.Media.Snapshot(""); r.Item != nil {
			req.Media = []string{r.Item.ID}
		} else {
			log.WithField("error", r.Error).Warn("demo: no snapshot")
		}
	}
	if _, err := svc.Runs.Start(req); err != nil {
		log.WithError(err).Warn("demo: run not started")
	}
}
