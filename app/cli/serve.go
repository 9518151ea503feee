package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/sirupsen/logrus"

	"verdict/app"
	v1 "verdict/app/api"
	"verdict/app/mcpserver"
	"verdict/app/server"
	"verdict/engine/models"
	"verdict/frontend"
)

// DefaultAddr is where `verdict serve` listens unless told otherwise.
const DefaultAddr = "127.0.0.1:8177"

func serveCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", stderr)
	addr := fs.String("addr", DefaultAddr, "address to listen on (port 0 picks a free one); a non-loopback one needs --allow-remote")
	remote := fs.Bool("allow-remote", false, "allow an --addr that is not a loopback address: whoever reaches it and has the printed address (its token) can run the model and read files this user can read")
	model := fs.String("model", models.Builtin, "model to load at start: builtin, a Gemma 3n folder, or none")
	wf := addWeightFlags(fs)
	if f := fs.Lookup("device"); f != nil {
		f.Usage, f.DefValue = appDeviceHelp, ""
	}
	settings := fs.String("settings", app.DefaultSettingsPath(), "settings file (empty: keep settings in memory)")
	level := fs.String("log-level", "", "log level (error, warning, info, debug, trace); default: the saved setting")
	fs.Usage = func() { serveUsage(fs) }
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageErr("unexpected arguments %v", fs.Args())
	}
	mopt, err := wf.formatOptions()
	if err != nil {
		return err
	}
	var devices []string // --devices: a replica on each, in place of the device setting
	if isSet(fs, "devices") {
		if devices, err = wf.deviceList(stderr); err != nil {
			return err
		}
	}
	log := logrus.New()
	log.SetOutput(stderr)
	hub := server.NewHub(log)
	svc := app.New(app.Options{Emitter: hub, Logger: log, SettingsPath: *settings, Mode: "browser",
		Open: app.OpenWith(mopt), Devices: devices})
	if *level != "" {
		if err := svc.Logs.SetLevel(*level); err != nil {
			return usageErr("%v", err)
		}
	}
	if isSet(fs, "device") {
		if _, err := svc.Settings.SetDevice(*wf.device); err != nil {
			return usageErr("--device: %v", err)
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	tcp, _ := ln.Addr().(*net.TCPAddr)
	if tcp == nil || !tcp.IP.IsLoopback() {
		if !*remote {
			return usageErr("--addr %s is not a loopback address: pass --allow-remote to serve other machines too (whoever reaches it with the printed address can run the model and read files this user can read)", *addr)
		}
		log.Warnf("serving on %s, not only on a loopback address (--allow-remote)", ln.Addr())
	}
	if !frontend.Built() {
		log.Warn("the frontend is not built into this binary: the page will say how to build it")
	}
	// Cancelling base ends the event streams, which never go idle.
	base, endStreams := context.WithCancel(context.Background())
	defer endStreams()
	token := server.NewToken()
	api := server.New(svc.Bound(), hub, frontend.Assets(), log, server.Access{Token: token, Hosts: serveHosts(*addr, tcp)})
	api.HandleMedia(svc.Uploads(), svc.MediaFiles())
	api.HandleAPI(v1.New(svc, log))
	api.HandleMCP(mcpserver.Handler(mcpserver.FromApp(svc)))
	// Header, idle, body and write timeouts and a connection cap that keeps
	// room for requests with the token (server.DefaultLimits).
	srv := server.NewHTTPServer(api, server.DefaultLimits)
	srv.BaseContext = func(net.Listener) context.Context { return base }
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "Verdict is serving on %s\n", serveURL(*addr, ln.Addr(), token))
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

// serveUsage is serve's help: what it serves, the API for programs, then
// the flags.
func serveUsage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, `Usage: verdict serve [flags]

Serves the app's user interface to a browser, on a loopback address unless
--addr (with --allow-remote) names another, and prints the address to open;
it ends in #token=TOKEN, the per-launch access token.

It also serves a JSON API for scripts and other programs:
  POST /v1/verdict/score     score an input against a schema (verdict score's JSON)
  POST /v1/verdict/generate  generate text; server-sent events with "stream": true
  GET  /v1/verdict/models    the models the app knows
and OpenAI's routes, for OpenAI's clients (base URL http://ADDR/v1, the token
as the API key): POST /v1/chat/completions (generation, json_schema answered
by the scorer, tools chosen by the catalog decoder), POST /v1/completions,
GET /v1/models.
Send the token as "Authorization: Bearer TOKEN" and POST bodies as
application/json; see docs/api.md and docs/openapi.json.
At /mcp it serves the same model's tools (score, select_tools, generate) to
MCP clients over streamable HTTP, with the same token (see verdict mcp).

Flags:
`)
	fs.PrintDefaults()
}

// serveURL is the address to open: the host as --addr names it (a loopback
// one when it names none or all interfaces), the bound port, and the access
// token in the fragment, which the page keeps and browsers never send.
func serveURL(addr string, bound net.Addr, token string) string {
	host, _, _ := net.SplitHostPort(addr)
	_, port, _ := net.SplitHostPort(bound.String())
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/#token=" + token
}

// serveHosts are the host names accepted besides the loopback ones: the one
// --addr names, and when it names all interfaces, their addresses and this
// machine's name.
func serveHosts(addr string, bound *net.TCPAddr) []string {
	host, _, _ := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	if host != "" && (ip == nil || !ip.IsUnspecified()) {
		return []string{host}
	}
	if bound != nil && bound.IP.IsLoopback() {
		return nil
	}
	var hs []string
	if name, err := os.Hostname(); err == nil {
		hs = append(hs, name)
	}
	if as, err := net.InterfaceAddrs(); err == nil {
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok {
				hs = append(hs, n.IP.String())
			}
		}
	}
	return hs
}
