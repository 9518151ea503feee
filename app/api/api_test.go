package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"verdict/app"
	"verdict/engine/models"
	"verdict/engine/scorer"
	"verdict/engine/session"
	"verdict/media/availability"
	"verdict/media/capture"
)

// newAPI serves the API of fresh services, with the built-in model loaded
// when load is set; the hook hears the log.
func newAPI(t *testing.T, load bool) (*httptest.Server, *app.Services, *logtest.Hook) {
	t.Helper()
	if load {
		needTokenizer(t)
	}
	log, hook := logtest.NewNullLogger()
	svc := app.New(app.Options{Emitter: app.EmitterFunc(func(string, any) {}), Logger: log, Capture: "synthetic",
		CheckMedia: func(context.Context, *capture.Devices) availability.Report { return availability.Report{} }})
	t.Cleanup(svc.Shutdown)
	if err := svc.Logs.SetLevel("debug"); err != nil { // the hook hears the requests start
		t.Fatal(err)
	}
	if load {
		if _, err := svc.Models.Open(models.Builtin); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for svc.Models.Info().State == app.ModelLoading && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if info := svc.Models.Info(); info.State != app.ModelReady {
			t.Fatalf("model %s: %s", info.State, info.Error)
		}
	}
	ts := httptest.NewServer(New(svc, log))
	t.Cleanup(ts.Close)
	return ts, svc, hook
}

// needTokenizer skips a test that runs the model when no tokenizer.json is
// found, unless VERDICT_REQUIRE_TOKENIZER=1 makes that a failure.
func needTokenizer(t *testing.T) {
	t.Helper()
	if _, err := models.LoadTokenizer(""); err != nil {
		if os.Getenv("VERDICT_REQUIRE_TOKENIZER") == "1" {
			t.Fatal(err)
		}
		t.Skipf("%v", err)
	}
}

// call sends body (JSON unless header says otherwise) and returns the
// status, the response and its body.
func call(t *testing.T, method, url, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// errorOf decodes an error body.
func errorOf(t *testing.T, b []byte) ErrorInfo {
	t.Helper()
	var e ErrorBody
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("error body %q: %v", b, err)
	}
	return e.Error
}

const boolSchema = `{"fields":[{"name":"a","question":"Is it?","type":"bool"}]}`

