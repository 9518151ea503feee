package cli

import (
	"context"
	"io"

	"verdict/app"
	"verdict/app/desktop"
	"verdict/engine/models"
)

func windowCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("window", stderr)
	model := fs.String("model", models.Builtin, "model to load at start: builtin, a Gemma 3n folder, or none")
	settings := fs.String("settings", app.DefaultSettingsPath(), "settings file (empty: keep settings in memory)")
	level := fs.String("log-level", "", "log level (error, warning, info, debug, trace); default: the saved setting")
	device := fs.String("device", "", appDeviceHelp)
	demo := fs.Bool("demo", false, "run the support-ticket sample once the window and the model are ready")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageErr("unexpected arguments %v", fs.Args())
	}
	return desktop.Run(ctx, desktop.Options{Model: *model, SettingsPath: *settings, LogLevel: *level, Device: *device, Stderr: stderr, Demo: *demo})
}
