//go:build unix

package decode

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ImageFile and AudioFile refuse devices, FIFOs and sockets without blocking.
func TestFilesRefuseSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "photo.png")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "clip.wav")
	os.Symlink("/dev/zero", zero)
	for _, c := range []struct {
		name, path, want string
		read             func(string) error
	}{
		{"ImageFile", fifo, "is a FIFO, not a regular file", func(p string) error { _, _, err := ImageFile(p); return err }},
		{"AudioFile", fifo, "is a FIFO, not a regular file", func(p string) error { _, err := AudioFile(p, time.Minute); return err }},
		{"ImageFile", zero, "is a character device, not a regular file", func(p string) error { _, _, err := ImageFile(p); return err }},
		{"AudioFile", "/dev/zero", "is a character device, not a regular file", func(p string) error { _, err := AudioFile(p, time.Minute); return err }},
	} {
		done := make(chan error, 1)
		go func() { done <- c.read(c.path) }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s(%s) = %v, want %q", c.name, c.path, err, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s(%s) does not return", c.name, c.path)
		}
	}
}
