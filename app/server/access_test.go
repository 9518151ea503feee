package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/sirupsen/logrus"

	"verdict/app"
	"verdict/media/availability"
	"verdict/media/capture"
)

// TestAccess: a DNS-rebound host, another origin and a request without the
// token are refused; the page itself needs no token.
func TestAccess(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	hub := NewHub(log)
	svc := app.New(app.Options{Emitter: hub, Logger: log, Capture: "synthetic",
		CheckMedia: func(context.Context, *capture.Devices) availability.Report { return availability.Report{} }})
	t.Cleanup(svc.Shutdown)
	assets := fstest.MapFS{"index.html": {Data: []byte("<!doctype html><title>Verdict</title>")}}
	srv := New(svc.Bound(), hub, assets, log, Access{Token: "s3cret", Hosts: []string{"Verdict.LAN"}})
	srv.HandleMedia(svc.Uploads(), svc.MediaFiles())
	live := svc.Media.Upload("p.png", pngBytes(t, 8, 8))
	if live.Item == nil {
		t.Fatalf("upload: %s", live.Error)
	}
	view := live.Item.ModelView

	for _, c := range []struct {
		name, method, target, host string
		header                     map[string]string
		code                       int
		body                       string
	}{
		{"token header", "POST", "/api/Logs/Level", "127.0.0.1:8177", map[string]string{TokenHeader: "s3cret"}, 200, `"`},
		{"localhost", "POST", "/api/Logs/Level", "localhost:8177", map[string]string{TokenHeader: "s3cret"}, 200, `"`},
		{"ipv6 loopback", "POST", "/api/Logs/Level", "[::1]:8177", map[string]string{TokenHeader: "s3cret"}, 200, `"`},
		{"named host", "POST", "/api/Logs/Level", "verdict.lan:8177", map[string]string{TokenHeader: "s3cret"}, 200, `"`},
		{"same origin", "POST", "/api/Logs/Level", "127.0.0.1:8177", map[string]string{TokenHeader: "s3cret", "Origin": "http://127.0.0.1:8177"}, 200, `"`},
		{"rebound host", "POST", "/api/System/ReadFiles", "evil.example:8177", map[string]string{TokenHeader: "s3cret", "Origin": "http://evil.example:8177"}, 421, `host "evil.example:8177" is not served here`},
		{"rebound page", "GET", "/", "evil.example:8177", nil, 421, "not served here"},
		{"no token", "POST", "/api/System/ReadFiles", "127.0.0.1:8177", nil, 401, "missing or wrong access token"},
		{"wrong token", "POST", "/api/Logs/Level", "127.0.0.1:8177", map[string]string{TokenHeader: "s3cre"}, 401, "access token"},
		{"no token, bindings", "GET", "/api/bindings", "127.0.0.1:8177", nil, 401, "access token"},
		{"no token, path tricks", "GET", "/x/../api/bindings", "127.0.0.1:8177", nil, 401, "access token"},
		// The query carries the token only where a header cannot be sent.
		{"token query, bindings", "GET", "/api/bindings?token=s3cret", "127.0.0.1:8177", nil, 401, "access token"},
		{"token query, call", "POST", "/api/Logs/Level?token=s3cret", "127.0.0.1:8177", nil, 401, "access token"},
		{"lower-case bearer", "POST", "/api/Logs/Level", "127.0.0.1:8177", map[string]string{"Authorization": "bearer s3cret"}, 200, `"`},
		{"upper-case bearer", "POST", "/api/Logs/Level", "127.0.0.1:8177", map[string]string{"Authorization": "BEARER  s3cret"}, 200, `"`},
		{"empty bearer", "POST", "/api/Logs/Level", "127.0.0.1:8177", map[string]string{"Authorization": "Bearer "}, 401, "access token"},
		// The router sees %2e%2e as a segment, not as "..": these are routed
		// under /api/ and /media/, so they need the token.
		{"escaped dot dot, get", "GET", "/api/%2e%2e/x", "127.0.0.1:8177", nil, 401, "access token"},
		{"escaped dot dot, call", "POST", "/api/%2e%2e/x", "127.0.0.1:8177", nil, 401, "access token"},
		{"escaped dot dot, media", "GET", "/media/%2e%2e/x", "127.0.0.1:8177", nil, 401, "access token"},
		{"escaped dot dot, media query", "GET", "/media/%2E%2E/camera/live.jpg", "127.0.0.1:8177", nil, 401, "access token"},
		{"escaped name", "POST", "/%61pi/%2e%2e/Logs/Level", "127.0.0.1:8177", nil, 401, "access token"},
		{"media without token", "GET", view, "127.0.0.1:8177", nil, 401, "access token"},
		{"media with token", "GET", view + "?token=s3cret", "127.0.0.1:8177", nil, 200, "\x89PNG"},
		{"camera without token", "GET", "/media/camera/live.jpg?seq=1", "127.0.0.1:8177", nil, 401, "access token"},
		{"upload without token", "POST", "/api/upload", "127.0.0.1:8177", nil, 401, "access token"},
		{"page without token", "GET", "/", "127.0.0.1:8177", nil, 200, "<title>Verdict</title>"},
		{"other origin with token", "POST", "/api/Logs/Level", "127.0.0.1:8177", map[string]string{TokenHeader: "s3cret", "Origin": "http://127.0.0.1:9999"}, 403, "cross-origin"},
	} {
		req := httptest.NewRequest(c.method, c.target, strings.NewReader("[]"))
		req.Host = c.host
		req.Header.Set("Content-Type", "application/json")
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code != c.code || !strings.Contains(w.Body.String(), c.body) {
			t.Errorf("%s: %d %.120q, want %d %q", c.name, w.Code, w.Body.String(), c.code, c.body)
		}
		if c.code >= 400 && w.Header().Get("Connection") != "close" {
			t.Errorf("%s: refused without closing the connection", c.name)
		}
	}
}

func TestEventsNeedToken(t *testing.T) {
	ts, _, _ := newTest(t, nil)
	resp, err := http.Get(ts.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("events without token: %d", resp.StatusCode)
	}
	resp, err = http.Get(ts.URL + "/api/events?token=" + testToken)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("events with token: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

func TestNewToken(t *testing.T) {
	a, b := NewToken(), NewToken()
	if len(a) != 32 || a == b {
		t.Errorf("tokens %q %q", a, b)
	}
}
