package app

import (
	"os"
	"path/filepath"
	"testing"

	"verdict/engine/fixture/testmodel"
)

// The app opens a GGUF file like a checkpoint folder: it loads, and the
// model's size is the file's.
func TestModelOpenGGUF(t *testing.T) {
	needTokenizer(t)
	dir := testmodel.Dir(t, "gemma3n-synthetic-tiny.tar.gz")
	path := filepath.Join(t.TempDir(), "tiny-Q8_0.gguf")
	testmodel.WriteGGUF(t, dir, path, "Q8_0")
	fi, _ := os.Stat(path)

	rec := NewRecorder()
	s := newServices(t, rec)
	info, err := s.Models.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.SizeBytes != fi.Size() {
		t.Errorf("size %d, want the file's %d", info.SizeBytes, fi.Size())
	}
	if m := settledModel(t, rec); m.State != ModelReady {
		t.Fatalf("model state %s: %s", m.State, m.Error)
	}
}
