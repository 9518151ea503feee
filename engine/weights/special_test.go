//go:build unix

package weights

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The checkpoint's index, its shards and a recipe must be regular files:
// a FIFO neither blocks the loader nor gets mapped, /dev/zero is not read.
func TestOpenRefusesSpecialFiles(t *testing.T) {
	mk := func(t *testing.T, name string, special func(path string) error) string {
		dir := t.TempDir()
		if err := special(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	fifo := func(p string) error { return syscall.Mkfifo(p, 0o644) }
	zero := func(p string) error { return os.Symlink("/dev/zero", p) }
	indexToFIFO := func(p string) error {
		if err := os.WriteFile(p, []byte(`{"weight_map": {"a": "shard.safetensors"}}`), 0o644); err != nil {
			return err
		}
		return syscall.Mkfifo(filepath.Join(filepath.Dir(p), "shard.safetensors"), 0o644)
	}
	for _, c := range []struct {
		name, file string
		special    func(string) error
		want       string
	}{
		{"fifo index", indexFile, fifo, "is a FIFO, not a regular file"},
		{"zero index", indexFile, zero, "is a character device, not a regular file"},
		{"fifo shard", indexFile, indexToFIFO, "is a FIFO, not a regular file"},
		{"fifo single", singleFile, fifo, "is a FIFO, not a regular file"},
		{"zero single", singleFile, zero, "is a character device, not a regular file"},
		{"fifo recipe", recipeFile, fifo, "is a FIFO, not a regular file"},
		{"zero recipe", recipeFile, zero, "is a character device, not a regular file"},
	} {
		dir := mk(t, c.file, c.special)
		done := make(chan error, 1)
		go func() {
			st, err := Open(dir)
			if st != nil {
				st.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: Open = %v, want %q", c.name, err, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Open does not return", c.name)
		}
	}
}
