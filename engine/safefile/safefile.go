// Package safefile opens and reads files that a user or a settings file
// names, refusing what is not a regular file: a device such as /dev/zero
// would be read until memory runs out, a FIFO would block the reader, a
// socket cannot be read as a file. Every read goes through a size limit.
//
// It imports nothing of Verdict, so app, engine and media can all use it.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrNotRegular is wrapped by the error for a path that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// NotRegularError names a path that is a folder, device, FIFO or socket.
type NotRegularError struct {
	Path string
	What string // "a FIFO", "a character device", ...
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is %s, not a regular file", e.Path, e.What)
}

// Unwrap makes errors.Is(err, ErrNotRegular) true.
func (e *NotRegularError) Unwrap() error { return ErrNotRegular }

// TooLargeError is a file over the limit a reader set. AtLeast means the
// file grew while it was read: Size is what was read before stopping.
type TooLargeError struct {
	Path    string
	Size    int64
	Max     int64
	AtLeast bool
}

func (e *TooLargeError) Error() string {
	if e.AtLeast {
		return fmt.Sprintf("%s is over the limit of %s", e.Path, Size(e.Max))
	}
	return fmt.Sprintf("%s is %s, over the limit of %s", e.Path, Size(e.Size), Size(e.Max))
}

// Size writes a byte count for people: 512 bytes, 3.2 KiB, 16.0 MiB, 1.5 GiB.
func Size(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// describe names a file mode that is not a regular file ("" for one that is).
func describe(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return ""
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "a special file"
}

// Check returns a *NotRegularError when fi is not a regular file.
func Check(path string, fi fs.FileInfo) error {
	if what := describe(fi.Mode()); what != "" {
		return &NotRegularError{Path: path, What: what}
	}
	return nil
}

// Open opens path for reading when it is a regular file (symbolic links are
// followed). It does not block on a FIFO: the file is opened non-blocking and
// checked with fstat, so a path swapped between the check and the open is
// caught too. The returned info is the opened file's.
func Open(path string) (*os.File, fs.FileInfo, error) {
	// A socket cannot be opened at all (ENXIO): name it from stat first.
	if fi, err := os.Stat(path); err != nil {
		return nil, nil, err
	} else if err := Check(path, fi); err != nil {
		return nil, nil, err
	}
	return openChecked(path)
}

// openChecked opens path without blocking and checks what it opened.
func openChecked(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if err := Check(path, fi); err != nil {
		f.Close()
		return nil, nil, err
	}
	if err := blocking(f); err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// ReadFile reads a regular file of at most max bytes.
func ReadFile(path string, max int64) ([]byte, error) {
	f, fi, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > max {
		return nil, &TooLargeError{Path: path, Size: fi.Size(), Max: max}
	}
	return ReadAll(f, path, max)
}

// ReadAll reads r to its end, at most max bytes; name names r in the error.
func ReadAll(r io.Reader, name string, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, &TooLargeError{Path: name, Size: int64(len(b)), Max: max, AtLeast: true}
	}
	return b, nil
}
