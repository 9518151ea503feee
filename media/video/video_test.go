package video

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"verdict/media/ffmpeg"
	"verdict/media/internal/mediatest"
	"verdict/media/limits"
	"verdict/media/pcm"
)

// makeVideo renders a test video with ffmpeg's lavfi sources: testsrc
// pictures and, when tone > 0, a sine soundtrack of that frequency.
func makeVideo(t *testing.T, name string, d time.Duration, size string, fps int, tone float64, extra ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	sec := secondsArg(d)
	args := []string{"-nostdin", "-v", "error", "-y",
		"-f", "lavfi", "-i", "testsrc=duration=" + sec + ":size=" + size + ":rate=" + itoa(fps)}
	if tone > 0 {
		args = append(args, "-f", "lavfi", "-i", "sine=frequency="+itoa(int(tone))+":duration="+sec+":sample_rate=44100",
			"-ac", "2")
	}
	args = append(args, "-pix_fmt", "yuv420p")
	args = append(args, extra...)
	mediatest.Run(t, "ffmpeg", append(args, path)...)
	return path
}

func itoa(v int) string { return strconv.Itoa(v) }

func reader(t *testing.T) *Reader {
	t.Helper()
	mediatest.Tool(t, "ffmpeg")
	mediatest.Tool(t, "ffprobe")
	r, err := NewReader()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestLoadVideoWithSound(t *testing.T) {
	r := reader(t)
	path := makeVideo(t, "clip.mp4", 3*time.Second, "320x240", 25, 440)
	v, err := r.Load(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !v.Info.HasVideo || !v.Info.HasAudio || v.Info.Width != 320 || v.Info.Height != 240 {
		t.Errorf("info %+v", v.Info)
	}
	if d := v.Info.Duration; d < 2900*time.Millisecond || d > 3100*time.Millisecond {
		t.Errorf("duration %v", d)
	}
	if v.Interval != time.Second || len(v.Frames) != 3 {
		t.Fatalf("%d frames every %v, want 3 every 1s", len(v.Frames), v.Interval)
	}
	for i, f := range v.Frames {
		if f.Time != time.Duration(i)*time.Second {
			t.Errorf("frame %d at %v, want %ds", i, f.Time, i)
		}
		if f.Image.Bounds().Dx() != 320 || f.Image.Bounds().Dy() != 240 {
			t.Errorf("frame %d size %v", i, f.Image.Bounds())
		}
	}
	// testsrc draws a running counter: successive frames differ.
	if string(v.Frames[0].Image.Pix) == string(v.Frames[1].Image.Pix) {
		t.Error("frames 0 and 1 are identical")
	}
	if !v.HasSound() || v.Soundtrack.Rate != pcm.ModelRate {
		t.Fatalf("soundtrack %+v", v.Soundtrack)
	}
	if d := v.Soundtrack.Duration(); d < 2900*time.Millisecond || d > 3100*time.Millisecond {
		t.Errorf("soundtrack %v, want about 3s", d)
	}
	mid := v.Soundtrack.Samples[8000:40000]
	// lavfi's sine has amplitude 1/8; ffmpeg's upmix to stereo scales it by 1/√2.
	if lvl := mediatest.Level(mid, pcm.ModelRate, 440); lvl < 0.08 || lvl > 0.095 {
		t.Errorf("440 Hz level %.4f, want 0.088", lvl)
	}
	if lvl := mediatest.Level(mid, pcm.ModelRate, 1000); lvl > 0.005 {
		t.Errorf("1 kHz level %.4f", lvl)
	}
}

func TestLoadSilentVideoSpansFrames(t *testing.T) {
	r := reader(t)
	path := makeVideo(t, "long.mkv", 45*time.Second, "64x48", 5, 0)
	v, err := r.Load(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v.HasSound() || v.Info.HasAudio {
		t.Error("silent video has a soundtrack")
	}
	if len(v.Frames) != limits.MaxVideoFrames {
		t.Fatalf("%d frames, want %d", len(v.Frames), limits.MaxVideoFrames)
	}
	want := time.Duration(1406250 * time.Microsecond) // 45 s / 32
	if v.Interval != want {
		t.Errorf("interval %v, want %v", v.Interval, want)
	}
	for i := 1; i < len(v.Frames); i++ {
		gap := v.Frames[i].Time - v.Frames[i-1].Time
		if gap < time.Second || gap > 1600*time.Millisecond {
			t.Errorf("frame %d at %v, %v after the previous one", i, v.Frames[i].Time, gap)
		}
	}
	if last := v.Frames[len(v.Frames)-1].Time; last < 43*time.Second || last >= 45*time.Second {
		t.Errorf("last frame at %v, want near the end", last)
	}
}

func TestLoadLimits(t *testing.T) {
	r := reader(t)
	tests := []struct {
		name  string
		d     time.Duration
		tone  float64
		limit string
	}{
		{"sound.mp4", 31 * time.Second, 440, limits.VideoWithSound},
		{"silent.mp4", 61 * time.Second, 0, limits.SilentVideo},
	}
	for _, tt := range tests {
		path := makeVideo(t, tt.name, tt.d, "32x24", 1, tt.tone)
		start := time.Now()
		_, err := r.Load(context.Background(), path, Options{})
		var le *limits.Error
		if !errors.As(err, &le) || le.Limit != tt.limit || le.Source != path {
			t.Errorf("%s: %v, want a %q limit error", tt.name, err, tt.limit)
			continue
		}
		if time.Since(start) > 5*time.Second {
			t.Errorf("%s: refusing took %v: it should need only ffprobe", tt.name, time.Since(start))
		}
	}
	// 59 s of silent video is fine.
	path := makeVideo(t, "ok.mp4", 59*time.Second, "32x24", 1, 0)
	if v, err := r.Load(context.Background(), path, Options{}); err != nil || len(v.Frames) != 32 {
		t.Errorf("59 s silent video: %v", err)
	}
}

func TestLoadOffsetStartAndOptions(t *testing.T) {
	r := reader(t)
	// MPEG-TS streams start at 1.4 s: frame times still count from 0.
	path := makeVideo(t, "clip.ts", 4*time.Second, "640x360", 10, 300, "-c:v", "mpeg2video", "-c:a", "mp2")
	v, err := r.Load(context.Background(), path, Options{FPS: 2, MaxSide: 320})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Frames) != 8 || v.Interval != 500*time.Millisecond {
		t.Fatalf("%d frames every %v, want 8 every 500ms", len(v.Frames), v.Interval)
	}
	if v.Frames[0].Time != 0 || v.Frames[1].Time != 500*time.Millisecond {
		t.Errorf("frame times %v, %v", v.Frames[0].Time, v.Frames[1].Time)
	}
	if b := v.Frames[0].Image.Bounds(); b.Dx() != 320 || b.Dy() != 180 {
		t.Errorf("scaled frame %v, want 320×180", b)
	}
}

func TestRotatedVideo(t *testing.T) {
	r := reader(t)
	plain := makeVideo(t, "plain.mp4", 2*time.Second, "64x32", 10, 0)
	path := filepath.Join(t.TempDir(), "phone.mp4")
	mediatest.Run(t, "ffmpeg", "-nostdin", "-v", "error", "-i", plain, "-c", "copy", "-metadata:s:v:0", "rotate=90", path)
	v, err := r.Load(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// ffmpeg turns the frames upright; the info says the displayed size.
	b := v.Frames[0].Image.Bounds()
	if v.Info.Width != 32 || v.Info.Height != 64 || b.Dx() != 32 || b.Dy() != 64 {
		t.Errorf("rotated 64×32 video: info %d×%d, frame %v, want 32×64", v.Info.Width, v.Info.Height, b)
	}
}

func TestSoundtrackOfAudioFile(t *testing.T) {
	r := reader(t)
	dir := t.TempDir()
	m4a := filepath.Join(dir, "voice.m4a")
	mediatest.Run(t, "ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i", "sine=frequency=500:duration=2", "-c:a", "aac", m4a)
	clip, err := r.Soundtrack(context.Background(), m4a, limits.MaxAudio)
	if err != nil {
		t.Fatal(err)
	}
	if clip.Rate != pcm.ModelRate || clip.Duration() < 1900*time.Millisecond {
		t.Errorf("clip %d Hz %v", clip.Rate, clip.Duration())
	}
	if _, err := r.Load(context.Background(), m4a, Options{}); !errors.Is(err, ErrNoVideo) {
		t.Errorf("Load(audio file): %v, want ErrNoVideo", err)
	}
	long := filepath.Join(dir, "long.m4a")
	mediatest.Run(t, "ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i", "sine=duration=35", "-c:a", "aac", long)
	var le *limits.Error
	if _, err := r.Soundtrack(context.Background(), long, limits.MaxAudio); !errors.As(err, &le) || le.Limit != limits.AudioDuration {
		t.Errorf("35 s audio: %v", err)
	}
}

func TestCorruptVideo(t *testing.T) {
	r := reader(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.mp4")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("not a video ", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := r.Load(context.Background(), garbage, Options{})
	if err == nil || !strings.Contains(err.Error(), "garbage.mp4") {
		t.Errorf("garbage: %v", err)
	}
	good := makeVideo(t, "cut.mp4", 3*time.Second, "160x120", 25, 440)
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.mp4")
	if err := os.WriteFile(cut, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Load(context.Background(), cut, Options{}); err == nil || !strings.Contains(err.Error(), "cut.mp4") {
		t.Errorf("truncated mp4: %v", err)
	}
	if _, err := r.Load(context.Background(), filepath.Join(dir, "missing.mp4"), Options{}); err == nil {
		t.Error("missing file: no error")
	}
}

func TestMissingFFmpeg(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := NewReader()
	if !errors.Is(err, ffmpeg.ErrUnavailable) {
		t.Fatalf("NewReader without ffmpeg: %v", err)
	}
	var ue *ffmpeg.UnavailableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "video input is unavailable: ffmpeg was not found") {
		t.Errorf("message %q", err)
	}
}

// fakeTools writes ffmpeg and ffprobe stand-ins that never finish.
func fakeTools(t *testing.T) *ffmpeg.Tools {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"ffmpeg", "ffprobe"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	tools, err := ffmpeg.Find()
	if err != nil {
		t.Fatal(err)
	}
	return tools
}

func TestHungToolsTimeOut(t *testing.T) {
	mediatest.Tool(t, "sleep")
	tools := fakeTools(t)
	tools.Timeout = 300 * time.Millisecond
	r := NewReaderWith(tools)
	start := time.Now()
	_, err := r.Load(context.Background(), "any.mp4", Options{})
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("hung ffprobe: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("took %v", time.Since(start))
	}
	// Cancelling the context stops it too.
	tools.Timeout = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = r.Load(ctx, "any.mp4", Options{})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("cancelled: %v after %v", err, time.Since(start))
	}
}
