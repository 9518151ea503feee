//go:build unix

package scorer

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// LoadCalibration refuses what is not a small regular file, without blocking.
func TestLoadCalibrationRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "calib.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.json")
	os.Symlink("/dev/zero", zero)
	big := filepath.Join(dir, "big.json")
	os.WriteFile(big, []byte(`{"global_temperature": 1, "note": "`+strings.Repeat("x", MaxCalibrationBytes)+`"}`), 0o644)
	for path, want := range map[string]string{
		fifo:        "is a FIFO, not a regular file",
		zero:        "is a character device, not a regular file",
		"/dev/zero": "is a character device, not a regular file",
		big:         "over the limit of 1.0 MiB",
	} {
		done := make(chan error, 1)
		go func() { _, err := LoadCalibration(path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("LoadCalibration(%s) = %v, want %q", path, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("LoadCalibration(%s) does not return", path)
		}
	}
}
