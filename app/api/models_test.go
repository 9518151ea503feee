package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"verdict/app"
	"verdict/engine/models"
)

// TestModels: the built-in model is listed before and after it is loaded;
// once loaded it is the one marked loaded, with its towers known.
func TestModels(t *testing.T) {
	bare, _, _ := newAPI(t, false)
	ready, _, _ := newAPI(t, true)
	for _, c := range []struct {
		name, url string
		loaded    bool
	}{
		{"nothing loaded", bare.URL, false},
		{"built-in loaded", ready.URL, true},
	} {
		resp, b := call(t, "GET", c.url+"/v1/verdict/models", "", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.name, resp.StatusCode, b)
		}
		var list ModelList
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatal(err)
		}
		var builtin []Model
		loaded := 0
		for _, m := range list.Models {
			if m.ID == models.Builtin {
				builtin = append(builtin, m)
			}
			if m.Loaded {
				loaded++
			}
			if m.ID == "" || m.Name == "" || m.Source == "" {
				t.Errorf("%s: incomplete entry %+v", c.name, m)
			}
		}
		if len(builtin) != 1 {
			t.Fatalf("%s: built-in model listed %d times in %s", c.name, len(builtin), b)
		}
		m := builtin[0]
		if m.Loaded != c.loaded || !m.RandomWeights || m.Source != "builtin" {
			t.Errorf("%s: built-in %+v", c.name, m)
		}
		if c.loaded {
			if loaded != 1 || m.State != "ready" || m.Towers.Vision == nil || m.Towers.Audio == nil || m.Params == 0 {
				t.Errorf("%s: %d loaded; built-in state %q towers %v/%v params %d", c.name, loaded, m.State, m.Towers.Vision, m.Towers.Audio, m.Params)
			}
		} else if loaded != 0 || m.Towers.Vision != nil {
			t.Errorf("%s: %d loaded; towers %+v", c.name, loaded, m.Towers)
		}
	}
}

// TestFailedLoad: after a load fails (the built-in model without a
// tokenizer.json anywhere), /v1/verdict/models gives the reason with the model's
// "error" state, and /v1/score and /v1/generate say it with "no model is
// loaded".
func TestFailedLoad(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("VERDICT_TOKENIZER", filepath.Join(dir, "none.json"))
	t.Setenv("XDG_CACHE_HOME", dir)
	t.Setenv("HOME", dir)
	for _, p := range models.TokenizerPaths("") {
		if _, err := os.Stat(p); err == nil {
			t.Skipf("a tokenizer is at %s", p)
		}
	}
	ts, svc, _ := newAPI(t, false)
	spec := models.Builtin
	if _, err := svc.Models.Open(spec); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for svc.Models.Info().State == app.ModelLoading && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	info := svc.Models.Info()
	if info.State != app.ModelError || info.Error == "" {
		t.Fatalf("load of %s: state %q, error %q", spec, info.State, info.Error)
	}
	_, b := call(t, "GET", ts.URL+"/v1/verdict/models", "", nil)
	var list ModelList
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	if m := list.Models[0]; m.ID != spec || m.State != app.ModelError || m.Error != info.Error {
		t.Errorf("first model %+v, want %s in state error with %q", m, spec, info.Error)
	}
	for _, c := range []struct{ path, body string }{
		{"/v1/score", `{"schema":` + boolSchema + `,"input":{"text":"hello"}}`},
		{"/v1/generate", `{"prompt":"hi"}`},
	} {
		resp, b := call(t, "POST", ts.URL+c.path, c.body, nil)
		e := errorOf(t, b)
		if resp.StatusCode != 503 || e.Code != CodeNoModel || !strings.Contains(e.Message, "no model is loaded") ||
			!strings.Contains(e.Message, info.Error) || !strings.Contains(e.Message, spec) {
			t.Errorf("%s: %d %+v; want no_model naming %s and %q", c.path, resp.StatusCode, e, spec, info.Error)
		}
	}
}
