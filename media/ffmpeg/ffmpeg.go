// Package ffmpeg runs the ffmpeg and ffprobe command-line tools, each run
// bound to a context and a timeout, with a typed error when the tools are
// missing. media/video (and the MP3 fallback of media/decode) build on it.
package ffmpeg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"
)

// DefaultTimeout bounds one run of a tool when Tools.Timeout is zero.
const DefaultTimeout = 2 * time.Minute

// ErrUnavailable is matched (errors.Is) by every *UnavailableError.
var ErrUnavailable = errors.New("ffmpeg unavailable")

// UnavailableError says that video input (or another feature needing the
// ffmpeg tools) is unavailable, and why.
type UnavailableError struct {
	Tool   string // "ffmpeg" or "ffprobe"
	Reason string
	Err    error
}

func (e *UnavailableError) Error() string {
	return "video input is unavailable: " + e.Reason
}

// Is reports whether target is ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// Tools locates ffmpeg and ffprobe. The zero Timeout means DefaultTimeout.
type Tools struct {
	FFmpeg  string
	FFprobe string
	Timeout time.Duration
}

// Find looks both tools up on PATH. Its error is an *UnavailableError.
func Find() (*Tools, error) {
	t := &Tools{}
	for _, tool := range []struct {
		name string
		dst  *string
	}{{"ffmpeg", &t.FFmpeg}, {"ffprobe", &t.FFprobe}} {
		p, err := exec.LookPath(tool.name)
		if err != nil {
			return nil, &UnavailableError{Tool: tool.name, Err: err,
				Reason: tool.name + " was not found on PATH (install ffmpeg to enable video files)"}
		}
		*tool.dst = p
	}
	return t, nil
}

// Cmd is one run of a tool: its arguments, standard input (may be nil) and,
// optionally, a writer that also receives its standard error as it comes.
type Cmd struct {
	Args   []string
	Stdin  io.Reader
	Stderr io.Writer
}

// Version returns the first line of `ffmpeg -version`, checking that the tool
// runs at all.
func (t *Tools) Version(ctx context.Context) (string, error) {
	out, err := t.Output(ctx, t.FFmpeg, Cmd{Args: []string{"-version"}}, 1<<16)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line), nil
}

// Output runs a tool (t.FFmpeg or t.FFprobe) and returns its standard
// output, at most maxOut bytes (more is an error).
func (t *Tools) Output(ctx context.Context, tool string, c Cmd, maxOut int64) ([]byte, error) {
	var out []byte
	err := t.Stream(ctx, tool, c, func(stdout io.Reader) error {
		var err error
		out, err = io.ReadAll(io.LimitReader(stdout, maxOut+1))
		if err == nil && int64(len(out)) > maxOut {
			err = fmt.Errorf("output exceeds %d bytes", maxOut)
		}
		return err
	})
	return out, err
}

// Stream runs a tool and hands its standard output to read while it runs.
// The process is killed when ctx ends, when the timeout passes or when read
// returns an error; its standard error (the last lines) goes into the error.
func (t *Tools) Stream(ctx context.Context, tool string, c Cmd, read func(stdout io.Reader) error) error {
	if tool == "" {
		return &UnavailableError{Tool: "ffmpeg", Reason: "ffmpeg was not located (use ffmpeg.Find)"}
	}
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, c.Args...)
	cmd.Stdin = c.Stdin
	cmd.WaitDelay = 2 * time.Second // never wait long on pipes after a kill
	stderr := &tailBuffer{max: 4096}
	cmd.Stderr = stderr
	if c.Stderr != nil {
		cmd.Stderr = io.MultiWriter(stderr, c.Stderr)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("%s: %w", name(tool), err)
	}
	if err := cmd.Start(); err != nil {
		return &UnavailableError{Tool: name(tool), Err: err, Reason: fmt.Sprintf("%s could not be started: %v", name(tool), err)}
	}
	readErr := read(stdout)
	if readErr != nil {
		cancel() // stop the tool; its exit error is not the story
	}
	_, _ = io.Copy(io.Discard, stdout)
	waitErr := cmd.Wait()
	switch {
	case parent.Err() != nil:
		return fmt.Errorf("%s: %w", name(tool), parent.Err())
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%s timed out after %v: %w", name(tool), timeout, ctx.Err())
	case readErr != nil:
		return fmt.Errorf("%s: %w", name(tool), readErr)
	case waitErr != nil:
		return fmt.Errorf("%s failed: %w: %s", name(tool), waitErr, stderr.String())
	}
	return nil
}

func name(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	buf bytes.Buffer
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	return strings.TrimSpace(b.buf.String())
}
