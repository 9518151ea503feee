package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// Limits bound what a connection may hold of the server: how long it may
// take to send a request's header, stay idle between requests, send a body
// or take a response, and how many connections are open at once.
type Limits struct {
	// MaxConns is the most connections open at once. A connection over it
	// closes one that is not serving an authorized request (one that never
	// sent the token first, then the longest idle); where every one is, the
	// new connection is closed.
	MaxConns int
	// HeaderTimeout is the time a request's header may take to arrive.
	HeaderTimeout time.Duration
	// IdleTimeout is the time a keep-alive connection may wait for its next
	// request.
	IdleTimeout time.Duration
	// BodyGrace and MinBodyRate bound a body's reads: the first BodyGrace
	// after the handler starts reading is free, and from then on the body
	// must keep up MinBodyRate bytes a second on average, so a big upload
	// at a steady pace runs as long as it takes and a trickle is cut.
	BodyGrace   time.Duration
	MinBodyRate int64
	// WriteIdle is the time one write of a response may wait for the client
	// to take it. A long response (an event stream, a long generation) is
	// never cut for its length.
	WriteIdle time.Duration
}

// DefaultLimits are the limits of `verdict serve`.
var DefaultLimits = Limits{
	MaxConns:      256,
	HeaderTimeout: 10 * time.Second,
	IdleTimeout:   90 * time.Second,
	BodyGrace:     30 * time.Second,
	MinBodyRate:   16 << 10,
	WriteIdle:     60 * time.Second,
}

// withDefaults fills the zero fields of l from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxConns <= 0 {
		l.MaxConns = d.MaxConns
	}
	if l.HeaderTimeout <= 0 {
		l.HeaderTimeout = d.HeaderTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.BodyGrace <= 0 {
		l.BodyGrace = d.BodyGrace
	}
	if l.MinBodyRate <= 0 {
		l.MinBodyRate = d.MinBodyRate
	}
	if l.WriteIdle <= 0 {
		l.WriteIdle = d.WriteIdle
	}
	return l
}

// HTTPServer is an http.Server with Limits: header and idle timeouts, a
// body deadline that moves with the bytes read, a deadline for each write
// (none for a whole response), and the connection cap, which Serve enforces
// on its listener.
type HTTPServer struct {
	*http.Server
	conns *tracker
}

// NewHTTPServer serves h within lim (zero fields: DefaultLimits'). Mark the
// requests h authorizes with serving (Server does), so that the cap keeps
// their connections. Set BaseContext and the other fields before Serve.
func NewHTTPServer(h http.Handler, lim Limits) *HTTPServer {
	lim = lim.withDefaults()
	t := &tracker{max: lim.MaxConns, writeIdle: lim.WriteIdle, conns: map[*trackedConn]struct{}{}}
	return &HTTPServer{conns: t, Server: &http.Server{
		Handler:           bodyDeadlines(h, lim),
		ReadHeaderTimeout: lim.HeaderTimeout,
		IdleTimeout:       lim.IdleTimeout,
		ConnState:         t.state,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}}
}

// Serve accepts connections on ln, up to the cap, and serves them.
func (s *HTTPServer) Serve(ln net.Listener) error {
	return s.Server.Serve(&limitListener{Listener: ln, t: s.conns})
}

// Conns is the number of connections open.
func (s *HTTPServer) Conns() int {
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	return s.conns.open()
}

// connKey is the request context's key of its *trackedConn.
type connKey struct{}

// serving marks r's connection as serving an authorized request until the
// returned function is called; the cap does not close it meanwhile.
func serving(r *http.Request) func() {
	c, _ := r.Context().Value(connKey{}).(*trackedConn)
	if c == nil {
		return func() {}
	}
	c.t.mu.Lock()
	c.authorized = true
	c.busy++
	c.t.mu.Unlock()
	return func() {
		c.t.mu.Lock()
		c.busy--
		c.t.seq++
		c.last = c.t.seq
		c.t.mu.Unlock()
	}
}

// tracker counts a server's connections and picks which to close at the
// cap.
type tracker struct {
	max       int
	writeIdle time.Duration
	mu        sync.Mutex
	conns     map[*trackedConn]struct{}
	seq       uint64 // orders the connections' last activity
}

