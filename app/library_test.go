package app

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"verdict/engine/hub"
	"verdict/engine/hub/hubtest"
	"verdict/engine/models"
	"verdict/engine/session"
)

// emptySafetensors is the header of a safetensors file with no tensors.
const emptySafetensors = "\x02\x00\x00\x00\x00\x00\x00\x00{}"

// libraryServices returns services whose library talks to a fake Hub
// serving the Gemma 3n repos (E2B-it gated, E4B missing) into a temporary
// cache, and whose model opener records the spec it was given.
func libraryServices(t *testing.T) (*Services, *Recorder, *hubtest.Hub, string, chan string) {
	t.Helper()
	files := func(w string) map[string]string {
		return map[string]string{"config.json": `{"model_type":"gemma3n"}`, "model.safetensors": emptySafetensors + strings.Repeat(w, 40000), "tokenizer.json": "{}"}
	}
	h := &hubtest.Hub{Repos: map[string]*hubtest.Repo{
		"google/gemma-3n-E2B-it": hubtest.NewRepo(files("a"), "model.safetensors"),
		"google/gemma-3n-E4B-it": hubtest.NewRepo(files("bb"), "model.safetensors"),
		"google/gemma-3n-E2B":    hubtest.NewRepo(files("c"), "model.safetensors"),
	}}
	h.Repos["google/gemma-3n-E2B-it"].Gated = "hf_ok"
	srv := h.Start(t)
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HOME", t.TempDir())
	opened := make(chan string, 4)
	rec := NewRecorder()
	s := New(Options{Emitter: rec, Logger: quietLogger(), SettingsPath: filepath.Join(t.TempDir(), "settings.json"),
		Open: func(ctx context.Context, spec string, _ *session.Backend, _ func(string, int64, int64)) (*session.Session, error) {
			opened <- spec
			return nil, errors.New("not opened in this test")
		}})
	t.Cleanup(s.Shutdown)
	s.Library.client = func() *hub.Client { return &hub.Client{Endpoint: srv.URL, CacheDir: cache} }
	s.Library.places = func(recent []string) models.Places { return models.Places{HubCache: cache, Folders: recent} }
	return s, rec, h, cache, opened
}

