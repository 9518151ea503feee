package ffmpeg

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"verdict/media/internal/mediatest"
)

func TestFindMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Find()
	var ue *UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnavailable) || ue.Tool != "ffmpeg" {
		t.Fatalf("Find without ffmpeg: %v", err)
	}
	if !strings.Contains(err.Error(), "video input is unavailable: ffmpeg was not found on PATH") {
		t.Errorf("message %q", err)
	}
	// The zero Tools fails the same way instead of running "".
	err = (&Tools{}).Stream(context.Background(), "", Cmd{}, func(io.Reader) error { return nil })
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("zero Tools: %v", err)
	}
}

func TestRun(t *testing.T) {
	mediatest.Tool(t, "ffmpeg")
	mediatest.Tool(t, "ffprobe")
	tools, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	v, err := tools.Version(context.Background())
	if err != nil || !strings.HasPrefix(v, "ffmpeg version") {
		t.Errorf("Version: %q, %v", v, err)
	}
	// A failing run reports the tool's own message.
	_, err = tools.Output(context.Background(), tools.FFprobe, Cmd{Args: []string{"-v", "error", "/nonexistent.mp4"}}, 1024)
	if err == nil || !strings.Contains(err.Error(), "ffprobe failed") || !strings.Contains(err.Error(), "No such file") {
		t.Errorf("failing run: %v", err)
	}
	// Output past maxOut stops the tool.
	_, err = tools.Output(context.Background(), tools.FFmpeg, Cmd{Args: []string{"-v", "error",
		"-f", "lavfi", "-i", "anullsrc", "-f", "f32le", "pipe:1"}}, 1000)
	if err == nil || !strings.Contains(err.Error(), "exceeds 1000 bytes") {
		t.Errorf("endless output: %v", err)
	}
	// Standard input and a standard error writer.
	var stderr strings.Builder
	out, err := tools.Output(context.Background(), tools.FFmpeg, Cmd{
		Args:   []string{"-v", "info", "-f", "s16le", "-ar", "8000", "-ac", "1", "-i", "pipe:0", "-f", "s16le", "pipe:1"},
		Stdin:  strings.NewReader(strings.Repeat("\x00\x01", 800)),
		Stderr: &stderr,
	}, 1<<20)
	if err != nil || len(out) != 1600 || !strings.Contains(stderr.String(), "pcm_s16le") {
		t.Errorf("stdin run: %d bytes, %v, stderr %q", len(out), err, stderr.String())
	}
}

func TestTimeoutAndCancel(t *testing.T) {
	mediatest.Tool(t, "sleep")
	dir := t.TempDir()
	hang := filepath.Join(dir, "ffmpeg")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tools := &Tools{FFmpeg: hang, FFprobe: hang, Timeout: 200 * time.Millisecond}
	start := time.Now()
	_, err := tools.Output(context.Background(), tools.FFmpeg, Cmd{}, 10)
	if err == nil || !strings.Contains(err.Error(), "timed out after 200ms") || time.Since(start) > 5*time.Second {
		t.Errorf("timeout: %v after %v", err, time.Since(start))
	}
	tools.Timeout = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	start = time.Now()
	_, err = tools.Output(ctx, tools.FFmpeg, Cmd{}, 10)
	if !errors.Is(err, context.Canceled) || time.Since(start) > 5*time.Second {
		t.Errorf("cancel: %v after %v", err, time.Since(start))
	}
	// A file that is not executable cannot start: unavailable, with the reason.
	notExec := filepath.Join(dir, "ffprobe")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = tools.Output(context.Background(), notExec, Cmd{}, 10)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "could not be started") {
		t.Errorf("not executable: %v", err)
	}
}
