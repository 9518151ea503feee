package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/sirupsen/logrus"

	"verdict/app"
	"verdict/app/api"
	"verdict/media/availability"
	"verdict/media/capture"
)

// TestAPIAccess: the /v1 API sits behind the server's checks: another host
// (DNS rebinding), another origin, another site's page and a missing or
// wrong token are refused, as JSON errors with their codes; the token may
// come as Authorization: Bearer.
func TestAPIAccess(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	hub := NewHub(log)
	svc := app.New(app.Options{Emitter: hub, Logger: log, Capture: "synthetic",
		CheckMedia: func(context.Context, *capture.Devices) availability.Report { return availability.Report{} }})
	t.Cleanup(svc.Shutdown)
	srv := New(svc.Bound(), hub, fstest.MapFS{}, log, Access{Token: "s3cret", Hosts: []string{"verdict.lan"}})
	srv.HandleAPI(api.New(svc, log))
	bearer := map[string]string{"Authorization": "Bearer s3cret"}
	with := func(m map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range m {
			out[a] = b
		}
		return out
	}
	for _, c := range []struct {
		name, method, target, host string
		header                     map[string]string
		status                     int
		code                       string // "" for a success
	}{
		{"bearer", "GET", "/v1/verdict/models", "127.0.0.1:8177", bearer, 200, ""},
		{"token header", "GET", "/v1/verdict/models", "localhost:8177", map[string]string{TokenHeader: "s3cret"}, 200, ""},
		{"named host", "GET", "/v1/verdict/models", "verdict.lan:8177", bearer, 200, ""},
		{"same origin", "GET", "/v1/verdict/models", "127.0.0.1:8177", with(bearer, "Origin", "http://127.0.0.1:8177"), 200, ""},
		{"rebound host", "GET", "/v1/verdict/models", "evil.example:8177", bearer, 421, api.CodeMisdirected},
		{"rebound host, no token", "POST", "/v1/generate", "evil.example", nil, 421, api.CodeMisdirected},
		{"other origin", "POST", "/v1/generate", "127.0.0.1:8177", with(bearer, "Origin", "http://evil.example"), 403, api.CodeForbidden},
		{"other port", "GET", "/v1/verdict/models", "127.0.0.1:8177", with(bearer, "Origin", "http://127.0.0.1:9999"), 403, api.CodeForbidden},
		{"null origin", "GET", "/v1/verdict/models", "127.0.0.1:8177", with(bearer, "Origin", "null"), 403, api.CodeForbidden},
		{"another site's page", "GET", "/v1/verdict/models", "127.0.0.1:8177", with(bearer, "Sec-Fetch-Site", "cross-site"), 403, api.CodeForbidden},
		{"no token", "GET", "/v1/verdict/models", "127.0.0.1:8177", nil, 401, api.CodeUnauthorized},
		{"wrong bearer", "GET", "/v1/verdict/models", "127.0.0.1:8177", map[string]string{"Authorization": "Bearer s3cre"}, 401, api.CodeUnauthorized},
		{"basic auth", "GET", "/v1/verdict/models", "127.0.0.1:8177", map[string]string{"Authorization": "Basic czNjcmV0"}, 401, api.CodeUnauthorized},
		{"path trick", "GET", "/x/../v1/verdict/models", "127.0.0.1:8177", nil, 401, api.CodeUnauthorized},
		{"escaped dot dot", "GET", "/v1/%2e%2e/x", "127.0.0.1:8177", nil, 401, api.CodeUnauthorized},
		{"escaped dot dot, post", "POST", "/v1/%2e%2e/generate", "127.0.0.1:8177", nil, 401, api.CodeUnauthorized},
		{"lower-case bearer", "GET", "/v1/verdict/models", "127.0.0.1:8177", map[string]string{"Authorization": "bearer s3cret"}, 200, ""},
		{"upper-case bearer", "GET", "/v1/verdict/models", "127.0.0.1:8177", map[string]string{"Authorization": "BEARER s3cret"}, 200, ""},
		{"token in the query", "GET", "/v1/verdict/models?token=s3cret", "127.0.0.1:8177", nil, 401, api.CodeUnauthorized},
		{"form post", "POST", "/v1/generate", "127.0.0.1:8177", with(bearer, "Content-Type", "application/x-www-form-urlencoded"), 415, api.CodeContentType},
		{"no model", "POST", "/v1/generate", "127.0.0.1:8177", bearer, 503, api.CodeNoModel},
	} {
		req := httptest.NewRequest(c.method, c.target, strings.NewReader(`{"prompt":"hi"}`))
		req.Host = c.host
		req.Header.Set("Content-Type", "application/json")
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if c.code == "" {
			if w.Code != c.status {
				t.Errorf("%s: %d %s", c.name, w.Code, w.Body)
			}
			continue
		}
		var e api.ErrorBody
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || w.Code != c.status || e.Error.Code != c.code || e.Error.Message == "" {
			t.Errorf("%s: %d %s; want %d %s", c.name, w.Code, w.Body, c.status, c.code)
		}
	}
}
