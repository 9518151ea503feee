package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/sirupsen/logrus"

	"verdict/app"
	"verdict/media/availability"
	"verdict/media/capture"
)

// startLimited serves the app's Server within lim on a loopback port, as
// `verdict serve` does; extra, when set, serves the paths under /test/
// instead (behind the same HTTPServer).
func startLimited(t *testing.T, lim Limits, extra http.Handler) (addr string, hs *HTTPServer, hub *Hub) {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	hub = NewHub(log)
	svc := app.New(app.Options{Emitter: hub, Logger: log, Capture: "synthetic",
		CheckMedia: func(context.Context, *capture.Devices) availability.Report { return availability.Report{} }})
	t.Cleanup(svc.Shutdown)
	srv := New(svc.Bound(), hub, fstest.MapFS{"index.html": {Data: []byte("<!doctype html><title>Verdict</title>")}}, log, Access{Token: testToken})
	srv.HandleMedia(svc.Uploads(), svc.MediaFiles())
	var h http.Handler = srv
	if extra != nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/test/") {
				extra.ServeHTTP(w, r)
				return
			}
			srv.ServeHTTP(w, r)
		})
	}
	hs = NewHTTPServer(h, lim)
	base, cancel := context.WithCancel(context.Background())
	hs.BaseContext = func(net.Listener) context.Context { return base }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(ln)
	t.Cleanup(func() { cancel(); hs.Close() })
	return ln.Addr().String(), hs, hub
}

