package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/sirupsen/logrus"

	"verdict/app"
	"verdict/media/availability"
	"verdict/media/capture"
)

func newTest(t *testing.T, assets fstest.MapFS) (*httptest.Server, *app.Services, *Hub) {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	hub := NewHub(log)
	svc := app.New(app.Options{Emitter: hub, Logger: log, Capture: "synthetic",
		CheckMedia: func(context.Context, *capture.Devices) availability.Report { return availability.Report{} }})
	t.Cleanup(svc.Shutdown)
	var fsys = assets
	if fsys == nil {
		fsys = fstest.MapFS{}
	}
	srv := New(svc.Bound(), hub, fsys, log, Access{Token: testToken})
	srv.HandleMedia(svc.Uploads(), svc.MediaFiles())
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts, svc, hub
}

// testToken is the access token of the test servers; get, do and post send
// it unless the request already has a token header.
const testToken = "test-token-0123456789"

func do(req *http.Request) (*http.Response, error) {
	if _, ok := req.Header[TokenHeader]; !ok {
		req.Header.Set(TokenHeader, testToken)
	}
	return http.DefaultClient.Do(req)
}

func get(url string) (*http.Response, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return nil, err
	}
	return do(req)
}

func post(t *testing.T, url, body string, header map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := do(req)
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
	resp, err := get(ts.URL + "/api/bindings")
	if err != nil {
		t.Fatal(err)
	}
	var b map[string][]string
	json.NewDecoder(resp.Body).Decode(&b)
	resp.Body.Close()
	for _, svc := range []string{"Models", "Scorer", "Generator", "Runs", "Settings", "Logs", "System", "Media"} {
		if len(b[svc]) == 0 {
			t.Errorf("bindings lack %s: %v", svc, b)
		}
	}
}

func TestEventStream(t *testing.T) {
	ts, svc, hub := newTest(t, nil)
	resp, err := get(ts.URL + "/api/events")
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
		resp, err := get(ts.URL + p)
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

func pngBytes(t *testing.T, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// grayPNG is a w×h PNG of one gray level.
func grayPNG(t *testing.T, w, h int, level uint8) []byte {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = level
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// wavBytes is a silent 16-bit mono WAV of n samples at 16 kHz.
func wavBytes(n int) []byte {
	var b bytes.Buffer
	le := func(v uint32, size int) {
		for i := 0; i < size; i++ {
			b.WriteByte(byte(v >> (8 * i)))
		}
	}
	b.WriteString("RIFF")
	le(uint32(36+2*n), 4)
	b.WriteString("WAVEfmt ")
	le(16, 4)
	le(1, 2)
	le(1, 2)
	le(16000, 4)
	le(32000, 4)
	le(2, 2)
	le(16, 2)
	b.WriteString("data")
	le(uint32(2*n), 4)
	b.Write(make([]byte, 2*n))
	return b.Bytes()
}

func upload(t *testing.T, url string, files map[string][]byte, header map[string]string) (int, string) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("note", "ignored")
	for _, name := range []string{"photo.png", "tone.wav", "notes.txt", "2.png", "3.png", "4.png", "5.png", "6.png", "7.png", "8.png", "9.png"} {
		if data, ok := files[name]; ok {
			w, _ := mw.CreateFormFile("file", name)
			w.Write(data)
		}
	}
	mw.Close()
	req, _ := http.NewRequest("POST", url+"/api/upload", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestUpload(t *testing.T) {
	ts, svc, _ := newTest(t, nil)
	code, body := upload(t, ts.URL, map[string][]byte{"photo.png": pngBytes(t, 30, 20), "tone.wav": wavBytes(8000), "notes.txt": []byte("hi")}, nil)
	if code != 200 {
		t.Fatalf("upload: %d %s", code, body)
	}
	var res UploadResponse
	if err := json.Unmarshal([]byte(body), &res); err != nil || len(res.Results) != 3 {
		t.Fatalf("results %s, %v", body, err)
	}
	img, aud, txt := res.Results[0], res.Results[1], res.Results[2]
	if img.Item == nil || img.Item.Kind != "image" || img.Item.Source != app.SourceUpload || img.Item.Tokens != 256 || img.Name != "photo.png" {
		t.Errorf("image %+v", img)
	}
	if aud.Item == nil || aud.Item.Kind != "audio" || aud.Item.DurationMs != 500 || aud.Item.Tokens != 188 {
		t.Errorf("audio %+v", aud)
	}
	if txt.Item != nil || !strings.Contains(txt.Error, "text file") {
		t.Errorf("text %+v", txt)
	}
	// The previews are served beside the API.
	resp, err := get(ts.URL + img.Item.ModelView)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(resp.Body)
	resp.Body.Close()
	if err != nil || cfg.Width != 768 || cfg.Height != 768 || resp.Header.Get("Content-Type") != "image/png" {
		t.Errorf("model view: %+v %v", cfg, err)
	}
	req, _ := http.NewRequest("GET", ts.URL+img.Item.ModelView, nil)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if resp, err := do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site preview: %v %v", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	if n := len(svc.Media.Items()); n != 2 {
		t.Errorf("%d items", n)
	}

	// A ninth image: the result names the limit.
	more := map[string][]byte{}
	for i := 2; i <= 9; i++ {
		more[string(rune('0'+i))+".png"] = grayPNG(t, 4, 4, uint8(25*i)) // each its own content: the same is added once
	}
	code, body = upload(t, ts.URL, more, nil)
	json.Unmarshal([]byte(body), &res)
	if code != 200 || len(res.Results) != 8 {
		t.Fatalf("eight more: %d %s", code, body)
	}
	last := res.Results[7]
	if last.Limit == nil || last.Limit.Limit != "images" || last.Limit.Value != 9 || last.Error != "9.png: images 9 exceeds the limit of 8" {
		t.Errorf("ninth image %+v", last)
	}

	// Malformed and refused requests.
	if code, body := post(t, ts.URL+"/api/upload", "{}", nil); code != http.StatusUnsupportedMediaType || !strings.Contains(body, "multipart/form-data") {
		t.Errorf("JSON upload: %d %s", code, body)
	}
	if code, body := upload(t, ts.URL, nil, nil); code != http.StatusBadRequest || !strings.Contains(body, "no file") {
		t.Errorf("empty upload: %d %s", code, body)
	}
	if code, _ := upload(t, ts.URL, map[string][]byte{"photo.png": pngBytes(t, 2, 2)}, map[string]string{"Origin": "http://evil.example"}); code != http.StatusForbidden {
		t.Errorf("cross-origin upload: %d", code)
	}
	req = httptest.NewRequest("POST", "/api/upload", strings.NewReader("x"))
	req.Header.Set("Content-Type", "multipart/form-data; boundary=x")
	req.ContentLength = MaxUpload + 1
	req.Host = "127.0.0.1"
	req.Header.Set(TokenHeader, testToken)
	w := httptest.NewRecorder()
	ts.Config.Handler.ServeHTTP(w, req)
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "over the limit of 256 MB") {
		t.Errorf("huge upload: %d %s", w.Code, w.Body)
	}
}
