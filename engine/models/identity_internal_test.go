package models

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestContentHash: a folder's content hash follows its content only: a copy
// elsewhere with other file times has the same one, a changed weight or an
// added file another.
func TestContentHash(t *testing.T) {
	write := func(dir string, weight byte, mtime time.Time) {
		files := map[string][]byte{
			"config.json":       []byte(`{"model_type":"gemma3n"}`),
			"model.safetensors": append(make([]byte, 4095), weight),
			"notes.txt":         []byte(time.Now().String()), // neither weights nor configuration
		}
		for n, b := range files {
			p := filepath.Join(dir, n)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			os.Chtimes(p, mtime, mtime)
		}
	}
	hash := func(dir string) string {
		h, err := contentHash(&Model{Path: dir})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	a, b, c := t.TempDir(), t.TempDir(), t.TempDir()
	write(a, 1, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	write(b, 1, time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC))
	write(c, 2, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	ha := hash(a)
	if !strings.HasPrefix(ha, "sha256:") || len(ha) != len("sha256:")+64 {
		t.Fatalf("hash %q", ha)
	}
	if hb := hash(b); hb != ha {
		t.Errorf("a copy at another path with other times: %s, want %s", hb, ha)
	}
	if hc := hash(c); hc == ha {
		t.Error("a changed weight keeps the hash")
	}
	os.WriteFile(filepath.Join(b, "extra.json"), []byte("{}"), 0o644)
	if hb := hash(b); hb == ha {
		t.Error("an added configuration file keeps the hash")
	}
	if _, err := contentHash(&Model{Path: filepath.Join(a, "none")}); err == nil {
		t.Error("a missing folder: no error")
	}
}

// TestBuiltinIdentity: the built-in model's identity is stable across
// opens and weight formats (the weights are the same; the format is its own
// field) and computed once.
func TestBuiltinIdentity(t *testing.T) {
	q4, err := OpenWith(Builtin, Options{CacheDir: "off"})
	if err != nil {
		t.Fatal(err)
	}
	defer q4.Close()
	f32, err := OpenWith(Builtin, Options{Weights: "f32"})
	if err != nil {
		t.Fatal(err)
	}
	defer f32.Close()
	a, err := q4.Identity()
	if err != nil {
		t.Fatal(err)
	}
	b, err := f32.Identity()
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash != b.Hash || a.Name != b.Name || a.Weights != "q4" || a.Group != 64 || b.Weights != "f32" || b.Group != 0 {
		t.Errorf("q4 %+v, f32 %+v", a, b)
	}
	q4.idHash = "kept"
	if again, _ := q4.Identity(); again.Hash != "kept" {
		t.Errorf("the hash was computed again: %s", again.Hash)
	}
}
