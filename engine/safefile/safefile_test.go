//go:build unix

package safefile

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small.json")
	os.WriteFile(small, []byte(`{"a":1}`), 0o644)
	big := filepath.Join(dir, "big.json")
	os.WriteFile(big, bytes.Repeat([]byte("x"), 2000), 0o644)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(fifo, link)
	goodLink := filepath.Join(dir, "good-link")
	os.Symlink(small, goodLink)
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	for _, c := range []struct {
		path, want string // want: the error's text ("" for none)
	}{
		{small, ""},
		{goodLink, ""},
		{big, big + " is 2.0 KiB, over the limit of 1000 bytes"},
		{"/dev/zero", "/dev/zero is a character device, not a regular file"},
		{fifo, fifo + " is a FIFO, not a regular file"},
		{link, link + " is a FIFO, not a regular file"},
		{sock, sock + " is a socket, not a regular file"},
		{dir, dir + " is a folder, not a regular file"},
		{filepath.Join(dir, "missing"), "no such file or directory"},
	} {
		done := make(chan struct{})
		var b []byte
		var err error
		go func() { b, err = ReadFile(c.path, 1000); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("ReadFile(%s) blocks", c.path)
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("ReadFile(%s): %v", c.path, err)
		case c.want == "" && string(b) != `{"a":1}`:
			t.Errorf("ReadFile(%s) = %q", c.path, b)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("ReadFile(%s) = %v, want %q", c.path, err, c.want)
		}
	}
}

// The fstat after the open catches a FIFO that replaced a checked file,
// without blocking on it.
func TestOpenCheckedFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		f, _, err := openChecked(fifo)
		if f != nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "is a FIFO") {
			t.Errorf("openChecked(fifo) = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("openChecked blocks on a FIFO")
	}
}

// A regular file opened by Open reads normally (O_NONBLOCK cleared).
func TestOpenRegular(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, []byte("hello"), 0o644)
	f, fi, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fi.Size() != 5 {
		t.Errorf("size %d", fi.Size())
	}
	b, err := ReadAll(f, p, 5)
	if err != nil || string(b) != "hello" {
		t.Errorf("ReadAll = %q, %v", b, err)
	}
}

func TestReadAllLimit(t *testing.T) {
	f, err := os.Open("/dev/zero")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	_, err = ReadAll(f, "/dev/zero", 1<<20)
	var tl *TooLargeError
	if !errors.As(err, &tl) || !tl.AtLeast || tl.Max != 1<<20 {
		t.Fatalf("ReadAll(/dev/zero) = %v", err)
	}
	if want := "/dev/zero is over the limit of 1.0 MiB"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}