// trackedConn is an accepted connection and what the cap knows of it; its
// fields are guarded by its tracker's mu.
type trackedConn struct {
	net.Conn
	t          *tracker
	authorized bool   // it has sent the token
	busy       int    // authorized requests it is serving
	last       uint64 // its last activity (tracker.seq)
	closing    bool   // closed by the cap
}

// Write gives each write WriteIdle to complete: a client that stops taking
// a response loses its connection, while a long one that keeps taking it
// (an event stream, a long generation) is never cut.
func (c *trackedConn) Write(p []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.t.writeIdle))
	return c.Conn.Write(p)
}

// open counts the connections not yet closed by the cap (mu held).
func (t *tracker) open() int {
	n := 0
	for c := range t.conns {
		if !c.closing {
			n++
		}
	}
	return n
}

// admit registers c, first closing a connection that is not serving an
// authorized request when the cap is reached; false when every one is.
func (t *tracker) admit(c net.Conn) (*trackedConn, bool) {
	t.mu.Lock()
	var victim *trackedConn
	if t.open() >= t.max {
		for o := range t.conns {
			if o.closing || o.busy > 0 {
				continue
			}
			if victim == nil || (!o.authorized && victim.authorized) ||
				(o.authorized == victim.authorized && o.last < victim.last) {
				victim = o
			}
		}
		if victim == nil {
			t.mu.Unlock()
			return nil, false
		}
		victim.closing = true
	}
	t.seq++
	tc := &trackedConn{Conn: c, t: t, last: t.seq}
	t.conns[tc] = struct{}{}
	t.mu.Unlock()
	if victim != nil {
		victim.Conn.Close()
	}
	return tc, true
}

// state follows http.Server's view of a connection.
func (t *tracker) state(c net.Conn, st http.ConnState) {
	tc, ok := c.(*trackedConn)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch st {
	case http.StateIdle:
		t.seq++
		tc.last = t.seq
	case http.StateClosed, http.StateHijacked:
		delete(t.conns, tc)
	}
}

// limitListener admits the connections its tracker allows.
type limitListener struct {
	net.Listener
	t *tracker
}

// Accept returns the next connection the cap admits; one that would exceed
// it while every connection serves an authorized request is closed at once.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc, ok := l.t.admit(c); ok {
			return tc, nil
		}
		c.Close()
	}
}

// bodyDeadlines gives each request's body a minimum rate, through its
// connection's read deadline.
func bodyDeadlines(h http.Handler, lim Limits) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &rateBody{ReadCloser: r.Body, rc: http.NewResponseController(w), grace: lim.BodyGrace, rate: lim.MinBodyRate}
		}
		h.ServeHTTP(w, r)
	})
}

// SlowBodyError is a request body that arrived slower than the minimum rate.
type SlowBodyError struct {
	Read    int64 // bytes read before the deadline
	MinRate int64 // bytes a second
	Grace   time.Duration
}

func (e *SlowBodyError) Error() string {
	return fmt.Sprintf("the request body stalled after %d bytes: it must arrive at %d KiB/s or more after its first %v", e.Read, e.MinRate>>10, e.Grace)
}

// rateBody moves the connection's read deadline as a body is read: BodyGrace
// from the first read plus the time the bytes read so far take at the
// minimum rate. At the end of the body the deadline is cleared, so a long
// handler is not cut while it works on what it read.
type rateBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	grace time.Duration
	rate  int64
	start time.Time
	n     int64
	ended bool
}

func (b *rateBody) Read(p []byte) (int, error) {
	if b.ended {
		return b.ReadCloser.Read(p)
	}
	if b.start.IsZero() {
		b.start = time.Now()
		b.rc.SetReadDeadline(b.start.Add(b.grace))
	}
	k, err := b.ReadCloser.Read(p)
	b.n += int64(k)
	switch {
	case err == nil:
		b.rc.SetReadDeadline(b.start.Add(b.grace + time.Duration(float64(b.n)/float64(b.rate)*float64(time.Second))))
	case err == io.EOF:
		b.ended = true
		b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The deadline stays: the rest of the body is not waited for.
		b.ended = true
		err = &SlowBodyError{Read: b.n, MinRate: b.rate, Grace: b.grace}
	}
	return k, err
}
