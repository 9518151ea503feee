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

// TestOpenAIAccess: OpenAI's routes sit behind the same checks, and their
// refusals are in OpenAI's error shape (a wrong token is invalid_api_key,
// an authentication_error); Verdict's routes keep theirs.
func TestOpenAIAccess(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	hub := NewHub(log)
	svc := app.New(app.Options{Emitter: hub, Logger: log, Capture: "synthetic",
		CheckMedia: func(context.Context, *capture.Devices) availability.Report { return availability.Report{} }})
	t.Cleanup(svc.Shutdown)
	srv := New(svc.Bound(), hub, fstest.MapFS{}, log, Access{Token: "s3cret"})
	srv.HandleAPI(api.New(svc, log))
	for _, c := range []struct {
		name, method, target, host, auth string
		status                           int
		typ, code                        string // typ "": Verdict's shape
	}{
		{"models", "GET", "/v1/models", "127.0.0.1", "Bearer s3cret", 200, "", ""},
		{"one model", "GET", "/v1/models/builtin", "127.0.0.1", "Bearer s3cret", 200, "", ""},
		{"no token", "GET", "/v1/models", "127.0.0.1", "", 401, "authentication_error", "invalid_api_key"},
		{"wrong key", "POST", "/v1/chat/completions", "127.0.0.1", "Bearer sk-xyz", 401, "authentication_error", "invalid_api_key"},
		{"rebound host", "POST", "/v1/completions", "evil.example", "Bearer s3cret", 421, "invalid_request_error", api.CodeMisdirected},
		{"no model", "POST", "/v1/chat/completions", "127.0.0.1", "Bearer s3cret", 503, "server_error", api.CodeNoModel},
		{"unknown model", "GET", "/v1/models/gpt-4o", "127.0.0.1", "Bearer s3cret", 404, "not_found_error", api.CodeUnknownModel},
		{"Verdict's route", "GET", "/v1/verdict/models", "127.0.0.1", "", 401, "", api.CodeUnauthorized},
	} {
		body := ""
		if strings.HasSuffix(c.target, "/completions") && !strings.Contains(c.target, "chat") {
			body = `{"model":"builtin","prompt":"hi"}`
		} else if strings.Contains(c.target, "chat") {
			body = `{"model":"builtin","messages":[{"role":"user","content":"hi"}]}`
		}
		req := httptest.NewRequest(c.method, c.target, strings.NewReader(body))
		req.Host = c.host
		req.Header.Set("Content-Type", "application/json")
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code != c.status {
			t.Errorf("%s: %d %s; want %d", c.name, w.Code, w.Body, c.status)
			continue
		}
		if c.code == "" {
			continue
		}
		var got map[string]map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v: %s", c.name, err, w.Body)
		}
		e := got["error"]
		if c.typ == "" {
			if len(e) != 2 || e["code"] != c.code || e["message"] == "" {
				t.Errorf("%s: %s; want Verdict's shape with %s", c.name, w.Body, c.code)
			}
			continue
		}
		if p, ok := e["param"]; len(e) != 4 || !ok || e["type"] != c.typ || e["code"] != c.code || e["message"] == "" || (p != nil && p != "model") {
			t.Errorf("%s: %s; want OpenAI's shape with %s, %s", c.name, w.Body, c.typ, c.code)
		}
	}
}
