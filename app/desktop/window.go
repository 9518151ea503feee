//go:build production || dev || bindings

package desktop

import (
	"context"
	_ "embed"
	"os"
	"sync"

	"github.com/sirupsen/logrus"
	"github.com/wailsapp/wails/v2"
	"github.com/wailsapp/wails/v2/pkg/logger"
	"github.com/wailsapp/wails/v2/pkg/options"
	"github.com/wailsapp/wails/v2/pkg/options/assetserver"
	"github.com/wailsapp/wails/v2/pkg/options/linux"
	"github.com/wailsapp/wails/v2/pkg/runtime"

	"verdict/app"
	"verdict/frontend"
)

// HasWindow reports whether this build includes the window.
const HasWindow = true

//go:embed appicon.png
var icon []byte

// wailsEmitter sends events through Wails' runtime. Its context must be the
// one Wails hands to OnStartup: runtime calls with any other context end the
// process.
type wailsEmitter struct{ ctx context.Context }

func (w wailsEmitter) Emit(event string, data any) { runtime.EventsEmit(w.ctx, event, data) }

// dialogs are Wails' native dialogs; ctx is set at start-up.
type dialogs struct {
	mu  sync.Mutex
	ctx context.Context
}

func (d *dialogs) context() context.Context {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ctx
}

func (d *dialogs) ChooseDirectory(title string) (string, error) {
	ctx := d.context()
	if ctx == nil {
		return "", app.ErrNoDialogs
	}
	return runtime.OpenDirectoryDialog(ctx, runtime.OpenDialogOptions{Title: title})
}

func (d *dialogs) ChooseFiles(title string) ([]string, error) {
	ctx := d.context()
	if ctx == nil {
		return nil, app.ErrNoDialogs
	}
	return runtime.OpenMultipleFilesDialog(ctx, runtime.OpenDialogOptions{Title: title})
}

func (d *dialogs) SaveFile(title, name string) (string, error) {
	ctx := d.context()
	if ctx == nil {
		return "", app.ErrNoDialogs
	}
	return runtime.SaveFileDialog(ctx, runtime.SaveDialogOptions{Title: title, DefaultFilename: name})
}

// wailsLogger sends Wails' own log lines to logrus.
type wailsLogger struct{ l *logrus.Logger }

func (w wailsLogger) Print(m string)   { w.l.Info(m) }
func (w wailsLogger) Trace(m string)   { w.l.Trace(m) }
func (w wailsLogger) Debug(m string)   { w.l.Debug(m) }
func (w wailsLogger) Info(m string)    { w.l.Debug(m) } // Wails is chatty at info
func (w wailsLogger) Warning(m string) { w.l.Warn(m) }
func (w wailsLogger) Error(m string)   { w.l.Error(m) }
func (w wailsLogger) Fatal(m string)   { w.l.Fatal(m) }

// Run opens the window and returns when it closes (or ctx ends).
func Run(ctx context.Context, o Options) error {
	log := logrus.New()
	if o.Stderr != nil {
		log.SetOutput(o.Stderr)
	} else {
		log.SetOutput(os.Stderr)
	}
	var sw app.SwitchEmitter
	dlg := &dialogs{}
	var svc *app.Services
	var demoOnce sync.Once
	svc = app.New(app.Options{Emitter: &sw, Logger: log, SettingsPath: o.SettingsPath, Dialogs: dlg, Mode: "desktop",
		OnFrontendReady: func() {
			if o.Demo {
				demoOnce.Do(func() { demo(svc) })
			}
		}})
	if o.LogLevel != "" {
		if err := svc.Logs.SetLevel(o.LogLevel); err != nil {
			return err
		}
	}
	if o.Device != "" {
		if _, err := svc.Settings.SetDevice(o.Device); err != nil {
			return err
		}
	}
	var readyOnce sync.Once
	return wails.Run(&options.App{
		Title:            "Verdict",
		Width:            1440,
		Height:           900,
		MinWidth:         980,
		MinHeight:        640,
		BackgroundColour: &options.RGBA{R: 245, G: 246, B: 248, A: 255},
		// Media previews (/media/...) are not assets: the handler serves them.
		AssetServer: &assetserver.Options{Assets: frontend.Assets(), Handler: svc.MediaFiles()},
		OnStartup: func(wctx context.Context) {
			dlg.mu.Lock()
			dlg.ctx = wctx
			dlg.mu.Unlock()
			sw.Set(wailsEmitter{wctx})
			runtime.OnFileDrop(wctx, func(x, y int, paths []string) {
				// Decoding media (a video runs ffmpeg) must not hold up the window.
				go func() { sw.Emit(app.EventFilesDrop, svc.System.ReadFiles(paths)) }()
			})
			go func() { // Ctrl-C in the terminal closes the window
				<-ctx.Done()
				runtime.Quit(wctx)
			}()
			if o.Model != "" && o.Model != "none" {
				if _, err := svc.Models.Open(o.Model); err != nil {
					log.WithError(err).Error("cannot load the model")
				}
			}
		},
		OnDomReady: func(context.Context) {
			// Wails on Linux calls this again after every file drop.
			readyOnce.Do(func() { log.Info("window ready") })
		},
		OnShutdown: func(context.Context) {
			sw.Set(nil)
			svc.Shutdown()
		},
		Bind: svc.Bound(),
		DragAndDrop: &options.DragAndDrop{
			EnableFileDrop:     true,
			DisableWebViewDrop: true,
			CSSDropProperty:    "--wails-drop-target",
			CSSDropValue:       "drop",
		},
		Logger:   wailsLogger{log},
		LogLevel: logger.WARNING,
		Linux: &linux.Options{
			Icon:             icon,
			ProgramName:      "verdict",
			WebviewGpuPolicy: linux.WebviewGpuPolicyOnDemand,
		},
	})
}
