//go:build unix

package app

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// specialFiles makes a FIFO, a link to /dev/zero and a unix socket, each
// with a name that looks like an input file; it returns name → the error text
// that reading it must give.
func specialFiles(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.wav")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.txt")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock.png")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return map[string]string{
		fifo:        "is a FIFO, not a regular file",
		zero:        "is a character device, not a regular file",
		"/dev/zero": "is a character device, not a regular file",
		sock:        "is a socket, not a regular file",
	}
}

// within fails the test when f does not return in time (a read that blocks
// or never ends).
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s does not return", what)
	}
}

func TestReadFilesRefusesSpecialFiles(t *testing.T) {
	s, _ := mediaServices(t, nil)
	for path, want := range specialFiles(t) {
		var fs []InputFile
		within(t, "ReadFiles "+path, func() { fs = s.System.ReadFiles([]string{path}) })
		if len(fs) != 1 || fs[0].Supported || !strings.Contains(fs[0].Reason, want) {
			t.Errorf("ReadFiles(%s) = %+v, want %q", path, fs, want)
		}
	}
}

func TestAddFilesRefusesSpecialFiles(t *testing.T) {
	s, _ := mediaServices(t, nil)
	for path, want := range specialFiles(t) {
		var rs []MediaResult
		within(t, "AddFiles "+path, func() { rs = s.Media.AddFiles([]string{path}) })
		if len(rs) != 1 || rs[0].Item != nil || !strings.Contains(rs[0].Error, want) {
			t.Errorf("AddFiles(%s) = %+v, want %q", path, rs, want)
		}
	}
}

func TestSettingsRefuseSpecialFiles(t *testing.T) {
	log := quietLogger()
	def := DefaultPreferences()
	for path := range specialFiles(t) {
		var s *Settings
		within(t, "NewSettings "+path, func() { s = NewSettings(path, NewLogs(log, NewRecorder()), log, NewRecorder()) })
		if s.Get() != def {
			t.Errorf("settings from %s: %+v", path, s.Get())
		}
	}
}

// A calibration file in the settings is read at the start of each run: a
// device or FIFO there fails the run at once.
func TestRunRefusesSpecialCalibration(t *testing.T) {
	s, _ := mediaServices(t, nil)
	for path, want := range specialFiles(t) {
		p := s.Settings.Get()
		p.Run.Scorer.Calibration = path
		if _, err := s.Settings.Set(p); err != nil {
			t.Fatal(err)
		}
		var err error
		within(t, "Runs.Start with calibration "+path, func() { _, err = s.Runs.Start(RunRequest{Input: "x", Schema: ticketSchema(t)}) })
		if err == nil || !strings.Contains(err.Error(), "calibration: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("calibration %s: %v, want %q", path, err, want)
		}
	}
}
