package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"verdict/engine/hub"
	"verdict/engine/hub/hubtest"
)

// TestPull: verdict pull against a fake Hub prints the snapshot on stdout
// and a summary on stderr; a gated repo says where to accept the licence
// until --token gives access; bad arguments are usage errors.
func TestPull(t *testing.T) {
	const repo = "google/gemma-3n-E2B-it"
	r := hubtest.NewRepo(map[string]string{"config.json": `{"model_type": "gemma3n"}`, "model.safetensors": strings.Repeat("w", 5000), "README.md": "card"}, "model.safetensors")
	r.Gated = "hf_ok"
	srv := (&hubtest.Hub{Repos: map[string]*hubtest.Repo{repo: r}}).Start(t)
	cache := t.TempDir()
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HOME", t.TempDir())

	code, out, errOut := run("pull", repo)
	if code != 1 || !strings.Contains(errOut, "gated") || !strings.Contains(errOut, srv.URL+"/"+repo) || out != "" {
		t.Errorf("gated: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = run("pull", repo, "--token", "hf_ok")
	snap := filepath.Join(hub.RepoDir(cache, repo), "snapshots", r.Commit)
	if code != 0 || out != snap+"\n" || !strings.Contains(errOut, "2 files, 5.0 kB fetched, 0 already in the cache") || !strings.Contains(errOut, "Gemma 3n checkpoint: open it with --model "+repo) {
		t.Errorf("pull: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(snap, "model.safetensors")); err != nil || len(b) != 5000 {
		t.Errorf("model.safetensors: %d bytes, %v", len(b), err)
	}
	t.Setenv("HF_TOKEN", "hf_ok")
	code, _, errOut = run("pull", "--revision", "main", repo)
	if code != 0 || !strings.Contains(errOut, "0 B fetched, 2 already in the cache") {
		t.Errorf("again: exit %d, stderr %q", code, errOut)
	}
	code, out, errOut = run("pull", repo, "--include", "*.md")
	if code != 0 || out != snap+"\n" || !strings.Contains(errOut, "files: README.md") {
		t.Errorf("--include: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	t.Setenv("HF_ENDPOINT", "http://127.0.0.1:1")
	code, _, errOut = run("pull", repo)
	if code != 1 || !strings.Contains(errOut, "cannot reach the Hub at http://127.0.0.1:1") || !strings.Contains(errOut, "--model "+repo+" works offline") {
		t.Errorf("offline: exit %d, stderr %q", code, errOut)
	}
	for _, args := range [][]string{{"pull"}, {"pull", "not a repo"}, {"pull", repo, "extra"}} {
		if code, _, errOut := run(args...); code != 2 {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// TestPullFamily: verdict pull takes Gemma 4's repo ids and says what it
// fetched: a Gemma 4 checkpoint to open, or a checkpoint Verdict cannot run.
func TestPullFamily(t *testing.T) {
	repos := map[string]*hubtest.Repo{}
	for repo, cfg := range map[string]string{
		"google/gemma-4-E2B-it":     `{"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"]}`,
		"google/gemma-4-31B":        `{"architectures": ["Gemma4ForCausalLM"]}`,
		"someone/llama-finetune-it": `{"model_type": "llama"}`,
	} {
		repos[repo] = hubtest.NewRepo(map[string]string{"config.json": cfg, "model.safetensors": strings.Repeat("w", 100)}, "model.safetensors")
	}
	srv := (&hubtest.Hub{Repos: repos}).Start(t)
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HOME", t.TempDir())
	for _, tc := range []struct{ repo, want string }{
		{"google/gemma-4-E2B-it", "Gemma 4 checkpoint: open it with --model google/gemma-4-E2B-it"},
		{"google/gemma-4-31B", "Gemma 4 checkpoint: open it with --model google/gemma-4-31B"},
		{"someone/llama-finetune-it", `note: Verdict cannot run it: `},
	} {
		code, out, errOut := run("pull", tc.repo)
		if code != 0 || out == "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %q", tc.repo, code, out, errOut, tc.want)
		}
	}
}

// TestPullLine: the progress line has the file, the share, the bytes, the
// speed and the time left.
func TestPullLine(t *testing.T) {
	got := pullLine(hub.Progress{Stage: hub.StageDownloading, File: "model-00001-of-00003.safetensors", FileIndex: 1, Files: 4,
		Done: 2_500_000_000, Total: 10_000_000_000, BytesPerSec: 42e6, Left: 3 * time.Minute})
	want := "downloading model-00001-of-00003.safetensors (1 of 4) [######..................]  25% 2.50 GB of 10.00 GB · 42.0 MB/s, about 3m0s left"
	if got != want {
		t.Errorf("\n got %q\nwant %q", got, want)
	}
}

// TestPullBar: off a terminal the bar writes a line per file and one every
// ten seconds; on one it redraws a line in place, throttled, and clears it.
func TestPullBar(t *testing.T) {
	var buf strings.Builder
	now := time.Unix(0, 0)
	b := &pullBar{w: &buf, now: func() time.Time { return now }}
	p := hub.Progress{Stage: hub.StageDownloading, File: "a", FileIndex: 1, Files: 2, FileSize: 100, Total: 100, Left: -1}
	for i := range 5 {
		p.Done = int64(i)
		now = now.Add(3 * time.Second)
		b.show(p)
	}
	p.File, p.FileIndex = "b", 2
	b.show(p)
	if lines := strings.Count(buf.String(), "\n"); lines != 3 {
		t.Errorf("off a terminal: %d lines, want 3 (file a, ten seconds later, file b):\n%s", lines, buf.String())
	}
	buf.Reset()
	b = &pullBar{w: &buf, term: true, now: func() time.Time { return now }}
	b.show(p)
	now = now.Add(10 * time.Millisecond)
	b.show(p) // too soon: not drawn
	now = now.Add(200 * time.Millisecond)
	b.show(p)
	b.clear()
	if got := strings.Count(buf.String(), "\r"); got != 3 || !strings.HasSuffix(buf.String(), "\r\x1b[K") {
		t.Errorf("on a terminal: %q", buf.String())
	}
}
