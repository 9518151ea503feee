package server

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/sirupsen/logrus"

	"verdict/app"
)

func newTest(t *testing.T, assets fstest.MapFS) (*httptest.Server, *app.Services, *Hub) {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	hub := NewHub(log)
	svc := app.New(app.Options{Emitter: hub, Logger: log})
	t.Cleanup(svc.Shutdown)
	var fsys = assets
	if fsys == nil {
		fsys = fstest.MapFS{}
	}
	ts := httptest.NewServer(New(svc.Bound(), hub, fsys, log))
	t.Cleanup(ts.Close)
	return ts, svc, hub
}

func post(t *testing.T, url, body string, header map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func TestCalls(t *testing.T) {
	ts, _, _ := newTest(t, nil)
	for _, tc := range []struct {
		name, path, body string
		header           map[string]string
		code             int
		want             string
	}{
		{"no arguments", "/api/Models/Info", "[]", nil, 200, `"state":"none"`},
		{"empty body", "/api/Logs/Level", "", nil, 200, `"info"`},
		{"one argument", "/api/Scorer/Check", `[{"fields":[{"name":"a","question":"?","type":"bool"}]}]`, nil, 200, `"ok":true`},
		{"two arguments", "/api/Logs/Entries", `[0, 1]`, nil, 200, `[`},
		{"error result", "/api/Logs/SetLevel", `["loud"]`, nil, 422, `"error":"log level \"loud\"`},
		{"void result", "/api/Logs/SetLevel", `["debug"]`, nil, 200, `null`},
		{"run without model", "/api/Runs/Start", `[{"input":"hi","schema":{"fields":[{"name":"a","question":"?","type":"bool"}]}}]`, nil, 422, `no model is loaded`},
		{"no dialogs in the browser", "/api/System/ChooseModelFolder", `[]`, nil, 422, `only available in the desktop window`},
		{"unknown method", "/api/Models/Explode", "[]", nil, 404, `no method Models.Explode`},
		{"unknown service", "/api/Nope/Info", "[]", nil, 404, `no method`},
		{"wrong count", "/api/Logs/SetLevel", "[]", nil, 400, `takes 1 arguments, got 0`},
		{"wrong type", "/api/Logs/SetLevel", "[3]", nil, 400, `argument 1 of Logs.SetLevel`},
		{"not an array", "/api/Logs/SetLevel", `{"level":"x"}`, nil, 400, `JSON array`},
		{"form post", "/api/Logs/Level", "[]", map[string]string{"Content-Type": "text/plain"}, 415, `application/json`},
		{"other origin", "/api/Logs/Level", "[]", map[string]string{"Origin": "http://evil.example"}, 403, `cross-origin`},
		{"same origin", "/api/Logs/Level", "[]", map[string]string{"Origin": ts.URL}, 200, `"debug"`},
	} {
		code, body := post(t, ts.URL+tc.path, tc.body, tc.header)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s; want %d containing %s", tc.name, code, body, tc.code, tc.want)
		}
	}
	code, _ := post(t, ts.URL+"/api/Logs/Level", "["+strings.Repeat(" ", MaxBody)+"]", nil)
	if code != http.StatusRequestEntityTooLarge {
		t.Errorf("huge body: %d", code)
	}
	resp, err := http.Get(ts.URL + "/api/bindings")
	if err != nil {
		t.Fatal(err)
	}
	var b map[string][]string
	json.NewDecoder(resp.Body).Decode(&b)
	resp.Body.Close()
	for _, svc := range []string{"Models", "Scorer", "Generator", "Runs", "Settings", "Logs", "System"} {
		if len(b[svc]) == 0 {
			t.Errorf("bindings lack %s: %v", svc, b)
		}
	}
}

func TestEventStream(t *testing.T) {
	ts, svc, hub := newTest(t, nil)
	resp, err := http.Get(ts.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	for i := 0; i < 100 && hub.Subscribers() == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	// An event from a service reaches the stream.
	go svc.Logs.SetLevel("debug")
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("stream ended")
			}
			if !strings.HasPrefix(l, "data: ") {
				continue
			}
			var ev struct {
				Name string          `json:"name"`
				Data json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(l, "data: ")), &ev); err != nil {
				t.Fatalf("bad event %q: %v", l, err)
			}
			if ev.Name == app.EventLogEntries && strings.Contains(string(ev.Data), "log level changed") {
				return
			}
		case <-deadline:
			t.Fatal("no log:entries event on the stream")
		}
	}
}

func TestStatic(t *testing.T) {
	get := func(ts *httptest.Server, p string) (int, string) {
		resp, err := http.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Not built: a page that says how to build it.
	ts, _, _ := newTest(t, nil)
	if code, body := get(ts, "/"); code != 200 || !strings.Contains(body, "npm run build") {
		t.Errorf("placeholder: %d %q", code, body)
	}
	// Built: files, the app for page paths, 404 for missing assets.
	ts, _, _ = newTest(t, fstest.MapFS{
		"index.html":       {Data: []byte("<!doctype html><title>Verdict</title>")},
		"assets/app-1.js":  {Data: []byte("console.log(1)")},
		"assets/style.css": {Data: []byte("body{}")},
	})
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/", 200, "<title>Verdict"},
		{"/assets/app-1.js", 200, "console.log"},
		{"/history", 200, "<title>Verdict"},
		{"/assets/missing.js", 404, ""},
		{"/favicon.ico", 404, ""},
		{"/../../etc/passwd", 200, "<title>Verdict"},
	} {
		if code, body := get(ts, tc.path); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: %d %q", tc.path, code, body)
		}
	}
}
