// Package decode turns image and audio files into what the model's
// preprocessing takes: image.Image values (PNG, JPEG, GIF, WebP, BMP) and mono
// float32 PCM at 16 kHz (WAV, MP3, FLAC, Ogg Vorbis). Formats are detected
// from the content, never from the file name; every failure is an *Error that
// names the file and the format.
package decode

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"verdict/engine/safefile"
	"verdict/media/limits"
)

// Problems an *Error can report; test with errors.Is.
var (
	ErrUnsupported = errors.New("unsupported format")
	ErrCorrupt     = errors.New("corrupt data")
	ErrTruncated   = errors.New("truncated file")
	ErrEmpty       = errors.New("empty file")
)

// Error is a failure to decode one file.
type Error struct {
	Name    string // the file (or other source) name
	Format  string // the detected format, "" when unknown
	Problem error  // ErrUnsupported, ErrCorrupt, ErrTruncated or ErrEmpty
	Err     error  // the underlying cause, may be nil
}

func (e *Error) Error() string {
	msg := "decode " + e.Name
	if e.Format != "" {
		msg += " (" + e.Format + ")"
	}
	msg += ": " + e.Problem.Error()
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the problem and the cause, so errors.Is matches either.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Problem}
	}
	return []error{e.Problem, e.Err}
}

// fail classifies a decoder's error: unexpected ends of data are truncations,
// anything else is corruption.
func fail(name, format string, err error) *Error {
	var de *Error
	if errors.As(err, &de) {
		if de.Name == "" {
			de.Name = name
		}
		if de.Format == "" {
			de.Format = format
		}
		return de
	}
	problem := ErrCorrupt
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		strings.Contains(err.Error(), "not enough") { // image/png, image/gif on short data
		problem = ErrTruncated
	}
	return &Error{Name: name, Format: format, Problem: problem, Err: err}
}

// unsupportedf reports a variant of a known format that is not decoded.
func unsupportedf(msg string, args ...any) *Error {
	return &Error{Problem: ErrUnsupported, Err: fmt.Errorf(msg, args...)}
}

// guard turns a panic of a third-party decoder on hostile input into an error.
func guard(name, format string, err *error) {
	if r := recover(); r != nil {
		*err = &Error{Name: name, Format: format, Problem: ErrCorrupt, Err: fmt.Errorf("decoder panicked: %v", r)}
	}
}

// readFile reads a whole file of at most limits.MaxFileBytes.
func readFile(path string) ([]byte, error) {
	f, st, err := safefile.Open(path) // a regular file: no device, FIFO or socket
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	defer f.Close()
	if st.Size() > limits.MaxFileBytes {
		e := limits.Bytes(st.Size(), limits.MaxFileBytes)
		e.Source = path
		return nil, e
	}
	data, err := safefile.ReadAll(f, path, limits.MaxFileBytes)
	var big *safefile.TooLargeError
	if errors.As(err, &big) { // it grew after the size check
		e := limits.Bytes(big.Size, limits.MaxFileBytes)
		e.Source, e.AtLeast = path, true
		return nil, e
	}
	if err != nil {
		return nil, fmt.Errorf("decode: read %s: %w", path, err)
	}
	return data, nil
}
