package hub

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/hub/hubtest"
)

// writeSnapshot lays out a repo in the cache as huggingface_hub does:
// blobs, a snapshot of links to them, and refs.
func writeSnapshot(t *testing.T, dir, repo, commit string, files map[string]string, refs ...string) string {
	t.Helper()
	rd := RepoDir(dir, repo)
	snap := filepath.Join(rd, "snapshots", commit)
	os.MkdirAll(filepath.Join(rd, "blobs"), 0o755)
	os.MkdirAll(snap, 0o755)
	for name, content := range files {
		blob := filepath.Join(rd, "blobs", hubtest.GitOID([]byte(content)))
		os.WriteFile(blob, []byte(content), 0o644)
		if err := linkBlob(blob, filepath.Join(snap, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range refs {
		if err := writeRef(rd, r, commit); err != nil {
			t.Fatal(err)
		}
	}
	return snap
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	c1, c2 := strings.Repeat("1", 40), strings.Repeat("2", 40)
	index := `{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`
	full := writeSnapshot(t, dir, "google/gemma-3n-E4B-it", c1, map[string]string{
		"config.json": "{}", "model.safetensors.index.json": index,
		"model-00001-of-00002.safetensors": "1", "model-00002-of-00002.safetensors": "2"}, "main", "refs/pr/1")
	writeSnapshot(t, dir, "google/gemma-3n-E4B-it", c2, map[string]string{
		"config.json": "{}", "model.safetensors.index.json": index, "model-00001-of-00002.safetensors": "1"}, "v2")
	single := writeSnapshot(t, dir, "google/gemma-3n-E2B", c2, map[string]string{"config.json": "{}", "model.safetensors": "w"}, "main")

	for _, tc := range []struct {
		spec, want, says string
	}{
		{"google/gemma-3n-E4B-it", full, ""},
		{"google/gemma-3n-E4B-it@main", full, ""},
		{"google/gemma-3n-E4B-it@refs/pr/1", full, ""},
		{"google/gemma-3n-E4B-it@" + c1, full, ""},
		{"google/gemma-3n-E2B", single, ""},
		{"google/gemma-3n-E4B-it@v2", "", "incomplete (no model-00002-of-00002.safetensors)"},
		{"google/gemma-3n-E2B-it", "", "not downloaded"},
		{"google/gemma-3n-E4B-it@v3", "", "run `verdict pull google/gemma-3n-E4B-it@v3`"},
		{"google/gemma-3n-E4B-it@" + strings.Repeat("3", 40), "", "not downloaded"},
		{"google/../x", "", "not a Hugging Face model id"},
		{"google/gemma-3n-E4B-it@../../x", "", "not a Hugging Face model id"},
	} {
		got, err := Resolve(dir, tc.spec)
		if tc.says != "" {
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("%s: %q, %v; want an error saying %q", tc.spec, got, err, tc.says)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %s", tc.spec, got, err, tc.want)
		}
	}
	if _, err := Resolve(dir, "google/gemma-3n-E2B-it"); !errors.Is(err, ErrNotCached) {
		t.Errorf("a repo not in the cache: %v, want ErrNotCached", err)
	}

	snaps, err := Cached(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range snaps {
		got = append(got, s.Repo+"@"+s.Commit[:1]+" "+strings.Join(s.Refs, ",")+" "+map[bool]string{true: "complete", false: "incomplete"}[s.Complete])
	}
	want := []string{"google/gemma-3n-E2B@2 main complete", "google/gemma-3n-E4B-it@1 main,refs/pr/1 complete", "google/gemma-3n-E4B-it@2 v2 incomplete"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Cached:\n%q\nwant\n%q", got, want)
	}
	if s, err := Cached(filepath.Join(dir, "none")); s != nil || err != nil {
		t.Errorf("a missing cache: %v, %v", s, err)
	}
}

func TestLooksLikeRepo(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "org", "name"), 0o755)
	t.Chdir(dir)
	for spec, want := range map[string]bool{
		"google/gemma-3n-E2B-it": true, "google/gemma-3n-E2B-it@main": true,
		"org/name": false, // a folder of that name exists
		"builtin":  false, "/abs/path": false, "./a/b": false, "a/b/c": false, "synthetic-e2b": false,
	} {
		if got := LooksLikeRepo(spec); got != want {
			t.Errorf("LooksLikeRepo(%q) = %v", spec, got)
		}
	}
}

func TestTokenAndDirs(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", "")
	t.Setenv("HF_ENDPOINT", "")
	if Token() != "" || CacheDir() != filepath.Join(home, "hub") || Endpoint() != DefaultEndpoint {
		t.Fatalf("defaults: token %q, cache %s, endpoint %s", Token(), CacheDir(), Endpoint())
	}
	os.WriteFile(filepath.Join(home, "token"), []byte("hf_file\n"), 0o600)
	if Token() != "hf_file" {
		t.Errorf("token file: %q", Token())
	}
	t.Setenv("HF_TOKEN", "hf_env")
	t.Setenv("HF_ENDPOINT", "http://127.0.0.1:9/")
	t.Setenv("HF_HUB_CACHE", "/x/cache")
	if Token() != "hf_env" || Endpoint() != "http://127.0.0.1:9" || CacheDir() != "/x/cache" {
		t.Errorf("from the environment: token %q, endpoint %s, cache %s", Token(), Endpoint(), CacheDir())
	}
}