// settledDownload waits for a hub:download event that is not a download in
// progress and returns it.
func settledDownload(t *testing.T, rec *Recorder, after int) DownloadState {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		evs := rec.Events(EventDownload)
		for _, e := range evs[min(after, len(evs)):] {
			var d DownloadState
			json.Unmarshal(e.JSON, &d)
			if d.State != DownloadRunning {
				return d
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no download ended within 30 s")
	return DownloadState{}
}

// TestLibraryDownload: a download reports its progress and ends with the
// snapshot, which Models.Open then takes by its id; a gated repo says where
// to accept the licence until a token is entered; a second download while
// one runs is refused; Cancel stops it, and the next one resumes.
func TestLibraryDownload(t *testing.T) {
	s, rec, h, cache, opened := libraryServices(t)
	lib := s.Library

	if _, err := lib.Download("google/gemma-3n-E2B-it", ""); err != nil {
		t.Fatal(err)
	}
	d := settledDownload(t, rec, 0)
	if d.State != DownloadError || !d.Gated || !strings.HasSuffix(d.LicenceURL, "/google/gemma-3n-E2B-it") || !strings.Contains(d.Error, "accept its licence") {
		t.Fatalf("gated: %+v", d)
	}
	if tk := lib.SetToken(" hf_ok "); !tk.Present || tk.Source != "entered" {
		t.Errorf("token after SetToken: %+v", tk)
	}
	n := len(rec.Events(EventDownload))
	if _, err := lib.Download("google/gemma-3n-E2B-it", ""); err != nil {
		t.Fatal(err)
	}
	d = settledDownload(t, rec, n)
	snap := filepath.Join(hub.RepoDir(cache, "google/gemma-3n-E2B-it"), "snapshots", h.Repos["google/gemma-3n-E2B-it"].Commit)
	if d.State != DownloadDone || d.Path != snap || d.Spec != "google/gemma-3n-E2B-it" || d.Done != d.Total || d.Total == 0 {
		t.Fatalf("done: %+v", d)
	}
	info, err := s.Models.Open(d.Spec)
	if err != nil || info.Spec != "google/gemma-3n-E2B-it" || info.Path != snap || info.Name != "google/gemma-3n-E2B-it" {
		t.Fatalf("Open(%s): %+v, %v", d.Spec, info, err)
	}
	if got := <-opened; got != "google/gemma-3n-E2B-it" {
		t.Errorf("the opener got %q", got)
	}
	if _, err := s.Models.Open("google/gemma-3n-E4B"); err == nil || !strings.Contains(err.Error(), "verdict pull") {
		t.Errorf("Open of a repo not downloaded: %v", err)
	}

	// Cancel, then resume.
	r := h.Repos["google/gemma-3n-E4B-it"]
	hold := make(chan struct{})
	h.Mu.Lock()
	r.Hold["model.safetensors"] = hold
	h.Mu.Unlock()
	n = len(rec.Events(EventDownload))
	if _, err := lib.Download("google/gemma-3n-E4B-it", ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Wait(EventDownload, 10*time.Second, func(b json.RawMessage) bool {
		var d DownloadState
		json.Unmarshal(b, &d)
		return d.File == "model.safetensors" && d.Done > 0
	}); !ok {
		t.Fatal("no progress on model.safetensors")
	}
	if _, err := lib.Download("google/gemma-3n-E2B", ""); !errors.Is(err, ErrDownloading) {
		t.Errorf("a second download: %v, want ErrDownloading", err)
	}
	lib.Cancel()
	d = settledDownload(t, rec, n)
	if d.State != DownloadCancelled || !strings.Contains(d.Error, "resume") {
		t.Fatalf("cancelled: %+v", d)
	}
	h.Mu.Lock()
	delete(r.Hold, "model.safetensors")
	h.Mu.Unlock()
	close(hold)
	n = len(rec.Events(EventDownload))
	lib.Download("google/gemma-3n-E4B-it", "")
	if d = settledDownload(t, rec, n); d.State != DownloadDone {
		t.Fatalf("after the cancel: %+v", d)
	}
	h.Mu.Lock()
	ranges := r.Ranges["model.safetensors"]
	h.Mu.Unlock()
	if len(ranges) != 1 || !strings.HasPrefix(ranges[0], "bytes=") {
		t.Errorf("the resumed request's Range headers: %q", ranges)
	}
	if _, err := lib.Download("../x", ""); err == nil {
		t.Error("a bad id was accepted")
	}
}

// TestLibraryReposAndLocal: Repos lists the Gemma 3n and Gemma 4 repos
// with their families and sizes, an error for those the Hub lacks and the
// snapshot of the one downloaded; Local lists the Hub cache and the folders opened before,
// which are remembered across restarts.
func TestLibraryReposAndLocal(t *testing.T) {
	s, rec, _, _, _ := libraryServices(t)
	lib := s.Library
	lib.SetToken("hf_ok")
	lib.Download("google/gemma-3n-E2B", "")
	if d := settledDownload(t, rec, 0); d.State != DownloadDone {
		t.Fatalf("%+v", d)
	}
	rs := lib.Repos()
	if len(rs) != len(GemmaRepos) {
		t.Fatalf("%d repos, want %d", len(rs), len(GemmaRepos))
	}
	families := map[string]int{}
	for _, r := range rs {
		families[r.Family]++
		switch r.Repo {
		case "google/gemma-3n-E4B":
			if r.Error == "" || !strings.Contains(r.Error, "no model") {
				t.Errorf("%s: %+v, want an error", r.Repo, r)
			}
		case "google/gemma-3n-E4B-it":
			if r.SizeBytes != 10+80000+2+24 || r.Files != 3 || r.Path != "" {
				t.Errorf("%s: %+v", r.Repo, r)
			}
		case "google/gemma-3n-E2B":
			if r.SizeBytes != 10+40000+2+24 || r.Path == "" {
				t.Errorf("%s: %+v", r.Repo, r)
			}
		case "google/gemma-3n-E2B-it":
			if !r.Gated || r.Error != "" {
				t.Errorf("%s: %+v", r.Repo, r)
			}
		case "google/gemma-4-E2B-it":
			if r.Family != "gemma4" || r.Error == "" {
				t.Errorf("%s (not on the fake Hub): %+v", r.Repo, r)
			}
		}
	}
	if families["gemma3n"] != 4 || families["gemma4"] != 8 {
		t.Errorf("families %v, want 4 Gemma 3n repos and 8 Gemma 4 ones", families)
	}

	folder := filepath.Join(t.TempDir(), "my-gemma")
	os.MkdirAll(folder, 0o755)
	os.WriteFile(filepath.Join(folder, "config.json"), []byte(`{"model_type":"gemma3n","torch_dtype":"float32"}`), 0o644)
	os.WriteFile(filepath.Join(folder, "model.safetensors"), []byte(emptySafetensors), 0o644)
	s.Library.watch(EmitterFunc(func(string, any) {})).Emit(EventModel, ModelInfo{State: ModelReady, Path: folder})
	var got []string
	for _, l := range lib.Local() {
		got = append(got, l.Source+" "+l.Name+" "+l.Quant)
	}
	if strings.Join(got, "|") != "huggingface google/gemma-3n-E2B |folder my-gemma F32" {
		t.Errorf("local: %q", got)
	}
	again := NewLibrary(rec, quietLogger(), lib.recentPath)
	if len(again.recent) != 1 || again.recent[0] != folder {
		t.Errorf("remembered after a restart: %q", again.recent)
	}
}

// TestLibraryOffline: a Hub that cannot be reached gives every repo (and a
// download) one plain message naming its host, the details kept apart.
func TestLibraryOffline(t *testing.T) {
	s, rec, _, cache, _ := libraryServices(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	s.Library.client = func() *hub.Client { return &hub.Client{Endpoint: "http://" + addr, CacheDir: cache} }
	want := "Can't reach " + addr + " — check the connection; models on this machine still work"
	rs := s.Library.Repos()
	if len(rs) != len(GemmaRepos) {
		t.Fatalf("%d repos", len(rs))
	}
	for _, r := range rs {
		if r.Offline != want || !strings.Contains(r.Error, addr) || r.SizeBytes != 0 {
			t.Errorf("%s: offline %q, error %q", r.Repo, r.Offline, r.Error)
		}
	}
	n := len(rec.Events(EventDownload))
	if _, err := s.Library.Download("google/gemma-3n-E2B-it", ""); err != nil {
		t.Fatal(err)
	}
	if d := settledDownload(t, rec, n); d.State != DownloadError || d.Offline != want || d.Error == "" {
		t.Errorf("download %+v", d)
	}
	// Another error is not called offline.
	if m := offlineMessage(errors.New("the Hub answered HTTP 500")); m != "" {
		t.Errorf("offline message %q for an HTTP error", m)
	}
}
