package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"

	"verdict/app"
	"verdict/app/server"
	"verdict/engine/models"
	"verdict/frontend"
)

// DefaultAddr is where `verdict serve` listens unless told otherwise.
const DefaultAddr = "127.0.0.1:8177"

func serveCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", stderr)
	addr := fs.String("addr", DefaultAddr, "address to listen on (port 0 picks a free one)")
	model := fs.String("model", models.Builtin, "model to load at start: builtin, a Gemma 3n folder, or none")
	wf := addWeightFlags(fs)
	settings := fs.String("settings", app.DefaultSettingsPath(), "settings file (empty: keep settings in memory)")
	level := fs.String("log-level", "", "log level (error, warning, info, debug, trace); default: the saved setting")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageErr("unexpected arguments %v", fs.Args())
	}
	mopt, err := wf.options()
	if err != nil {
		return err
	}
	log := logrus.New()
	log.SetOutput(stderr)
	hub := server.NewHub(log)
	svc := app.New(app.Options{Emitter: hub, Logger: log, SettingsPath: *settings, Mode: "browser",
		Open: app.OpenWith(mopt)})
	if *level != "" {
		if err := svc.Logs.SetLevel(*level); err != nil {
			return usageErr("%v", err)
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		log.Warnf("serving on %s, not on a loopback address: whoever reaches it can run the model and read files this user can read", ln.Addr())
	}
	if !frontend.Built() {
		log.Warn("the frontend is not built into this binary: the page will say how to build it")
	}
	// Cancelling base ends the event streams, which never go idle.
	base, endStreams := context.WithCancel(context.Background())
	defer endStreams()
	api := server.New(svc.Bound(), hub, frontend.Assets(), log)
	api.HandleMedia(svc.Uploads(), svc.MediaFiles())
	srv := &http.Server{
		Handler:           api,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "Verdict is serving on http://%s/\n", ln.Addr())
	if f, ok := stdout.(interface{ Sync() error }); ok {
		f.Sync()
	}
	if *model != "none" && *model != "" {
		if _, err := svc.Models.Open(*model); err != nil {
			log.WithError(err).Error("cannot load the model")
		}
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			svc.Shutdown()
			return err
		}
	}
	endStreams()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	svc.Shutdown()
	return nil
}