// TestErrors: every refusal has its status, its code and a message naming
// the problem (the field, the limit, the route).
func TestErrors(t *testing.T) {
	ts, svc, _ := newAPI(t, true)
	bare, _, _ := newAPI(t, false)
	score := func(fields string) string {
		return `{"schema":` + boolSchema + `,"input":{"text":"hello"}` + fields + `}`
	}
	for _, c := range []struct {
		name, method, path, body string
		header                   map[string]string
		status                   int
		code, msg                string
		server                   string // "bare": no model loaded
	}{
		{"unknown field", "POST", "/v1/score", score(`,"tempreature":1`), nil, 400, CodeBadRequest, `unknown field "tempreature"`, ""},
		{"unknown nested field", "POST", "/v1/score", `{"schema":` + boolSchema + `,"input":{"txt":"hi"}}`, nil, 400, CodeBadRequest, `unknown field "txt"`, ""},
		{"wrong type", "POST", "/v1/generate", `{"prompt":"hi","max_tokens":"ten"}`, nil, 400, CodeBadRequest, `field "max_tokens"`, ""},
		{"max_tokens over", "POST", "/v1/generate", `{"prompt":"hi","max_tokens":5000}`, nil, 400, CodeBadRequest, `field "max_tokens": 5000 is outside 1..4096`, ""},
		{"max_tokens zero", "POST", "/v1/generate", `{"prompt":"hi","max_tokens":0}`, nil, 400, CodeBadRequest, `field "max_tokens"`, ""},
		{"temperature over", "POST", "/v1/generate", `{"prompt":"hi","temperature":9}`, nil, 400, CodeBadRequest, `field "temperature"`, ""},
		{"top_p over", "POST", "/v1/generate", `{"prompt":"hi","top_p":1.5}`, nil, 400, CodeBadRequest, `field "top_p"`, ""},
		{"negative seed", "POST", "/v1/generate", `{"prompt":"hi","seed":-1}`, nil, 400, CodeBadRequest, `field "seed"`, ""},
		{"no prompt", "POST", "/v1/generate", `{"max_tokens":3}`, nil, 400, CodeBadRequest, `field "prompt" is required`, ""},
		{"prompt and messages", "POST", "/v1/generate", `{"prompt":"a","messages":[{"role":"user","content":"b"}]}`, nil, 400, CodeBadRequest, `not both`, ""},
		{"two turns", "POST", "/v1/generate", `{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`, nil, 400, CodeBadRequest, `field "messages"`, ""},
		{"no schema", "POST", "/v1/score", `{"input":{"text":"hi"}}`, nil, 400, CodeBadRequest, `field "schema" is required`, ""},
		{"bad schema", "POST", "/v1/score", `{"schema":{"fields":[]},"input":{"text":"hi"}}`, nil, 400, CodeBadSchema, `field "schema"`, ""},
		{"empty input", "POST", "/v1/score", `{"schema":` + boolSchema + `,"input":{"text":"  "}}`, nil, 400, CodeBadRequest, `the input is empty`, ""},
		{"text over", "POST", "/v1/score", `{"schema":` + boolSchema + `,"input":{"text":"` + strings.Repeat("a", app.MaxInputBytes+1) + `"}}`, nil, 400, CodeLimit, `input.text`, ""},
		{"tokens over", "POST", "/v1/generate", `{"prompt":"` + strings.Repeat("word ", scorer.MaxInputTokens+10) + `"}`, nil, 400, CodeLimit, `input tokens`, ""},
		{"media token in the prompt", "POST", "/v1/generate", `{"prompt":"look <start_of_image> here"}`, nil, 400, CodeBadRequest, `attached as media`, ""},
		{"media token in the input", "POST", "/v1/score", `{"schema":` + boolSchema + `,"input":{"text":"look <image_soft_token> here"}}`, nil, 400, CodeBadRequest, `attached as media`, ""},
		{"bad backend", "POST", "/v1/score", score(`,"backend":"head"`), nil, 400, CodeBadRequest, `field "backend"`, ""},
		{"bad normalize", "POST", "/v1/score", score(`,"normalize":"zscore"`), nil, 400, CodeBadRequest, `field "normalize"`, ""},
		{"bad branch batch", "POST", "/v1/score", score(`,"branch_batch":65`), nil, 400, CodeBadRequest, `field "branch_batch"`, ""},
		{"zero temperature", "POST", "/v1/score", score(`,"temperature":0`), nil, 400, CodeBadRequest, `field "temperature"`, ""},
		{"relative calibration", "POST", "/v1/score", score(`,"calibration":"c.json"`), nil, 400, CodeBadRequest, `field "calibration"`, ""},
		{"bad base64", "POST", "/v1/score", `{"schema":` + boolSchema + `,"input":{"images":[{"data":"!!"}]}}`, nil, 400, CodeBadRequest, `field "input.images[0].data": not standard base64`, ""},
		{"not an image", "POST", "/v1/score", `{"schema":` + boolSchema + `,"input":{"images":[{"data":"aGVsbG8="}]}}`, nil, 400, CodeBadMedia, `input.images[0]`, ""},
		{"relative image path", "POST", "/v1/score", `{"schema":` + boolSchema + `,"input":{"images":[{"path":"a.png"}]}}`, nil, 400, CodeBadRequest, `not absolute`, ""},
		{"missing image file", "POST", "/v1/score", `{"schema":` + boolSchema + `,"input":{"images":[{"path":"/nonexistent/a.png"}]}}`, nil, 400, CodeBadMedia, `input.images[0]`, ""},
		{"image data and path", "POST", "/v1/score", `{"schema":` + boolSchema + `,"input":{"images":[{"path":"/a.png","data":"aGVsbG8="}]}}`, nil, 400, CodeBadRequest, `not both`, ""},
		{"video data", "POST", "/v1/score", `{"schema":` + boolSchema + `,"input":{"video":{"data":"aGVsbG8="}}}`, nil, 400, CodeBadRequest, `input.video`, ""},
		{"not json", "POST", "/v1/score", `{"schema":`, nil, 400, CodeBadJSON, `ends in the middle`, ""},
		{"syntax", "POST", "/v1/score", `{"schema" 1}`, nil, 400, CodeBadJSON, `not valid JSON`, ""},
		{"array body", "POST", "/v1/score", `[1]`, nil, 400, CodeBadJSON, `JSON object`, ""},
		{"two values", "POST", "/v1/generate", `{"prompt":"a"} {"prompt":"b"}`, nil, 400, CodeBadJSON, `nothing after it`, ""},
		{"unknown model", "POST", "/v1/score", score(`,"model":"gemma-9000"`), nil, 404, CodeUnknownModel, `"gemma-9000"`, ""},
		{"unknown model, generate", "POST", "/v1/generate", `{"prompt":"hi","model":"nope"}`, nil, 404, CodeUnknownModel, `GET /v1/models`, ""},
		{"unknown route", "POST", "/v1/chat", `{}`, nil, 404, CodeNotFound, `no route /v1/chat`, ""},
		{"wrong method", "GET", "/v1/score", "", nil, 405, CodeMethod, `takes POST`, ""},
		{"wrong method, models", "POST", "/v1/verdict/models", `{}`, nil, 405, CodeMethod, `takes GET`, ""},
		{"text/plain", "POST", "/v1/score", score(""), map[string]string{"Content-Type": "text/plain"}, 415, CodeContentType, `application/json`, ""},
		{"form", "POST", "/v1/generate", `prompt=hi`, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, CodeContentType, `application/json`, ""},
		{"json prefix trick", "POST", "/v1/generate", `{"prompt":"hi"}`, map[string]string{"Content-Type": "application/jsonp"}, 415, CodeContentType, `application/json`, ""},
		{"no content type", "POST", "/v1/generate", `{"prompt":"hi"}`, map[string]string{"Content-Type": ""}, 415, CodeContentType, `application/json`, ""},
		{"another site's page", "POST", "/v1/generate", `{"prompt":"hi"}`, map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, CodeForbidden, `another site`, ""},
		{"no model", "POST", "/v1/generate", `{"prompt":"hi"}`, nil, 503, CodeNoModel, `no model is loaded`, "bare"},
		{"no model, score", "POST", "/v1/score", score(""), nil, 503, CodeNoModel, `no model is loaded`, "bare"},
		{"content type with charset", "POST", "/v1/generate", `{"prompt":"hi","max_tokens":1}`, map[string]string{"Content-Type": "application/json; charset=utf-8"}, 200, "", "", ""},
	} {
		base := ts.URL
		if c.server == "bare" {
			base = bare.URL
		}
		resp, b := call(t, c.method, base+c.path, c.body, c.header)
		if c.status == 200 {
			if resp.StatusCode != 200 {
				t.Errorf("%s: %d %s", c.name, resp.StatusCode, b)
			}
			continue
		}
		e := errorOf(t, b)
		if resp.StatusCode != c.status || e.Code != c.code || !strings.Contains(e.Message, c.msg) {
			t.Errorf("%s: %d %s %q; want %d %s containing %q", c.name, resp.StatusCode, e.Code, e.Message, c.status, c.code, c.msg)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", c.name, ct)
		}
	}

	// A program's request (the test's) held: others still run beside it,
	// and so does the page's run.
	d, _, err := svc.Runs.Direct(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/generate", "/v1/score"} {
		body := `{"prompt":"hi","max_tokens":2}`
		if path == "/v1/score" {
			body = score("")
		}
		if resp, b := call(t, "POST", ts.URL+path, body, nil); resp.StatusCode != 200 {
			t.Errorf("%s beside a program's request: %d %s", path, resp.StatusCode, b)
		}
	}
	d.Close()
	d.Close() // again: nothing
	// A model named that the app knows but has not loaded.
	if _, _, err := svc.Runs.Direct(context.Background(), "/some/other/model"); err == nil {
		t.Error("Direct took a model other than the loaded one")
	} else if e := classify(err); e.status != http.StatusConflict || e.code != CodeModelNotLoaded {
		t.Errorf("other model: %d %s", e.status, e.code)
	}
}

