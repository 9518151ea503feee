//go:build unix

package models_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"verdict/engine/models"
)

// A model folder's config.json and tokenizer.json must be regular files.
func TestOpenRefusesSpecialFiles(t *testing.T) {
	fifoCfg := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifoCfg, "config.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	zeroCfg := t.TempDir()
	os.Symlink("/dev/zero", filepath.Join(zeroCfg, "config.json"))
	fifoTok := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifoTok, "tokenizer.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		open func() error
		want string
	}{
		{"fifo config", func() error { _, err := models.Open(fifoCfg); return err }, "is a FIFO, not a regular file"},
		{"zero config", func() error { _, err := models.Open(zeroCfg); return err }, "is a character device, not a regular file"},
		{"fifo tokenizer", func() error { _, err := models.LoadTokenizer(fifoTok); return err }, "is a FIFO, not a regular file"},
	} {
		done := make(chan error, 1)
		go func() { done <- c.open() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want %q", c.name, err, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s does not return", c.name)
		}
	}
}
