package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/sirupsen/logrus"

	"verdict/app/api"
)

// TestMCPAccess: /mcp sits behind the checks of /v1: another host (DNS
// rebinding), another origin, another site's page, a missing or wrong
// token and a token in the query are refused as JSON errors before the MCP
// handler sees the request; other paths under /mcp are not served.
func TestMCPAccess(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	srv := New(nil, NewHub(log), fstest.MapFS{}, log, Access{Token: "s3cret"})
	reached := 0
	srv.HandleMCP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		w.WriteHeader(http.StatusAccepted)
	}))
	bearer := "Bearer s3cret"
	for _, c := range []struct {
		name, method, target, host, auth string
		header                           map[string]string
		status                           int
		code                             string // "" when the handler answers
	}{
		{"bearer", "POST", "/mcp", "127.0.0.1:8177", bearer, nil, 202, ""},
		{"escaped path", "POST", "/%6dcp", "localhost:8177", bearer, nil, 202, ""},
		{"rebound host", "POST", "/mcp", "evil.example:8177", bearer, nil, 421, api.CodeMisdirected},
		{"other origin", "POST", "/mcp", "127.0.0.1:8177", bearer, map[string]string{"Origin": "http://evil.example"}, 403, api.CodeForbidden},
		{"null origin", "POST", "/mcp", "127.0.0.1:8177", bearer, map[string]string{"Origin": "null"}, 403, api.CodeForbidden},
		{"another site's page", "POST", "/mcp", "127.0.0.1:8177", bearer, map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, api.CodeForbidden},
		{"a sibling site's page", "POST", "/mcp", "127.0.0.1:8177", bearer, map[string]string{"Sec-Fetch-Site": "same-site"}, 403, api.CodeForbidden},
		{"no token", "POST", "/mcp", "127.0.0.1:8177", "", nil, 401, api.CodeUnauthorized},
		{"wrong token", "POST", "/mcp", "127.0.0.1:8177", "Bearer s3cre", nil, 401, api.CodeUnauthorized},
		{"token in the query", "POST", "/mcp?token=s3cret", "127.0.0.1:8177", "", nil, 401, api.CodeUnauthorized},
		{"text/plain, no token", "POST", "/mcp", "127.0.0.1:8177", "", map[string]string{"Content-Type": "text/plain"}, 401, api.CodeUnauthorized},
		{"below /mcp", "POST", "/mcp/x", "127.0.0.1:8177", bearer, nil, 404, api.CodeNotFound},
		{"dot dot out of /mcp, no token", "POST", "/mcp/../api/bindings", "127.0.0.1:8177", "", nil, 401, ""},
	} {
		reached = 0
		req := httptest.NewRequest(c.method, c.target, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Host = c.host
		req.Header.Set("Content-Type", "application/json")
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, w.Code, w.Body, c.status)
			continue
		}
		if c.status == 202 {
			if reached != 1 {
				t.Errorf("%s: the MCP handler was not reached", c.name)
			}
			continue
		}
		if reached != 0 {
			t.Errorf("%s: refused with %d, yet the MCP handler saw it", c.name, w.Code)
		}
		if c.code == "" {
			continue
		}
		var e api.ErrorBody
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Code != c.code || e.Error.Message == "" {
			t.Errorf("%s: %s, want the JSON error %s", c.name, w.Body, c.code)
		}
	}
}