// TestClassify: the app's and engine's errors get their status and code;
// anything else is the engine's failure (500).
func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{app.ErrBusy, 503, CodeBusy},
		{fmt.Errorf("score: %w", session.ErrQueueFull), 503, CodeBusy},
		{&session.NeverFitsError{KV: &session.KVError{Need: 9, Free: 8, Kind: "global"}}, 413, CodeLimit},
		{fmt.Errorf("start: %w", app.ErrBusy), 503, CodeBusy},
		{app.ErrNoModel, 503, CodeNoModel},
		{app.ErrLoading, 503, CodeNoModel},
		{&app.ModelMismatchError{Want: "a", Loaded: "b"}, 409, CodeModelNotLoaded},
		{&scorer.SchemaError{Msg: "no fields"}, 400, CodeBadSchema},
		{&scorer.LimitError{What: "input tokens", Value: 9, Max: 8}, 400, CodeLimit},
		{&app.SettingsError{Setting: "generation.top_k", Msg: "too many"}, 400, CodeBadRequest},
		{context.Canceled, 503, CodeCancelled},
		{errors.New("gemma3n: out of memory"), 500, CodeEngine},
		{fmt.Errorf("score: catalog: 9 tokens exceed the model's 8 positions: %w", session.ErrTooLong), 400, CodeLimit},
		{fmt.Errorf("score: %w", fmt.Errorf("generate: %w", session.ErrTooLong)), 400, CodeLimit},
	} {
		e := classify(c.err)
		if e.status != c.status || e.code != c.code {
			t.Errorf("%v: %d %s, want %d %s", c.err, e.status, e.code, c.status, c.code)
		}
	}
	if e := classify(&app.SettingsError{Setting: "generation.top_k", Msg: "too many"}); !strings.Contains(e.msg, `field "top_k"`) {
		t.Errorf("settings error message %q", e.msg)
	}
}

// countingBody counts the bytes read from an endless body.
type countingBody struct{ n int64 }

func (c *countingBody) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	c.n += int64(len(p))
	return len(p), nil
}
func (c *countingBody) Close() error { return nil }

// TestBodyLimit: a body over MaxBody is refused with 413: from its
// Content-Length without reading it, and without one after at most MaxBody
// bytes.
func TestBodyLimit(t *testing.T) {
	_, svc, _ := newAPI(t, false)
	h := New(svc, logrus.New())
	for _, c := range []struct {
		name    string
		length  int64
		maxRead int64
	}{
		{"content length", MaxBody + 1, 0},
		{"chunked", -1, MaxBody + 64<<10},
	} {
		body := &countingBody{}
		req := httptest.NewRequest("POST", "/v1/score", nil)
		req.Body, req.ContentLength = body, c.length
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		e := errorOf(t, w.Body.Bytes())
		if w.Code != 413 || e.Code != CodeTooLarge || !strings.Contains(e.Message, "32 MiB") {
			t.Errorf("%s: %d %v", c.name, w.Code, e)
		}
		if body.n > c.maxRead {
			t.Errorf("%s: read %d bytes, want at most %d", c.name, body.n, c.maxRead)
		}
	}
}
