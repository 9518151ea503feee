package app

import (
	"os"
	"path/filepath"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma3n"
	"verdict/engine/gemma3n/gguf"
	"verdict/engine/weights"
	"verdict/engine/weights/ggufwrite"
)

// The app opens a GGUF file like a checkpoint folder: it loads, and the
// model's size is the file's.
func TestModelOpenGGUF(t *testing.T) {
	needTokenizer(t)
	dir := testmodel.Dir(t, "gemma3n-synthetic-tiny.tar.gz")
	st, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	js, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	cfg, _, err := gemma3n.ParseConfig(js)
	if err != nil {
		t.Fatal(err)
	}
	kvs, ts, err := gguf.Layout(st, "model.language_model.", cfg, gguf.LayoutOptions{Type: weights.GGMLQ8_0, PadPLE: true})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tiny-Q8_0.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ggufwrite.Write(f, ggufwrite.Options{}, kvs, ts); err != nil {
		t.Fatal(err)
	}
	f.Close()
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
