package availability

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"verdict/media/capture"
	_ "verdict/media/capture/synthetic"
	"verdict/media/internal/mediatest"
	"verdict/media/playback"
)

func TestCheck(t *testing.T) {
	mediatest.Tool(t, "ffmpeg")
	start := time.Now()
	r := Check(context.Background(), capture.Open(capture.Synthetic), 2*time.Second)
	if !r.Camera.Available || len(r.Camera.Devices) != 1 || r.Camera.Devices[0] != "VideoTest" {
		t.Errorf("camera %+v", r.Camera)
	}
	if !r.Microphone.Available || r.Microphone.Devices[0] != "AudioTest" {
		t.Errorf("microphone %+v", r.Microphone)
	}
	if !r.Video.Available || !strings.HasPrefix(r.Video.Devices[0], "ffmpeg version") {
		t.Errorf("video %+v", r.Video)
	}
	// With or without a sound card, the speaker has an answer.
	if !r.Speaker.Available && !strings.HasPrefix(r.Speaker.Reason, "no speaker: ") {
		t.Errorf("speaker %+v", r.Speaker)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("check took %v", time.Since(start))
	}
}

func TestCheckNothingAvailable(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	r := Check(context.Background(), capture.Open(capture.Hardware), time.Second)
	for name, f := range map[string]Feature{"camera": r.Camera, "microphone": r.Microphone, "video": r.Video} {
		if f.Available || f.Reason == "" {
			t.Errorf("%s: %+v, want unavailable with a reason", name, f)
		}
	}
	if !strings.HasPrefix(r.Camera.Reason, "no camera: ") || !strings.HasPrefix(r.Microphone.Reason, "no microphone: ") {
		t.Errorf("reasons %q, %q", r.Camera.Reason, r.Microphone.Reason)
	}
	if !strings.Contains(r.Video.Reason, "video input is unavailable: ffmpeg was not found") {
		t.Errorf("video reason %q", r.Video.Reason)
	}
}

func TestSpeakerPlainReason(t *testing.T) {
	alsa := errors.New("oto: ALSA error at snd_pcm_open: No such file or directory")
	for _, c := range []struct {
		name           string
		err            error
		reason, detail string
	}{
		{"available", nil, "", ""},
		{"no sound card", &playback.UnavailableError{Reason: alsa.Error(), Err: alsa}, "no speaker: no sound output device was found", alsa.Error()},
		{"not ready", &playback.UnavailableError{Reason: "the audio device did not become ready within 2s"}, "no speaker: the audio device did not become ready within 2s", ""},
		{"other error", alsa, "no speaker: the sound output could not be opened", alsa.Error()},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := speaker(c.err)
			if f.Available != (c.err == nil) || f.Reason != c.reason || f.Detail != c.detail {
				t.Errorf("speaker(%v) = %+v, want reason %q, detail %q", c.err, f, c.reason, c.detail)
			}
			if strings.Contains(f.Reason, "ALSA") {
				t.Errorf("the reason %q shows the driver's text", f.Reason)
			}
		})
	}
}
