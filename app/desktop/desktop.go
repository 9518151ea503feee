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
)

// Options configure the window.
type Options struct {
	// Model is loaded at start: "builtin", a Gemma 3n folder, or "none".
	Model string
	// SettingsPath is the settings file ("" keeps settings in memory).
	SettingsPath string
	// LogLevel overrides the saved log level when not empty.
	LogLevel string
	// Stderr receives the log.
	Stderr io.Writer
}

// ErrNoWindow is returned by Run in a build without the window.
var ErrNoWindow = errors.New("this build of verdict has no window: build it with the tags desktop,production,webkit2_41 " +
	"(bash build/run.sh does), or run `verdict serve` and open the app in a browser")