// dial opens a connection and writes what it is given.
func dial(t *testing.T, addr, send string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if send != "" {
		if _, err := io.WriteString(c, send); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// closedWithin reports whether the server closes c within d (what it sends
// first is read and dropped).
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// authorized sends an authorized call on a fresh connection.
func authorizedCall(t *testing.T, addr string) (int, error) {
	t.Helper()
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	req, _ := http.NewRequest("POST", "http://"+addr+"/api/Logs/Level", strings.NewReader("[]"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestHeaderAndIdleTimeouts: a connection that sends nothing, one that
// trickles its header, and a keep-alive connection left idle are closed by
// the server.
func TestHeaderAndIdleTimeouts(t *testing.T) {
	addr, _, _ := startLimited(t, Limits{HeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}, nil)
	silent := dial(t, addr, "")
	trickle := dial(t, addr, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
	go func() {
		for range 40 {
			time.Sleep(100 * time.Millisecond)
			if _, err := io.WriteString(trickle, "X-Slow: 1\r\n"); err != nil {
				return
			}
		}
	}()
	idle := dial(t, addr, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("the page: %v, %v (close %v)", resp, err, resp != nil && resp.Close)
	}
	for name, c := range map[string]net.Conn{"silent": silent, "trickling header": trickle, "idle keep-alive": idle} {
		if !closedWithin(c, 3*time.Second) {
			t.Errorf("%s connection still open after 3 s", name)
		}
	}
}

// TestUnauthorizedBodyNotRead: a request without the token is answered 401
// from its header and its connection closed, without waiting for the body
// it announces.
func TestUnauthorizedBodyNotRead(t *testing.T) {
	addr, _, _ := startLimited(t, Limits{}, nil)
	for _, target := range []string{"/api/upload", "/api/Logs/Level", "/v1/generate", "/api/%2e%2e/x"} {
		c := dial(t, addr, "POST "+target+" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{")
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
			t.Errorf("%s: %d, close %v; want 401 and the connection closed", target, resp.StatusCode, resp.Close)
		}
		io.Copy(io.Discard, resp.Body)
		if !closedWithin(c, 3*time.Second) {
			t.Errorf("%s: the connection waits for the body", target)
		}
	}
}

// TestConnCap: at the cap, connections that never sent the token are closed
// to make room, so an authorized request still gets through while the
// authorized event streams go on; when every connection serves an
// authorized request, a new one is closed at once.
func TestConnCap(t *testing.T) {
	const max = 8
	addr, hs, hub := startLimited(t, Limits{MaxConns: max}, nil)
	type stream struct {
		c  net.Conn
		br *bufio.Reader
	}
	streams := make([]stream, max/2)
	for i := range streams {
		c := dial(t, addr, "GET /api/events?token="+testToken+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream %d: %v %v", i, resp, err)
		}
		streams[i] = stream{c, bufio.NewReader(resp.Body)}
	}
	var held []net.Conn
	for range 3 * max {
		held = append(held, dial(t, addr, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")) // a header never finished
		if n := hs.Conns(); n > max {
			t.Fatalf("%d connections open, over the cap of %d", n, max)
		}
	}
	for i := range 3 {
		if code, err := authorizedCall(t, addr); err != nil || code != 200 {
			t.Fatalf("authorized request %d at the cap: %d, %v", i, code, err)
		}
	}
	closed := 0
	for _, c := range held {
		if closedWithin(c, 50*time.Millisecond) {
			closed++
		}
	}
	if closed < len(held)-max/2 {
		t.Errorf("%d of %d unauthorized connections closed, want at least %d", closed, len(held), len(held)-max/2)
	}
	hub.Emit("ping", 1)
	for i, st := range streams {
		st.c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if !readEvent(st.br, "ping") {
			t.Errorf("stream %d lost", i)
		}
	}
	// Every connection serving an authorized stream: a new one is closed.
	for range max - len(streams) {
		c := dial(t, addr, "GET /api/events?token="+testToken+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream: %v %v", resp, err)
		}
	}
	c := dial(t, addr, "")
	if !closedWithin(c, 3*time.Second) {
		t.Error("a connection over a cap of authorized streams stays open")
	}
}

// readEvent reads the event stream until a message with name.
func readEvent(br *bufio.Reader, name string) bool {
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return false
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"name":"`+name+`"`) {
			return true
		}
	}
}

// TestBodyRate: a body trickled slower than the minimum rate is cut with an
// error that says so; a big body at a steady pace above it goes through
// however long it takes, and a handler that works past the body's
// deadline after reading it is not cut; neither is an event stream that
// stays quiet longer than the write timeout.
func TestBodyRate(t *testing.T) {
	lim := Limits{BodyGrace: 300 * time.Millisecond, MinBodyRate: 64 << 10, WriteIdle: 300 * time.Millisecond}
	slowHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case <-time.After(4 * lim.BodyGrace):
			fmt.Fprintf(w, "read %d", n)
		case <-r.Context().Done():
			// The client sees nothing: the connection is gone.
		}
	})
	addr, _, hub := startLimited(t, lim, slowHandler)

	t.Run("trickle", func(t *testing.T) {
		c := dial(t, addr, "POST /api/Logs/Level HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+
			TokenHeader+": "+testToken+"\r\nContent-Length: 100000\r\n\r\n[")
		go func() {
			for range 100 {
				time.Sleep(50 * time.Millisecond)
				if _, err := io.WriteString(c, " "); err != nil {
					return
				}
			}
		}()
		c.SetReadDeadline(time.Now().Add(4 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to a trickled body: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "stalled") {
			t.Errorf("trickled body: %d %s", resp.StatusCode, b)
		}
		if !closedWithin(c, 3*time.Second) {
			t.Error("the connection of a trickled body stays open")
		}
	})

	t.Run("steady upload", func(t *testing.T) {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		fw, _ := mw.CreateFormFile("file", "notes.txt")
		fw.Write(bytes.Repeat([]byte("not media "), 60000)) // 600 kB
		mw.Close()
		// About 200 kB/s, three times the minimum: some 3 s, ten times the
		// grace.
		pr, pw := io.Pipe()
		go func() {
			b := body.Bytes()
			for len(b) > 0 {
				k := min(len(b), 20<<10)
				if _, err := pw.Write(b[:k]); err != nil {
					return
				}
				b = b[k:]
				time.Sleep(100 * time.Millisecond)
			}
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", "http://"+addr+"/api/upload", pr)
		req.ContentLength = int64(body.Len())
		req.Header.Set("Content-Type", mw.FormDataContentType())
		req.Header.Set(TokenHeader, testToken)
		start := time.Now()
		resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"name":"notes.txt"`) {
			t.Errorf("steady upload: %d %.200s", resp.StatusCode, b)
		}
		if el := time.Since(start); el < 4*lim.BodyGrace {
			t.Errorf("the upload took %v, not long enough to test the deadline's moves", el)
		}
	})

	t.Run("long handler", func(t *testing.T) {
		resp, err := http.Post("http://"+addr+"/test/slow", "text/plain", strings.NewReader("body"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "read 4" {
			t.Errorf("long handler: %d %q", resp.StatusCode, b)
		}
	})

	t.Run("quiet stream", func(t *testing.T) {
		c := dial(t, addr, "GET /api/events?token="+testToken+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream: %v %v", resp, err)
		}
		time.Sleep(4 * lim.WriteIdle)
		hub.Emit("late", 1)
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if !readEvent(bufio.NewReader(resp.Body), "late") {
			t.Error("a quiet event stream was cut")
		}
	})
}
