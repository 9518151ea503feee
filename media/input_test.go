package media

import (
	"errors"
	"image"
	"strings"
	"testing"
	"time"

	"verdict/media/limits"
	"verdict/media/pcm"
	"verdict/media/video"
)

func clip(d time.Duration) pcm.Clip {
	return pcm.Clip{Samples: make([]float32, int(d.Seconds()*pcm.ModelRate)), Rate: pcm.ModelRate}
}

func vid(source string, d time.Duration, frames int, sound bool) *video.Video {
	v := &video.Video{Source: source, Info: video.Info{Duration: d, HasVideo: true, HasAudio: sound}}
	for i := range frames {
		v.Frames = append(v.Frames, video.Frame{Time: time.Duration(i) * time.Second, Image: image.NewRGBA(image.Rect(0, 0, 2, 2))})
	}
	if sound {
		c := clip(d)
		v.Soundtrack = &c
	}
	return v
}

// limitErr returns the *limits.Error in err, failing the test when there is none.
func limitErr(t *testing.T, err error, limit string) *limits.Error {
	t.Helper()
	var le *limits.Error
	if !errors.As(err, &le) || le.Limit != limit {
		t.Fatalf("%v, want a %q limit error", err, limit)
	}
	return le
}

func TestAddImages(t *testing.T) {
	var in Input
	if !in.Empty() {
		t.Error("new input not empty")
	}
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	for i := range limits.MaxImages {
		if err := in.AddImage("img"+string(rune('a'+i)), img); err != nil {
			t.Fatal(err)
		}
	}
	err := in.AddImage("ninth.png", img)
	le := limitErr(t, err, limits.Images)
	if le.Value != 9 || le.Max != 8 || err.Error() != "ninth.png: images 9 exceeds the limit of 8" {
		t.Errorf("message %q", err)
	}
	if len(in.Images) != 8 || in.Validate() != nil {
		t.Errorf("%d images, validate %v", len(in.Images), in.Validate())
	}
	if err := in.AddImage("nil", nil); err == nil {
		t.Error("nil image accepted")
	}
}

func TestAudioAndVideoLimits(t *testing.T) {
	tests := []struct {
		name  string
		build func(in *Input) error
		limit string // "" for success
		msg   string
	}{
		{"30 s clip", func(in *Input) error { return in.SetAudio("a.wav", clip(30*time.Second)) }, "", ""},
		{"31 s clip", func(in *Input) error { return in.SetAudio("a.wav", clip(31*time.Second)) }, limits.AudioDuration,
			"a.wav: audio clip duration 31 s exceeds the limit of 30 s"},
		{"two clips", func(in *Input) error {
			if err := in.SetAudio("a.wav", clip(time.Second)); err != nil {
				return err
			}
			return in.SetAudio("b.mp3", clip(time.Second))
		}, limits.AudioSources, "b.mp3: audio sources 2 exceeds the limit of 1"},
		{"clip then video with sound", func(in *Input) error {
			if err := in.SetAudio("a.wav", clip(time.Second)); err != nil {
				return err
			}
			return in.SetVideo(vid("v.mp4", 3*time.Second, 3, true))
		}, limits.AudioSources, "v.mp4 (soundtrack, besides a.wav): audio sources 2 exceeds the limit of 1"},
		{"video with sound then clip", func(in *Input) error {
			if err := in.SetVideo(vid("v.mp4", 3*time.Second, 3, true)); err != nil {
				return err
			}
			return in.SetAudio("a.wav", clip(time.Second))
		}, limits.AudioSources, "a.wav: audio sources 2"},
		{"clip and silent video", func(in *Input) error {
			if err := in.SetAudio("a.wav", clip(time.Second)); err != nil {
				return err
			}
			return in.SetVideo(vid("v.mp4", 50*time.Second, 32, false))
		}, "", ""},
		{"61 s silent video", func(in *Input) error { return in.SetVideo(vid("v.mp4", 61*time.Second, 32, false)) },
			limits.SilentVideo, "v.mp4: silent video duration 61 s exceeds the limit of 60 s"},
		{"31 s video with sound", func(in *Input) error { return in.SetVideo(vid("v.mp4", 31*time.Second, 31, true)) },
			limits.VideoWithSound, "video with sound duration 31 s exceeds the limit of 30 s"},
		{"33 frames", func(in *Input) error { return in.SetVideo(vid("v.mp4", 40*time.Second, 33, false)) },
			limits.VideoFrames, "video frames 33 exceeds the limit of 32"},
		{"two videos", func(in *Input) error {
			if err := in.SetVideo(vid("v.mp4", 3*time.Second, 3, false)); err != nil {
				return err
			}
			return in.SetVideo(vid("w.mp4", 3*time.Second, 3, false))
		}, limits.Videos, "w.mp4: videos 2 exceeds the limit of 1"},
	}
	for _, tt := range tests {
		var in Input
		err := tt.build(&in)
		if tt.limit == "" {
			if err != nil || in.Validate() != nil {
				t.Errorf("%s: %v / %v", tt.name, err, in.Validate())
			}
			continue
		}
		var le *limits.Error
		if !errors.As(err, &le) || le.Limit != tt.limit || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v, want %q (%s)", tt.name, err, tt.msg, tt.limit)
		}
		if in.Validate() != nil {
			t.Errorf("%s: a refused item was kept: %v", tt.name, in.Validate())
		}
	}
}

func TestValidateFilledFields(t *testing.T) {
	c := clip(40 * time.Second)
	in := Input{
		Images: make([]Image, 9),
		Audio:  &Audio{Source: "a.wav", Clip: c},
		Video:  vid("v.mp4", 40*time.Second, 33, true),
	}
	for i := range in.Images {
		in.Images[i] = Image{Source: "x", Image: image.NewRGBA(image.Rect(0, 0, 1, 1))}
	}
	err := in.Validate()
	for _, want := range []string{"images 9", "audio clip duration 40 s", "video with sound duration 40 s", "video frames 33", "audio sources 2"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to say %q", err, want)
		}
	}
	bad := Input{Audio: &Audio{Source: "raw", Clip: pcm.Clip{Samples: make([]float32, 10), Rate: 44100}}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "44100 Hz") {
		t.Errorf("44.1 kHz clip: %v", err)
	}
}

func TestSound(t *testing.T) {
	var in Input
	if _, _, ok := in.Sound(); ok {
		t.Error("sound in an empty input")
	}
	if err := in.SetVideo(vid("v.mp4", 2*time.Second, 2, true)); err != nil {
		t.Fatal(err)
	}
	src, c, ok := in.Sound()
	if !ok || src != "v.mp4" || c.Duration() != 2*time.Second {
		t.Errorf("video sound %q %v %v", src, c.Duration(), ok)
	}
	in = Input{}
	if err := in.SetAudio("mic", clip(time.Second)); err != nil {
		t.Fatal(err)
	}
	if src, _, ok := in.Sound(); !ok || src != "mic" {
		t.Errorf("clip sound %q", src)
	}
}
