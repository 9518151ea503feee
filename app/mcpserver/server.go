// Package mcpserver is Verdict as a Model Context Protocol server: the
// scorer, the catalog decoder and generation as MCP tools, built on the
// official Go SDK (github.com/modelcontextprotocol/go-sdk).
//
//	score         a Verdict schema, a text and optional media → the scorer's
//	              result (verdict score's JSON)
//	select_tools  a catalog of {name, description}, a request and k → exactly
//	              k distinct names with each step's distribution
//	generate      a prompt (and system message) → the text and its timings
//
// `verdict mcp` serves them over stdio (Loading opens its model in the
// background); `verdict serve` serves them over streamable HTTP at /mcp
// (Handler, with FromApp), behind the server's host, origin and token
// checks. Every call takes the model for its duration from a Source; a bad
// argument or a failed call is a tool error (isError) that names the
// problem.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"verdict/app"
	"verdict/app/inputs"
	"verdict/engine/session"
	"verdict/media"
)

// Name is the server's name in the MCP handshake.
const Name = "verdict"

// Version is the server's version in the MCP handshake.
const Version = "0.1.0"

// MaxBody bounds a request: an HTTP body at /mcp, a line of stdio (images
// travel in it, base64-encoded). It is the /v1 API's bound.
const MaxBody = 32 << 20

// Model is the model a tool call runs on.
type Model struct {
	Session       *session.Session
	Name          string
	RandomWeights bool
	// Prepare runs the model's towers on a call's media (nil:
	// inputs.PrepareContext on Session).
	Prepare func(ctx context.Context, in *media.Input) (*inputs.Prepared, error)
}

// A Source lends the model to one tool call: the model, the context the
// call runs in (derived from ctx) and the function that gives the model
// back, or why there is no model to lend.
type Source func(ctx context.Context) (Model, context.Context, func(), error)

// New returns the MCP server of Verdict's tools on the models src lends.
func New(src Source) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: Name, Title: "Verdict", Version: Version}, &mcp.ServerOptions{
		Instructions: "Verdict runs a local Gemma 3n model as a calibrated decision engine. " +
			"score answers a schema of decisions about a text (and images or audio) with full probability distributions; " +
			"select_tools picks exactly k distinct entries of a catalog for a request; generate writes text.",
	})
	t := &tools{src: src}
	mcp.AddTool(s, scoreTool(), t.score)
	mcp.AddTool(s, selectTool(), t.selectTools)
	mcp.AddTool(s, generateTool(), t.generate)
	return s
}

// Handler serves the tools over streamable HTTP, stateless: every POST is
// one exchange (no session is kept between requests), bodies up to MaxBody.
// It checks no access itself: mount it behind the server's host, origin and
// token checks (server.Server.HandleMCP), which also make the SDK's own
// localhost protection redundant.
func Handler(src Source) http.Handler {
	s := New(src)
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{
		Stateless:                    true,
		MaxRequestBodyBytes:          MaxBody,
		DisableLocalhostProtection:   true,
		PropagateRequestCancellation: true,
	})
}

// Stdio is the transport of `verdict mcp`: newline-delimited JSON-RPC read
// from r and written to w, lines up to MaxBody and a little.
func Stdio(r io.Reader, w io.Writer) mcp.Transport {
	return &mcp.IOTransport{Reader: io.NopCloser(r), Writer: nopWriteCloser{w}, MaxLineLength: MaxBody + 1<<20}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// FromApp lends the model svc has loaded (the one the page and the /v1 API
// use): calls run beside theirs through the model's scheduler, and without a
// ready model a call fails with the reason (the last load's error).
func FromApp(svc *app.Services) Source {
	return func(ctx context.Context) (Model, context.Context, func(), error) {
		d, dctx, err := svc.Runs.Direct(ctx, "")
		if err != nil {
			if errors.Is(err, app.ErrNoModel) || errors.Is(err, app.ErrLoading) {
				if info := svc.Models.Info(); info.State == app.ModelError && info.Error != "" {
					err = fmt.Errorf("%w (the load of %s failed: %s)", err, info.Spec, info.Error)
				}
			}
			return Model{}, nil, nil, err
		}
		return Model{Session: d.Session, Name: d.Info.Name, RandomWeights: d.Info.RandomWeights, Prepare: d.Prepare}, dctx, d.Close, nil
	}
}

// Loading is a model opened in the background (verdict mcp): the server
// answers the handshake and tools/list at once, and tool calls wait for the
// load.
type Loading struct {
	cancel context.CancelFunc
	done   chan struct{}
	s      *session.Session
	err    error

	mu     sync.Mutex
	closed bool
	calls  sync.WaitGroup
}

// Load starts open in the background; Close stops it (its context is
// cancelled) or closes the session it opened.
func Load(open func(ctx context.Context) (*session.Session, error)) *Loading {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Loading{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		l.s, l.err = open(ctx)
		if l.s == nil && l.err == nil {
			l.err = errors.New("no model")
		}
	}()
	return l
}

// Source lends the loaded model, once it has loaded; a failed load is
// every call's error.
func (l *Loading) Source() Source {
	return func(ctx context.Context) (Model, context.Context, func(), error) {
		select {
		case <-l.done:
		case <-ctx.Done():
			return Model{}, nil, nil, ctx.Err()
		}
		if l.err != nil {
			return Model{}, nil, nil, fmt.Errorf("the model did not load: %w", l.err)
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return Model{}, nil, nil, errors.New("the server is shutting down")
		}
		l.calls.Add(1)
		l.mu.Unlock()
		info := l.s.Info()
		return Model{Session: l.s, Name: info.Name, RandomWeights: info.Builtin || info.Synthetic}, ctx, l.calls.Done, nil
	}
}

// Wait waits for the load and returns its error.
func (l *Loading) Wait(ctx context.Context) error {
	select {
	case <-l.done:
		return l.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the load, waits for the calls in progress and closes the
// model.
func (l *Loading) Close() error {
	l.cancel()
	<-l.done
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.calls.Wait()
	if l.s != nil {
		return l.s.Close()
	}
	return nil
}
