package models_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/models"
)

func TestOpenBuiltin(t *testing.T) {
	m, err := models.Open(models.Builtin)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.Builtin || !strings.Contains(m.Name, "random weights") {
		t.Errorf("built-in model not labelled: %q", m.Name)
	}
	if m.Config().Layers != 6 || m.Config().Vocab != 262400 {
		t.Errorf("unexpected config: %d layers, vocab %d", m.Config().Layers, m.Config().Vocab)
	}
	h, err := m.Forward(m.NewCache(), []int32{2, 105, 2364}, nil)
	if err != nil || len(h) != 3*m.Config().Hidden {
		t.Fatalf("forward: %v, %d values", err, len(h))
	}
}

// The built-in model is the tiny fixture: its logits match the fixture's
// model exactly.
func TestBuiltinIsTinyFixture(t *testing.T) {
	b, err := models.Open(models.Builtin)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	f, err := models.Open(testmodel.Dir(t, "gemma3n-synthetic-tiny.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ids := []int32{2, 105, 2364, 107, 6190}
	hb, _ := b.Forward(b.NewCache(), ids, nil)
	hf, _ := f.Forward(f.NewCache(), ids, nil)
	for i := range hb {
		if hb[i] != hf[i] {
			t.Fatalf("hidden value %d: built-in %g, fixture %g", i, hb[i], hf[i])
		}
	}
}

func TestOpenErrors(t *testing.T) {
	empty := t.TempDir()
	noWeights := t.TempDir()
	os.WriteFile(filepath.Join(noWeights, "config.json"), []byte(`{"model_type":"gemma3n_text"}`), 0o644)
	for _, tc := range []struct{ spec, want string }{
		{filepath.Join(empty, "missing"), "no such file"},
		{empty, "config.json"},
		{noWeights, "no model.safetensors"},
	} {
		_, err := models.Open(tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%s) = %v, want error containing %q", tc.spec, err, tc.want)
		}
	}
}

func TestTokenizerMissing(t *testing.T) {
	t.Setenv("VERDICT_TOKENIZER", filepath.Join(t.TempDir(), "none.json"))
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	t.Chdir(t.TempDir())
	m, err := models.Open(models.Builtin)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Tokenizer(); !errors.Is(err, models.ErrNoTokenizer) || !strings.Contains(err.Error(), "fetch-tokenizer.sh") {
		t.Errorf("Tokenizer() = %v, want ErrNoTokenizer with a hint", err)
	}
}

// TestTokenizerBesideExecutable: a binary started from another folder,
// without $VERDICT_TOKENIZER or a user cache copy, finds the tokenizer.json
// beside itself.
func TestTokenizerBesideExecutable(t *testing.T) {
	src := os.Getenv("VERDICT_TOKENIZER")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Skipf("no tokenizer to copy ($VERDICT_TOKENIZER): %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	beside := filepath.Join(filepath.Dir(exe), "tokenizer.json")
	if _, err := os.Stat(beside); err == nil {
		t.Skipf("%s exists already", beside)
	}
	if err := os.WriteFile(beside, b, 0o644); err != nil {
		t.Skipf("the test binary's folder is not writable: %v", err)
	}
	t.Cleanup(func() { os.Remove(beside) })
	t.Setenv("VERDICT_TOKENIZER", filepath.Join(t.TempDir(), "none.json"))
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	t.Chdir(t.TempDir())
	if _, err := models.LoadTokenizer(""); err != nil {
		t.Errorf("with %s: %v", beside, err)
	}
}
